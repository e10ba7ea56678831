import ArgumentParser
import CommandLineSupport
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import H3
import HTTPTypes
import Logging
import QuicTransport

/// The entry point: glibc's malloc cache sized for a QUIC loop's batches (`runWithMallocTunables`),
/// then the command, on a blocked main thread (`runWithBlockedMainThread` says why).
@main
enum H3LoadMain {
    static func main() {
        runWithMallocTunables()
        runWithBlockedMainThread { await H3Load.main() }
    }
}

/// `h3load`: an HTTP/3 load generator in the manner of nghttp2's h2load.
struct H3Load: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "h3load",
        abstract: "Load an HTTP/3 server with GET requests and report throughput and latency, in the manner of h2load.",
        discussion: """
            Each client is one QUIC connection with -m request loops; all loops share the -n \
            requests, so exactly -n are sent, cycling through the URLs in order. With -D they keep \
            sending until the time is up; requests still unfinished a second later are cancelled \
            and counted as timeouts. "time for request" is the time to the end of the response \
            body; "time for connect" is the QUIC handshake; MB/s counts response bodies.

            The exit status is 0 when every request got a 2xx or 3xx response and every client \
            connected, and 1 otherwise.
            """
    )

    @Argument(help: "https:// URLs, all with the same authority.")
    var urls: [String]

    @Option(name: [.customShort("n"), .customLong("requests")], help: ArgumentHelp("Total number of requests, split evenly among the clients as h2load does (ignored with -D).", valueName: "N"))
    var requests = 1

    @Option(name: [.customShort("c"), .customLong("clients")], help: ArgumentHelp("Number of clients (QUIC connections).", valueName: "N"))
    var clients = 1

    @Option(name: [.customShort("m"), .customLong("max-concurrent-streams")], help: ArgumentHelp("Requests in flight on each connection.", valueName: "N"))
    var maxConcurrentStreams = 1

    @Option(name: [.customShort("D"), .customLong("duration")], help: ArgumentHelp("Send requests for this many seconds instead of -n.", valueName: "SECONDS"))
    var duration: Double?

    @Option(name: .customLong("warm-up-time"), help: ArgumentHelp("With -D, send requests for this many seconds before measuring.", valueName: "SECONDS"))
    var warmUpTime: Double?

    @Option(name: [.customShort("r"), .customLong("rate")], help: ArgumentHelp("Start this many connections per second (0: all at once).", valueName: "N"))
    var rate = 0

    @Option(name: [.customShort("H"), .customLong("header")], help: "Extra request header, \"Name: value\".")
    var headers: [String] = []

    @OptionGroup
    var trust: ServerTrustOptions

    @Option(name: .customLong("qlog-dir"), help: "Write a qlog trace per connection here (default: $QLOGDIR).")
    var qlogDirectory: String?

    @Flag(help: "Print the summary as one JSON object on stdout instead of the text report.")
    var json = false

    @Flag(name: [.customShort("v"), .customLong("verbose")], help: "Log what the library warns about on stderr.")
    var verbose = false

    func validate() throws {
        guard !urls.isEmpty else { throw ValidationError("no URL given") }
        let authorities = try urls.map { try Self.target(of: $0).authority }
        if Set(authorities).count > 1 {
            throw ValidationError("all URLs must have the same authority (got \(Set(authorities).sorted().joined(separator: ", ")))")
        }
        guard clients >= 1 else { throw ValidationError("-c must be at least 1") }
        guard maxConcurrentStreams >= 1 else { throw ValidationError("-m must be at least 1") }
        guard rate >= 0 else { throw ValidationError("--rate must not be negative") }
        if let duration {
            guard duration > 0 else { throw ValidationError("-D must be more than 0 seconds") }
        } else {
            guard requests >= 1 else { throw ValidationError("-n must be at least 1") }
            guard requests >= clients else { throw ValidationError("-n (\(requests)) must be at least -c (\(clients)): every client sends a request") }
            if warmUpTime != nil { throw ValidationError("--warm-up-time needs -D (it is for timed runs)") }
        }
        if let warmUpTime, warmUpTime < 0 { throw ValidationError("--warm-up-time must not be negative") }
        _ = try headerFields(fromOptions: headers)
    }

    func run() async throws {
        logToStandardError(level: verbose ? .info : .critical)
        var configuration = HTTP3Client.Configuration()
        do {
            configuration.certificateVerification = try trust.certificate.certificateVerification()
        } catch {
            throw ValidationError("\(error)")
        }
        configuration.connectTo = trust.connectTarget
        if let qlogDirectory { configuration.qlogDirectory = qlogDirectory }

        let targets = try urls.map(Self.target(of:))
        let extraFields = try headerFields(fromOptions: headers)
        let requests = targets.map { target in
            var request = HTTPRequest(method: .get, scheme: "https", authority: target.authority, path: target.path)
            request.headerFields[.userAgent] = "h3load/0.1"
            for (name, value) in extraFields { request.headerFields[name] = value }
            return request
        }
        let amount: LoadEngine.Amount = if let duration {
            .duration(.milliseconds(Int64(duration * 1000)), warmUp: .milliseconds(Int64((warmUpTime ?? 0) * 1000)))
        } else {
            .requests(self.requests)
        }
        let engine = LoadEngine(
            requests: requests, host: targets[0].host, port: targets[0].port, configuration: configuration,
            clients: clients, streamsPerClient: maxConcurrentStreams, amount: amount, connectionRate: rate
        )
        if !json {
            let what = duration.map { "for \($0)s" + (warmUpTime.map { " after a \($0)s warm-up" } ?? "") } ?? "\(self.requests) requests"
            print("h3load: \(what), \(clients) client(s), \(maxConcurrentStreams) stream(s) each, to \(targets[0].authority)")
        }
        let report = await engine.run()
        for (failure, count) in report.clientFailures.sorted(by: { $0.value > $1.value }) {
            log("h3load: \(count) client(s) failed: \(failure)")
        }
        for (error, count) in report.tally.errors.sorted(by: { $0.value > $1.value }).prefix(10) {
            log("h3load: \(count) request(s) errored: \(error)")
        }
        print(json ? report.json : report.text)
        if !report.isSuccess { throw ExitCode.failure }
    }

    /// Where a URL points: its host and port to connect to, and its authority and path to ask for.
    struct Target {
        let host: String
        let port: UInt16
        let authority: String
        let path: String
    }

    static func target(of url: String) throws -> Target {
        guard let components = URLComponents(string: url), let scheme = components.scheme else {
            throw ValidationError("'\(url)' is not a URL")
        }
        guard scheme.lowercased() == "https" else { throw ValidationError("'\(url)': HTTP/3 needs https://, not \(scheme)://") }
        guard let host = components.host, !host.isEmpty else { throw ValidationError("'\(url)' has no host") }
        guard let port = UInt16(exactly: components.port ?? 443), port > 0 else { throw ValidationError("'\(url)' has a bad port") }
        let bare = host.trimming { $0 == "[" || $0 == "]" }.lowercased()
        let shownHost = URIHost.bracketed(bare)
        var path = components.percentEncodedPath.isEmpty ? "/" : components.percentEncodedPath
        if let query = components.percentEncodedQuery { path += "?" + query }
        return Target(host: bare, port: port, authority: port == 443 ? shownHost : "\(shownHost):\(port)", path: path)
    }

    private func log(_ text: String) {
        writeToStandardError(text + "\n")
    }
}
