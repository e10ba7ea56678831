#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import ArgumentParser
import CommandLineSupport
import Dispatch
#if canImport(Glibc)
import Glibc
#endif
import H3
import HTTPTypes
import Logging
import QuicTransport

/// The entry point: glibc's malloc cache sized for a QUIC loop's batches (`runWithMallocTunables`),
/// then the command, on a blocked main thread (`runWithBlockedMainThread` says why).
@main
enum H3ServeMain {
    static func main() {
        runWithMallocTunables(.server)
        runWithBlockedMainThread { await H3Serve.main() }
    }
}

/// `h3serve`: serves a directory over HTTP/3 (and HTTP/2 and HTTP/1.1 on TCP) as a static web
/// server, and logs one line per request in the Combined Log Format.
struct H3Serve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "h3serve",
        abstract: "Serve a directory over HTTP/3, and over HTTP/2 and HTTP/1.1 on TCP with Alt-Svc.",
        discussion: """
            UDP and TCP listen on the same port number. Every response carries
            Alt-Svc: h3=":PORT"; ma=86400 unless --alt-svc changes it or --no-alt-svc drops it;
            with --no-tcp, none unless --alt-svc gives one.

            Files carry ETag and Last-Modified and are answered 304 to conditional requests.
            A directory is served as its index.html, or listed with --browse; without its
            trailing slash it is redirected (301). Each request is logged to stderr in the
            Combined Log Format plus rt=SECONDS priority="FIELD" (see --access-log, -q).
            """
    )

    @OptionGroup var listen: ServerListenOptions

    @Option(help: "Directory to serve.")
    var root = "."

    @Flag(help: "List a directory that has no index.html: an HTML page, or JSON for Accept: application/json (as Caddy's file_server browse).")
    var browse = false

    @Flag(help: "Serve FILE.br or FILE.gz in place of FILE to clients whose Accept-Encoding allows it (br first), with Vary: Accept-Encoding on every file (as Caddy's precompressed).")
    var precompressed = false

    @Option(name: .customLong("cache-control"), help: "The Cache-Control value of every file response, e.g. max-age=3600 or no-cache (default: none).")
    var cacheControl: String?

    @Option(name: .customLong("access-log"), help: "Append the request log to FILE, or write it to stdout with - (default: stderr). Combined Log Format, then rt=SECONDS priority=\"FIELD\".")
    var accessLog: String?

    @Option(name: .customLong("open-file-cache"), help: "Seconds an opened file is reused for later requests of the same path before it is looked up again, as nginx's open_file_cache_valid; 0 opens it for every request.")
    var openFileCache: Double = 1

    @Option(name: .customLong("qlog-dir"), help: "Write one qlog trace per connection here (default: $QLOGDIR).")
    var qlogDirectory: String?

    @Option(name: .customLong("alt-svc"), help: "The Alt-Svc value to send (default: h3=\":PORT\"; ma=86400), e.g. clear.")
    var altSvc: String?

    @Flag(name: .customLong("no-alt-svc"), help: "Send no Alt-Svc field. Without TCP (--no-tcp) none is sent unless --alt-svc gives one.")
    var noAltSvc = false

    @Flag(name: .customLong("no-quic"), help: "Do not listen on UDP: HTTP/2 and HTTP/1.1 over TCP only (as if UDP were blocked).")
    var noQUIC = false

    @Option(help: "Congestion control for responses: cubic (default), reno, bbr or bbr2.")
    var cc: String = "cubic"

    @Option(name: .customLong("request-header-timeout"), help: "Seconds a client may take to send a request's header section after opening its stream; past it the stream is reset with H3_REQUEST_INCOMPLETE (slowloris). 0 turns it off. (default: 10)")
    var requestHeaderTimeout: Double = 10

    @Option(name: .customLong("preferred-address"), help: "Also listen for QUIC at IP:PORT (port 0 picks one) and offer it to clients as preferred_address (RFC 9000 §9.6).")
    var preferredAddress: String?

    @Flag(name: .customLong("no-tcp"), help: "Do not listen on TCP: HTTP/3 only.")
    var noTCP = false

    @Option(help: "QUIC workers, each with its own thread and UDP socket on the port; the kernel steers packets to them by connection ID (default: one per core).")
    var workers = min(ProcessInfo.processInfo.activeProcessorCount, QUICServerWorkerGroup.maximumWorkerCount)

    @OptionGroup var loadBalancer: LoadBalancerOptions

    @Flag(name: .shortAndLong, help: "Verbose logging.")
    var verbose = false

    @Flag(name: .shortAndLong, help: "No request log (as gtlsserver's -q): for benchmarks, where one write per request is measured too.")
    var quiet = false

    func validate() throws {
        if !(0...3600).contains(requestHeaderTimeout) { throw ValidationError("--request-header-timeout is 0 to 3600 seconds") }
        if QUICCongestionControl(rawValue: cc) == nil { throw ValidationError("--cc is cubic, reno, bbr or bbr2") }
        if noQUIC && noTCP { throw ValidationError("--no-quic and --no-tcp together leave nothing to serve") }
        try validateWorkerCount(workers)
        if !(0...3600).contains(openFileCache) { throw ValidationError("--open-file-cache is 0 to 3600 seconds") }
        if let preferredAddress {
            guard let parsed = parseHostPort(preferredAddress), isNumericAddress(parsed.host) else {
                throw ValidationError("--preferred-address takes a numeric IP:PORT, e.g. 127.0.0.2:0 or [::1]:4434")
            }
            if noQUIC { throw ValidationError("--preferred-address is a QUIC address; it makes no sense with --no-quic") }
        }
        if noQUIC && loadBalancer.serverID != nil {
            throw ValidationError("--server-id shapes QUIC connection IDs; it makes no sense with --no-quic")
        }
        if quiet && accessLog != nil { throw ValidationError("-q (no request log) and --access-log contradict each other") }
        if let cacheControl, !HTTP3FileHandler.isCacheControlValue(cacheControl) {
            throw ValidationError("--cache-control '\(cacheControl)' is not a Cache-Control value (RFC 9111 §5.2): directives such as max-age=3600, no-cache or public, separated by commas")
        }
        if noAltSvc && altSvc != nil { throw ValidationError("--alt-svc and --no-alt-svc contradict each other") }
        if let altSvc {
            do { _ = try AltServiceFieldValue(parsing: altSvc) } catch { throw ValidationError("--alt-svc '\(altSvc)': \(error)") }
        }
        for path in [listen.cert, listen.key].compactMap({ $0 }) where !FileManager.default.isReadableFile(atPath: path) {
            throw ValidationError("cannot read \(path)")
        }
        var status = stat()
        guard stat(root, &status) == 0, status.st_mode & S_IFMT == S_IFDIR else {
            throw ValidationError("--root \(root) is not a directory")
        }
    }

    /// Reports a startup failure on stderr; the result is the exit status to throw.
    private func fail(_ message: String) -> ExitCode {
        writeToStandardError("error: \(message)\n")
        return ExitCode(1)
    }

    /// Writes a line to stdout at once; scripts wait for these lines.
    private func say(_ line: String) {
        writeToStandardOutput(line + "\n")
    }

    func run() async throws {
        let verbose = self.verbose
        logToStandardError(level: verbose ? .debug : .notice)
        // One identity for both listeners, so TCP and QUIC present the same certificate.
        let certificatePEM: String
        let privateKeyPEM: String
        var generated: SelfSignedCertificate?
        do {
            if let cert = listen.cert, let key = listen.key {
                certificatePEM = try String(contentsOfFile: cert, encoding: .utf8)
                privateKeyPEM = try String(contentsOfFile: key, encoding: .utf8)
            } else {
                let identity = try SelfSignedCertificate.generate()
                (certificatePEM, privateKeyPEM, generated) = (identity.certificatePEM, identity.privateKeyPEM, identity)
            }
        } catch {
            throw fail("\(error)")
        }
        // Given the Alt-Svc field once the port is known: it is then part of every opened file's
        // fields, so no response copies its fields to add it.
        let files = HTTP3FileHandler(
            root: root, openFileReuse: .seconds(openFileCache), cacheControl: cacheControl, listsDirectories: browse,
            servesPrecompressed: precompressed
        )
        var log: AppendingLog?
        if !quiet {
            do { log = try accessLog.map { path throws(OutputFileError) in try AppendingLog(path: path) } ?? .standardError } catch {
                throw fail("--access-log: \(error)")
            }
        }
        // Files are answered without waiting, so HTTP/3 requests are served on the connection's
        // loop without a task (the server's responder); TCP requests take the same path.
        let respond: @Sendable (HTTP3ServerRequest) -> HTTP3ServerResponse = { files.respond(to: $0) }
        let serve: @Sendable (HTTP3ServerRequest) -> HTTP3ServerResponse
        if let log {
            serve = { request in
                let started = ContinuousClock.now
                let response = respond(request)
                let elapsed = ContinuousClock.now - started
                log.append(HTTPAccessLogLine.make(request: request, response: response, elapsed: elapsed, time: Int(time(nil))))
                return response
            }
        } else {
            serve = respond
        }
        let handler: HTTP3Server.Handler = { serve($0) }
        if let generated {
            say("certificate: self-signed for localhost, 127.0.0.1, ::1; sha256 \(generated.sha256FingerprintHex)")
        }

        var quicServer: HTTP3Server?
        var boundPort = listen.port
        if !noQUIC {
            var configuration = HTTP3Server.Configuration()
            configuration.host = listen.host
            configuration.port = listen.port
            configuration.certificateChainFile = listen.cert
            configuration.privateKeyFile = listen.key
            configuration.identity = generated
            configuration.acceptsEarlyData = listen.earlyData
            configuration.requiresAddressValidation = listen.retry
            configuration.addressValidationThreshold = listen.retryThreshold
            configuration.maximumConnectionsPerAddress = listen.maxConnectionsPerAddress
            configuration.requestHeaderTimeout = requestHeaderTimeout > 0 ? .milliseconds(Int64(requestHeaderTimeout * 1000)) : nil
            configuration.congestionControl = QUICCongestionControl(rawValue: cc) ?? .cubic
            configuration.preferredAddress = preferredAddress.flatMap(parseHostPort)
            configuration.workers = workers
            configuration.loadBalancer = try loadBalancer.configuration()
            configuration.disablesActiveMigration = loadBalancer.disablesActiveMigration
            if let qlogDirectory { configuration.qlogDirectory = qlogDirectory }
            do {
                let server = try HTTP3Server(configuration: configuration, responder: { serve($0) }, handler: handler)
                boundPort = try await server.start()
                quicServer = server
            } catch {
                throw fail("cannot serve HTTP/3 on \(URIHost.authority(listen.host, listen.port)) (UDP): \(error)")
            }
        }
        var tcpServer: HTTPTCPServer?
        if !noTCP {
            do {
                var configuration = HTTPTCPServer.Configuration(certificateChainPEM: certificatePEM, privateKeyPEM: privateKeyPEM)
                configuration.host = listen.host
                configuration.port = boundPort
                let server = try HTTPTCPServer(configuration: configuration, handler: handler)
                boundPort = try await server.start()
                tcpServer = server
            } catch {
                throw fail("cannot serve HTTP/2 and HTTP/1.1 on \(URIHost.authority(listen.host, boundPort)) (TCP): \(error)")
            }
        }
        // Alt-Svc advertises HTTP/3 to clients that came over TCP (RFC 7838); without a TCP
        // listener there is no one to tell, unless a value is given.
        if !noAltSvc && !noQUIC && !noTCP || altSvc != nil {
            files.additionalFields = HTTPFields([HTTPField(name: .altSvc, value: altSvc ?? "h3=\":\(boundPort)\"; ma=86400")])
        }
        let versions = [noQUIC ? nil : "HTTP/3", noTCP ? nil : "HTTP/2", noTCP ? nil : "HTTP/1.1"].compactMap { $0 }
        say("serving \(root) on https://\(URIHost.authority(listen.host, boundPort))/ (\(versions.joined(separator: ", ")))")
        if let preferred = quicServer?.boundPreferredAddress { say("preferred address: \(preferred)") }
        if let quicServer, workers > 1 {
            let steering = quicServer.isSteeredByKernel
                ? "the kernel steers packets by connection ID" : "the kernel refused the steering program; workers hand packets over"
            say("workers: \(workers); \(steering)")
        }
        if let lb = quicServer?.configuration.loadBalancer {
            let mode = lb.isEncrypted ? "encrypted (single pass)" : "plaintext"
            say("QUIC-LB: server ID \(Hex.encode(lb.serverID)), config rotation \(lb.configRotation), \(mode), \(lb.connectionIDLength)-byte connection IDs")
        }
        signal(SIGINT, SIG_IGN)
        signal(SIGTERM, SIG_IGN)
        let (stopped, stop) = AsyncStream<Void>.makeStream()
        let sources = [SIGINT, SIGTERM].map { DispatchSource.makeSignalSource(signal: $0) }
        for source in sources {
            source.setEventHandler { stop.yield() }
            source.resume()
        }
        for await _ in stopped { break }
        say("shutting down: GOAWAY sent, finishing requests in flight")
        await tcpServer?.shutdown()
        if let quicServer {
            let statistics = await quicServer.workerStatistics()
            say(
                "workers: datagrams \(statistics.map(\.datagramsReceived)), connections \(statistics.map(\.connectionsAccepted)), "
                    + "hand-overs \(quicServer.forwardedDatagrams)"
            )
            await quicServer.shutdownGracefully()
            let remaining = await quicServer.liveConnections.remainingAfterStop(within: .seconds(2))
            say("stopped: \(remaining) connections still in memory")
        }
        // A real use after the wait: `_ = sources` let the optimizer free the sources early, and
        // release builds then ignored SIGTERM.
        for source in sources { source.cancel() }
    }
}
