import ArgumentParser
import CommandLineSupport
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif
import H3
import HTTPTypes
import Logging
import QuicTransport
import Synchronization

/// The entry point: see `runWithBlockedMainThread` for why it is not the async `main()`.
@main
enum H3GetMain {
    static func main() { runWithBlockedMainThread { await H3Get.main() } }
}

/// `h3get`: fetches URLs with curl's flags over HTTP/3, racing HTTP/2 or HTTP/1.1 on TCP when
/// the QUIC handshake is slow or fails, as curl's `--http3` does. URLs to one authority share
/// one connection and run concurrently; bodies are written in the order the URLs were given.
struct H3Get: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "h3get",
        abstract: "Fetch URLs over HTTP/3 with a TCP fallback, in the manner of curl.",
        discussion: """
            --http3 (the default, as curl's --http3) tries HTTP/3 first and races TCP if the
            handshake is slow or fails. --http3-only never uses TCP. --http3-after-discovery
            (URLSession's way) uses HTTP/3 once an Alt-Svc cache entry or a DNS HTTPS record says
            the server has it, and TCP otherwise, learning Alt-Svc for the next run. In every
            mode, an --alt-svc file's live entry for the origin says where HTTP/3 is.
            """
    )

    @Argument(help: "https:// URLs.")
    var urls: [String]

    /// Each URL's request target, from the parse that `validate()` checks, so that no URL is
    /// parsed twice. Not an argument: ArgumentParser leaves it at its default.
    var targets: [RequestTarget] = []

    @Option(name: [.customShort("o"), .customLong("output")], help: "Write the body to FILE instead of stdout (repeat once per URL).")
    var outputs: [String] = []

    @Flag(name: [.customShort("O"), .customLong("remote-name")], help: "Write each body to a file named like the URL's last path segment.")
    var remoteName = false

    @Option(name: .customLong("output-dir"), help: "Directory for -o and -O files.")
    var outputDirectory: String?

    @Flag(name: [.customShort("I"), .customLong("head")], help: "Send HEAD and print the response headers.")
    var head = false

    @Flag(name: [.customShort("i"), .customLong("include")], help: "Write the response headers before the body, where the body goes (HTTP/3 200, then name: value lines, then a blank line).")
    var include = false

    @Option(name: [.customShort("D"), .customLong("dump-header")], help: "Write each transfer's response headers to FILE (- for stdout), as curl's -D.")
    var dumpHeader: String?

    @Option(name: [.customShort("X"), .customLong("request")], help: "Request method.")
    var method: String?

    @Option(name: [.customShort("H"), .customLong("header")], help: "Extra request header, \"Name: value\".")
    var headers: [String] = []

    @Option(name: [.customShort("d"), .customLong("data")], help: "Request body, or @FILE to read it from a file (implies POST).")
    var data: String?

    @OptionGroup
    var trust: ServerTrustOptions

    @Option(help: "RFC 9218 priority, \"u=N[, i]\" (urgency 0-7, default 3; i = incremental): once for every URL, or once per URL in order.")
    var priority: [String] = []

    @Flag(name: .customLong("http3"), help: "Try HTTP/3 first and race TCP if its handshake is slow or fails, as curl's --http3 (the default).")
    var http3 = false

    @Flag(name: .customLong("http3-only"), help: "Use HTTP/3 only; fail rather than fall back to TCP.")
    var http3Only = false

    @Flag(name: .customLong("http3-after-discovery"), help: "Use HTTP/3 only where discovered (Alt-Svc cache, DNS HTTPS record), else TCP, as URLSession does.")
    var http3AfterDiscovery = false

    @Option(name: .customLong("alt-svc"), help: "Read and write the Alt-Svc cache in this file, in curl's format (\"\" keeps it in memory).")
    var altSvcFile: String?

    @Option(name: .customLong("happy-eyeballs-timeout-ms"), help: "How long the HTTP/3 handshake runs alone before TCP joins the race (curl's option; default 300).")
    var happyEyeballsTimeout: Int = 300

    @Option(name: .customLong("cipher"), help: "HTTP/3 cipher suites to offer: aes128gcm, aes256gcm, chacha20 (comma-separated).")
    var ciphers: String?

    @Option(name: .customLong("session-file"), help: "Keep TLS session tickets in FILE and resume HTTP/3 connections from it.")
    var sessionFile: String?

    @Flag(name: .customLong("0rtt"), help: "With --session-file holding a ticket for the server, send GET and HEAD requests in 0-RTT (replayable: RFC 9114 §10.9).")
    var zeroRTT = false

    @Flag(name: .customLong("key-update"), help: "Update the HTTP/3 connection's 1-RTT keys (RFC 9001 §6) as soon as its handshake is confirmed, and keep the connection until the server has acknowledged the new keys; exit 95 if the update could not complete.")
    var keyUpdate = false

    @Flag(help: "Move the HTTP/3 connection to a new local UDP port once its handshake is confirmed, with path validation (RFC 9000 §9.2).")
    var migrate = false

    @Option(name: .customLong("dns-server"), help: "HOST:PORT of the DNS server for HTTPS-record look-ups (default: /etc/resolv.conf).")
    var dnsServer: String?

    @Option(name: .customLong("parallel-max"), help: "How many URLs are fetched at once, counted from the oldest one not yet written (curl's option; default 50, at most 300).")
    var parallelMax: Int = 50

    @Option(name: .customLong("qlog-dir"), help: "Write a qlog trace per connection here (default: $QLOGDIR).")
    var qlogDirectory: String?

    @Flag(name: [.customShort("v"), .customLong("verbose")], help: "Show the connection and the request and response headers on stderr.")
    var verbose = false

    @Flag(name: [.customShort("s"), .customLong("silent")], help: "No error messages.")
    var silent = false

    @Flag(name: [.customShort("f"), .customLong("fail")], help: "Exit 22 and write no body on HTTP status 400 or above.")
    var fail = false

    @Option(name: [.customShort("w"), .customLong("write-out")], help: "Print this after each transfer, as curl's -w: %{http_code} %{http_version} %{size_download} %{time_starttransfer} %{time_connect} %{time_total} %{remote_ip} %{url} %{content_type} %{exitcode} %header{NAME} … (see the Command-line tools article).")
    var writeOut: String?

    @Option(name: .customLong("stats"), help: "After each HTTP/3 transfer, print the connection's establishment and data-transfer reports on stderr: --stats (text) or --stats=json (one JSON object).")
    var stats: ReportStyle?

    /// `--stats` alone means `--stats=text`.
    static func main() async { await mainAcceptingBareStats(joiningPositionalValues: true) }

    /// curl's exit codes, so scripts written for curl keep working.
    enum Exit: Int32 {
        case couldNotResolve = 6
        case couldNotConnect = 7
        case httpError = 22
        case writeError = 23
        case timedOut = 28
        case tlsError = 35
        case receiveError = 56
        case peerVerificationFailed = 60
        case http3Error = 95

        /// How far a failed attempt got, for picking between two: a refused certificate says
        /// more than a refused port.
        var progress: Int {
            switch self {
            case .couldNotResolve: return 0
            case .couldNotConnect: return 1
            case .timedOut: return 2
            case .tlsError: return 3
            case .peerVerificationFailed: return 4
            case .httpError, .writeError, .receiveError, .http3Error: return 5
            }
        }
    }

    /// `-X`'s method: a token (RFC 9110 §9.1), whatever its name, as curl sends whatever `-X` says.
    static func requestMethod(_ text: String) throws(ValidationError) -> HTTPRequest.Method {
        guard let method = HTTPRequest.Method(text) else { throw ValidationError("-X '\(text)' is not an HTTP method") }
        return method
    }

    mutating func validate() throws {
        urls = PositionalValues.split(urls)
        guard !urls.isEmpty else { throw ValidationError("no URL given") }
        targets = []
        targets.reserveCapacity(urls.count)
        for url in urls {
            guard let components = URLComponents(string: url), let scheme = components.scheme else {
                throw ValidationError("'\(url)' is not a URL")
            }
            guard scheme.lowercased() == "https" else { throw ValidationError("'\(url)': HTTP/3 needs https://, not \(scheme)://") }
            guard let host = components.host, !host.isEmpty else { throw ValidationError("'\(url)' has no host") }
            targets.append(RequestTarget(components, host: host))
        }
        if !outputs.isEmpty && outputs.count != urls.count && !remoteName {
            throw ValidationError("give one -o per URL (\(urls.count) URLs, \(outputs.count) -o)")
        }
        _ = try headerFields(fromOptions: headers)
        if let method { _ = try Self.requestMethod(method) }
        if [http3, http3Only, http3AfterDiscovery].filter({ $0 }).count > 1 {
            throw ValidationError("use only one of --http3, --http3-only and --http3-after-discovery")
        }
        if let ciphers, ciphers.split(separator: ",").contains(where: { QUICCipherSuite(rawValue: String($0)) == nil }) {
            throw ValidationError("--cipher takes aes128gcm, aes256gcm or chacha20 (comma-separated)")
        }
        if zeroRTT && sessionFile == nil { throw ValidationError("--0rtt needs --session-file (the ticket to resume with)") }
        if !(1...300).contains(parallelMax) { throw ValidationError("--parallel-max takes 1 to 300, as curl's does") }
        if happyEyeballsTimeout < 0 { throw ValidationError("--happy-eyeballs-timeout-ms must not be negative") }
        if let dnsServer, parseHostPort(dnsServer) == nil {
            throw ValidationError("--dns-server takes HOST:PORT, e.g. 127.0.0.1:53 or [::1]:53")
        }
        for priority in self.priority where HTTPPriority(fieldValue: priority) == .default && !["u=3", "u=3, i=?0", ""].contains(priority) {
            throw ValidationError("--priority '\(priority)' is not an RFC 9218 priority like \"u=2\" or \"u=5, i\"")
        }
        if self.priority.count > 1 && self.priority.count != urls.count {
            throw ValidationError("give one --priority for all URLs or one per URL (\(urls.count) URLs, \(self.priority.count) --priority)")
        }
    }

    func run() async throws {
        // -v also shows what the library warns about (a migration or key update that failed).
        logToStandardError(level: verbose ? .info : .critical)
        var configuration = HTTPSession.Configuration()
        configuration.policy = http3Only ? .http3Only : http3AfterDiscovery ? .discovery : .assumesHTTP3Capable
        configuration.http3.tracksLosses = stats != nil
        if let sessionFile { configuration.http3.sessionTicketStore = QUICSessionTicketStore(path: sessionFile) }
        if let ciphers { configuration.http3.cipherSuites = ciphers.split(separator: ",").compactMap { QUICCipherSuite(rawValue: String($0)) } }
        configuration.http3.allowsEarlyData = zeroRTT
        configuration.http3.initiatesKeyUpdate = keyUpdate
        configuration.http3.migratesAfterHandshake = migrate
        configuration.happyEyeballsDelay = .milliseconds(happyEyeballsTimeout)
        configuration.altServiceCache = AltServiceCache(path: altSvcFile.flatMap { $0.isEmpty ? nil : $0 })
        if let dnsServer, let server = parseHostPort(dnsServer) {
            configuration.httpsRecordResolver = HTTPSRecordResolver(server: server)
        }
        if let qlogDirectory { configuration.http3.qlogDirectory = qlogDirectory }
        do { configuration.certificateVerification = try trust.certificate.certificateVerification() } catch { throw die("\(error)", .tlsError) }
        configuration.connectTo = trust.connectTarget
        let body = try loadBody()
        let client = HTTPSession(configuration: configuration)
        var headerDump: AppendingLog?
        if let dumpHeader {
            do { headerDump = try AppendingLog(path: dumpHeader, truncating: true) } catch { throw die("\(error)", .writeError) }
        }
        let transfers = try URLTransfers(self, body: body, headerDump: headerDump)
        // The run, and the URLs' tasks it starts, go on the session's connection thread, so a
        // response wakes its reader without a hop to the global pool and back.
        let exit = await withTaskExecutorPreference(client.taskExecutor) {
            await transfers.fetchAll(with: client, body: body, parallelMax: parallelMax)
        }
        // --key-update keeps its promise: the connection stays until the update is complete,
        // or h3get says why it is not.
        var keyUpdateFailed = false
        if keyUpdate {
            do {
                if try await client.keyUpdatesCompleted() == 0 {
                    keyUpdateFailed = true
                    if !silent { writeToStandardError("h3get: --key-update: no HTTP/3 connection was opened, so no keys were updated\n") }
                }
            } catch {
                keyUpdateFailed = true
                if !silent { writeToStandardError("h3get: --key-update: \(error)\n") }
            }
        }
        await client.shutdown()
        if let exit { throw ExitCode(exit.rawValue) }
        if keyUpdateFailed { throw ExitCode(Exit.http3Error.rawValue) }
    }

    private func loadBody() throws -> [UInt8]? {
        guard let data else { return nil }
        if data.hasPrefix("@") {
            let path = String(data.dropFirst())
            guard let contents = FileManager.default.contents(atPath: path) else { throw die("cannot read \(path)", .writeError) }
            return Array(contents)
        }
        return Array(data.utf8)
    }

    /// curl's exit code for a failure, from its code.
    static func exitCode(for error: any Error) -> Exit {
        if let error = error as? HTTP3ClientError {
            switch error.code {
            case .cannotResolve: return .couldNotResolve
            case .cannotConnect: return .couldNotConnect
            case .handshakeTimedOut: return .timedOut
            case .tlsHandshakeFailed: return .tlsError
            case .certificateRejected: return .peerVerificationFailed
            case .streamReset, .protocolError: return .http3Error
            default: return .receiveError
            }
        }
        if let error = error as? HTTPSessionError {
            switch error.code {
            case .tcpCannotResolve: return .couldNotResolve
            case .tcpCannotConnect, .tcpUnavailable: return .couldNotConnect
            case .tcpTLSFailed: return .tlsError
            case .tcpCertificateRejected: return .peerVerificationFailed
            case .bothFailed:
                guard let http3 = error.http3Failure, let tcp = error.tcpFailure else { return .receiveError }
                let (viaHTTP3, viaTCP) = (exitCode(for: http3), exitCode(for: tcp))
                return viaHTTP3.progress > viaTCP.progress ? viaHTTP3 : viaTCP
            default: return .receiveError
            }
        }
        return .receiveError
    }

    /// What h3get says about a failure: the library's message, and the trust flags when the
    /// server's certificate did not lead to a trusted CA.
    static func message(for error: any Error) -> String {
        ServerTrustOptions.describe(error, untrusted: isUntrustedCertificate(error))
    }

    /// Whether HTTP/3 or TCP refused the certificate because no trusted CA signed it.
    private static func isUntrustedCertificate(_ error: any Error) -> Bool {
        if let error = error as? HTTP3ClientError {
            return error.code == .certificateRejected && error.verificationFailure == .unknownIssuer
        }
        if let error = error as? HTTPSessionError {
            if error.code == .tcpCertificateRejected { return true }
            return [error.http3Failure as (any Error)?, error.tcpFailure].contains { $0.map(isUntrustedCertificate) ?? false }
        }
        return false
    }

    private func die(_ message: String, _ code: Exit) -> any Error {
        if !silent { writeToStandardError("h3get: \(message)\n") }
        return ExitCode(code.rawValue)
    }
}

/// What a request for a URL carries from it: `:authority` and `:path` (RFC 9114 §4.3.1).
struct RequestTarget: Decodable, Sendable {
    let authority: String
    /// The path and query as the URL has them (percent-encoded), "/" for an empty path.
    let path: String

    init(_ components: URLComponents, host: String) {
        var path = components.percentEncodedPath.isEmpty ? "/" : components.percentEncodedPath
        if let query = components.percentEncodedQuery { path += "?" + query }
        self.path = path
        authority = components.port.map { "\(host):\($0)" } ?? host
    }
}

/// What each URL's transfer needs from the command line, read once when the run starts: a read
/// of an ArgumentParser property goes through its generic wrapper, a metadata look-up each time,
/// and a transfer reads a dozen of them. A class, so that each URL's task holds it with one
/// reference count where a copy of the struct retained each of its arrays and strings.
final class URLTransfers: Sendable {
    let urls: [String]
    let targets: [RequestTarget]
    let head: Bool
    let priority: [String]
    let outputs: [String]
    let remoteName: Bool
    let outputDirectory: String?
    let verbose: Bool
    let silent: Bool
    let fail: Bool
    let writeOut: String?
    /// `-i`: headers before each body, where the body goes.
    let include: Bool
    /// `-D`: where each transfer's headers are appended, in URL order; nil without `-D`.
    let headerDump: AppendingLog?
    /// The request body's size, for `%{size_upload}`.
    let uploadSize: Int
    let stats: ReportStyle?
    /// The method and header fields every request carries (`-X`, `-I`, `-H`), checked by
    /// `H3Get.validate()`: each URL's request is this one with its own authority and path.
    let requestTemplate: HTTPRequest

    /// Throws only what `H3Get.validate()` has already refused.
    init(_ command: H3Get, body: [UInt8]?, headerDump: AppendingLog?) throws {
        let sendsBody = body != nil
        (include, self.headerDump, uploadSize) = (command.include, headerDump, body?.count ?? 0)
        (urls, targets, head, priority) = (command.urls, command.targets, command.head, command.priority)
        (outputs, remoteName, outputDirectory) = (command.outputs, command.remoteName, command.outputDirectory)
        (verbose, silent, fail, writeOut, stats) = (command.verbose, command.silent, command.fail, command.writeOut, command.stats)
        let method = head ? HTTPRequest.Method.head : try H3Get.requestMethod(command.method ?? (sendsBody ? "POST" : "GET"))
        var request = HTTPRequest(method: method, scheme: "https", authority: nil, path: nil)
        request.headerFields[.userAgent] = "h3get/0.1"
        for (name, value) in try headerFields(fromOptions: command.headers) { request.headerFields[name] = value }
        requestTemplate = request
    }

    /// Fetches every URL and writes each one's output in URL order as soon as it and those
    /// before it are done; returns the first failure's exit code, in URL order.
    ///
    /// At most `parallelMax` URLs past the oldest one not yet written are started, as curl's
    /// `--parallel-max` bounds its transfers, so a run of any length holds that many transfers
    /// and their bodies, however many URLs it was given. They are fetched by as many workers,
    /// each a task that takes URLs one after another: a task per URL cost its creation and, as
    /// each grew its allocator's slabs again for the calls a transfer makes, several `malloc`s
    /// a URL.
    func fetchAll(with client: HTTPSession, body: [UInt8]?, parallelMax: Int) async -> H3Get.Exit? {
        let queue = TransferQueue(count: urls.count, window: parallelMax)
        await withTaskGroup(of: Void.self) { workers in
            for _ in 0..<min(parallelMax, urls.count) {
                workers.addTask {
                    while let index = await queue.next() {
                        let result = await Result { try await self.fetch(index, body: body, client: client) }
                        queue.finish(index, result) { self.write($0, index: $1) }
                    }
                }
            }
        }
        return queue.exit
    }

    /// The URLs in turn for `fetchAll`'s workers, and their outcomes, written in URL order.
    private final class TransferQueue: Sendable {
        private struct State {
            var nextToStart = 0
            var nextToWrite = 0
            /// Outcomes waiting for an earlier URL's to be written.
            var finished: [Int: Result<Transfer, any Error>] = [:]
            /// Workers whose next URL would be past the window.
            var waiting: [UnsafeContinuation<Void, Never>] = []
            var exit: H3Get.Exit?
        }

        private enum Turn { case start(Int), wait, none }

        private let state = Mutex(State())
        private let count: Int
        private let window: Int

        init(count: Int, window: Int) {
            (self.count, self.window) = (count, window)
        }

        /// The first failure's exit code, in URL order.
        var exit: H3Get.Exit? { state.withLock { $0.exit } }

        /// The next URL to fetch, once it is fewer than `window` past the oldest one not yet
        /// written; nil when every URL has been handed out.
        func next() async -> Int? {
            while true {
                let turn = state.withLock { state -> Turn in
                    let turn = nextTurn(in: state)
                    if case .start = turn { state.nextToStart += 1 }
                    return turn
                }
                switch turn {
                case .start(let index): return index
                case .none: return nil
                case .wait:
                    // Parked until an outcome is written; the window may have moved meanwhile.
                    await withUnsafeContinuation { (continuation: UnsafeContinuation<Void, Never>) in
                        let parked = state.withLock { state -> Bool in
                            guard case .wait = nextTurn(in: state) else { return false }
                            state.waiting.append(continuation)
                            return true
                        }
                        if !parked { continuation.resume() }
                    }
                }
            }
        }

        /// What a worker asking now gets, the state left as it is.
        private func nextTurn(in state: State) -> Turn {
            guard state.nextToStart < count else { return .none }
            guard state.nextToStart < state.nextToWrite + window else { return .wait }
            return .start(state.nextToStart)
        }

        /// Records a URL's outcome and writes, with `write`, every outcome that is now next in
        /// URL order. The writes happen under the lock, so outcomes come out in order whichever
        /// thread the workers run on.
        func finish(_ index: Int, _ result: Result<Transfer, any Error>, write: (Result<Transfer, any Error>, Int) -> H3Get.Exit?) {
            let woken = state.withLock { state -> [UnsafeContinuation<Void, Never>] in
                state.finished[index] = result
                while let next = state.finished.removeValue(forKey: state.nextToWrite) {
                    if let failure = write(next, state.nextToWrite) { state.exit = state.exit ?? failure }
                    state.nextToWrite += 1
                }
                defer { state.waiting.removeAll() }
                return state.waiting
            }
            for worker in woken { worker.resume() }
        }
    }

    /// A class, as the struct was copied several times on its way to being written (its result,
    /// the map of finished URLs), each copy retaining its strings, arrays and response.
    final class Transfer: Sendable {
        let url: String
        let response: HTTPSessionResponse
        /// The body, when it waits to be written to stdout in URL order; nil when streamed out.
        let buffered: [UInt8]?
        let size: Int
        let writeFailure: String?
        /// When the transfer began: its times count from here, as curl's do.
        let started: ContinuousClock.Instant
        /// From the transfer's start to its response head (curl's `time_starttransfer`).
        let timeStartTransfer: Duration
        let timeTotal: Duration
        /// Whether the header block went out with the body already (`-i`, or `-D -` with the
        /// body on stdout).
        let headersWritten: Bool

        init(
            url: String, response: HTTPSessionResponse, buffered: [UInt8]?, size: Int, writeFailure: String?,
            started: ContinuousClock.Instant, timeStartTransfer: Duration, timeTotal: Duration, headersWritten: Bool
        ) {
            (self.url, self.response, self.buffered, self.size, self.started) = (url, response, buffered, size, started)
            (self.writeFailure, self.timeStartTransfer, self.timeTotal, self.headersWritten) = (
                writeFailure, timeStartTransfer, timeTotal, headersWritten
            )
        }
    }

    /// One URL's transfer; its times count from when it starts, as curl's do.
    private func fetch(_ index: Int, body: [UInt8]?, client: HTTPSession) async throws -> Transfer {
        let started = ContinuousClock.now
        let url = urls[index]
        let (authority, path) = (targets[index].authority, targets[index].path)
        var request = requestTemplate
        request.authority = authority
        request.path = path
        if verbose {
            var lines = ["> \(request.method) \(path)", "> :authority: \(authority)"]
            lines += request.headerFields.map { "> \($0.name): \($0.value)" }
            if let priority = priority(for: index) { lines.append("> priority: \(priority.fieldValue)") }
            log(lines.joined(separator: "\n"))
        }
        let response = try await client.execute(request, body: body, priority: priority(for: index))
        let startedTransfer = ContinuousClock.now - started
        if verbose {
            var lines = response.notes.map { "* \($0)" }
            if let discovery = response.discovery { lines.append("* HTTP/3 tried because: \(discovery.rawValue)") }
            if let reason = response.fallbackReason { lines.append("* fell back to TCP: \(reason)") }
            lines.append("* using HTTP/\(response.version.rawValue)")
            if let http3 = response.http3 {
                lines.append("* ALPN: \(http3.alpn ?? "?")")
                if let qlog = http3.qlogPath { lines.append("* qlog: \(qlog)") }
            }
            lines.append("< HTTP/\(response.version.rawValue) \(response.head.status.code)")
            lines += response.head.headerFields.map { "< \($0.name): \($0.value)" }
            log(lines.joined(separator: "\n"))
        }
        var headersWritten = false
        let finish = { (buffered: [UInt8]?, size: Int, failure: String?) in
            Transfer(
                url: url, response: response, buffered: buffered, size: size, writeFailure: failure, started: started,
                timeStartTransfer: startedTransfer, timeTotal: ContinuousClock.now - started, headersWritten: headersWritten
            )
        }
        if head || (fail && response.status.code >= 400) {
            return finish(nil, 0, nil)
        }
        // Bodies stream to their file, or to stdout when there is one URL; several URLs to stdout
        // are kept so they come out in the order given.
        let output: OutputFile?
        if let destination = destination(for: url, index: index) {
            do { output = try OutputFile(creatingOrTruncating: destination) } catch { return finish(nil, 0, "\(error)") }
        } else {
            output = urls.count == 1 ? OutputFile() : nil
        }
        var buffered: [UInt8] = []
        var size = 0
        // -i writes the headers where the body goes; so does -D - when the body goes to stdout.
        let headersGoWithBody = include || headerDump?.name == "stdout" && output?.isStandardOutput ?? true
        if headersGoWithBody {
            let block = Array(Self.headerBlock(of: response).utf8)
            if let output {
                do throws(OutputFileError) { try output.write(block) } catch { return finish(nil, 0, error.description) }
            } else {
                buffered = block
            }
            headersWritten = true
        }
        // A progress line on a terminal only, and never over a body written to the terminal.
        var progress = showsProgress(writingToStdout: output?.isStandardOutput ?? true)
            ? Progress(total: response.head.headerFields[.contentLength].flatMap(Int.init)) : nil
        do {
            for try await chunk in response.body {
                size += chunk.count
                // A failed write ends the transfer as curl's does (exit 23); the rest is not fetched.
                if let output {
                    try output.write(chunk)
                } else if buffered.isEmpty {
                    buffered = chunk  // A small body comes whole: kept as it is, not copied.
                } else {
                    buffered += chunk
                }
                progress?.update(size)
            }
            progress?.finish(size)
            try output?.close()
        } catch let error as OutputFileError {
            return finish(nil, size, "\(error)")
        }
        if let stats { await printStatistics(of: response, url: url, style: stats) }
        return finish(output == nil ? buffered : nil, size, nil)
    }

    /// Writes one URL's outcome; returns an exit code when it counts as a failure.
    private func write(_ result: Result<Transfer, any Error>, index: Int) -> H3Get.Exit? {
        switch result {
        case .success(let transfer):
            return emit(transfer, index: index)
        case .failure(let error):
            let message = H3Get.message(for: error)
            if !silent { writeToStandardError("h3get: \(urls[index]): \(message)\n") }
            let exit = H3Get.exitCode(for: error)
            printWriteOut(nil, url: urls[index], exit: exit, error: message)
            return exit
        }
    }

    /// Writes one transfer's output; returns an exit code when it counts as a failure.
    private func emit(_ transfer: Transfer, index: Int) -> H3Get.Exit? {
        let status = transfer.response.status.code
        if let headerDump, !transfer.headersWritten { headerDump.append(Self.headerBlock(of: transfer.response)) }
        if fail && status >= 400 {
            if !silent { writeToStandardError("h3get: \(transfer.url): the requested URL returned error: \(status)\n") }
            printWriteOut(transfer, url: transfer.url, exit: .httpError, error: "The requested URL returned error: \(status)")
            return .httpError
        }
        if let failure = transfer.writeFailure {
            if !silent { writeToStandardError("h3get: \(failure)\n") }
            printWriteOut(transfer, url: transfer.url, exit: .writeError, error: failure)
            return .writeError
        }
        if head {
            writeToStandardOutput(Self.headerBlock(of: transfer.response))
        } else if let buffered = transfer.buffered {
            writeToStandardOutput(buffered)
        }
        printWriteOut(transfer, url: transfer.url, exit: nil, error: "")
        return nil
    }

    /// The response's header block as curl prints it for `-i`, `-I` and `-D`: the status line
    /// (`HTTP/3 200`, `HTTP/2 200`, `HTTP/1.1 200 OK`), a `name: value` line per field, then a
    /// blank line, each ending in CRLF.
    static func headerBlock(of response: HTTPSessionResponse) -> String {
        let head = response.head
        var text = "HTTP/\(response.version.rawValue) \(head.status.code)"
        if response.version == .http1_1 { text += " " + head.status.reasonPhrase }
        text += "\r\n"
        for field in head.headerFields { text += "\(field.name): \(field.value)\r\n" }
        return text + "\r\n"
    }

    /// The reports of the connection `response` came on, on stderr (`--stats`).
    private func printStatistics(of response: HTTPSessionResponse, url: String, style: ReportStyle) async {
        let statistics = await response.statistics()
        let discovery = response.discovery?.rawValue
        switch style {
        case .text:
            var lines = ["* stats for \(url) (HTTP/\(response.version.rawValue)\(discovery.map { ", HTTP/3 chosen by: \($0)" } ?? ""))"]
            if let statistics {
                lines.append("* establishment: " + (statistics.establishment?.summary ?? "handshake not complete"))
                lines.append("* transfer: " + statistics.transfer.summary)
            } else {
                lines.append("* no QUIC reports: the response came over TCP")
            }
            log(lines.joined(separator: "\n"))
        case .json:
            let fields: [(name: String, value: String?)] = [("url", url), ("http_version", response.version.rawValue), ("discovery", discovery)]
            log(reportJSON(fields, establishment: statistics?.establishment, transfer: statistics?.transfer))
        }
    }

    /// The `--priority` for the URL at `index`: the only one given, or its own.
    private func priority(for index: Int) -> HTTPPriority? {
        guard !priority.isEmpty else { return nil }
        return HTTPPriority(fieldValue: priority.count == 1 ? priority[0] : priority[index])
    }

    private func showsProgress(writingToStdout: Bool) -> Bool {
        !silent && !verbose && !writingToStdout && urls.count == 1 && isatty(STDERR_FILENO) == 1
    }

    /// A one-line progress display on stderr, redrawn at most ten times a second.
    struct Progress {
        let total: Int?
        let started = ContinuousClock.now
        var lastDrawn = ContinuousClock.now - .seconds(1)

        mutating func update(_ received: Int) {
            let now = ContinuousClock.now
            guard now - lastDrawn >= .milliseconds(100) else { return }
            lastDrawn = now
            draw(received, final: false)
        }

        mutating func finish(_ received: Int) { draw(received, final: true) }

        private func draw(_ received: Int, final: Bool) {
            let (seconds, attoseconds) = (ContinuousClock.now - started).components
            let elapsed = max(Double(seconds) + Double(attoseconds) / 1e18, 0.001)
            let rate = fixedPoint(Double(received) / elapsed / 1e6, digits: 1) + " MB/s"
            var line = rightAligned(fixedPoint(Double(received) / 1e6, digits: 1), width: 10) + " MB  " + rate
            if let total, total > 0 {
                let fraction = min(1, Double(received) / Double(total))
                let width = 30
                let filled = Int(fraction * Double(width))
                line = "[" + String(repeating: "#", count: filled) + String(repeating: " ", count: width - filled) + "]"
                    + " " + rightAligned(fixedPoint(fraction * 100, digits: 1), width: 5) + "%" + line
            }
            writeToStandardError("\r" + line + (final ? "\n" : ""))
        }
    }

    private func destination(for url: String, index: Int) -> String? {
        var name: String?
        if index < outputs.count {
            name = outputs[index]
        } else if remoteName {
            let last = URLComponents(string: url)?.path.split(separator: "/").last.map(String.init)
            name = (last?.isEmpty == false ? last : nil) ?? "index.html"
        }
        guard let name else { return nil }
        if let outputDirectory, !name.hasPrefix("/") { return outputDirectory + "/" + name }
        return name
    }

    /// Writes `-w`'s text for a transfer, or for a URL that failed (`transfer` nil: as curl,
    /// `http_code` 000 and the error in `errormsg`). Every value is measured or read from the
    /// response; a variable h3get does not measure warns, as an unknown one does in curl.
    private func printWriteOut(_ transfer: Transfer?, url: String, exit: H3Get.Exit?, error: String) {
        guard let format = writeOut else { return }
        let (text, unknown) = writeOutText(
            format, values: writeOutValues(transfer, url: url, exit: exit, error: error),
            header: { name in HTTPField.Name(name).flatMap { transfer?.response.head.headerFields[$0] } }
        )
        // A failed transfer has no times: those write nothing, without a warning.
        for name in unknown where !silent && !Self.writeOutVariables.contains(name) { writeToStandardError("h3get: unknown --write-out variable: '\(name)'\n") }
        writeToStandardOutput(text)
    }

    /// The `-w` variables h3get knows, whether or not a transfer has a value for each.
    static let writeOutVariables: Set<String> = [
        "url", "url_effective", "scheme", "method", "size_upload", "exitcode", "errormsg", "http_code", "response_code",
        "http_version", "size_download", "size_header", "num_headers", "content_type", "speed_download", "speed_upload",
        "time_starttransfer", "time_total", "time_namelookup", "time_connect", "time_appconnect", "time_pretransfer",
        "num_connects", "remote_ip", "remote_port", "local_ip", "local_port",
    ]

    /// curl's `-w` variables that h3get measures, formatted as curl formats them: times in
    /// seconds with six decimals, sizes and speeds in bytes (and bytes per second).
    func writeOutValues(_ transfer: Transfer?, url: String, exit: H3Get.Exit?, error: String) -> [String: String] {
        let seconds: (Duration) -> String = { duration in
            let (whole, attoseconds) = duration.components
            return fixedPoint(Double(whole) + Double(attoseconds) / 1e18, digits: 6)
        }
        var values: [String: String] = [
            "url": url,
            "url_effective": url,  // h3get follows no redirects.
            "scheme": "HTTPS",  // As curl writes it.
            "method": requestTemplate.method.rawValue,
            "size_upload": transfer == nil ? "0" : String(uploadSize),
            "exitcode": String(exit?.rawValue ?? 0),
            "errormsg": error,
            "http_code": "000",
            "response_code": "000",
            "http_version": "0",
            "size_download": "0",
            "size_header": "0",
            "num_headers": "0",
            "content_type": "",
        ]
        guard let transfer else { return values }
        let response = transfer.response
        let code = String(response.status.code)
        let total = transfer.timeTotal.components
        let totalSeconds = Double(total.seconds) + Double(total.attoseconds) / 1e18
        values["http_code"] = code
        values["response_code"] = code
        values["http_version"] = response.version.rawValue
        values["size_download"] = String(transfer.size)
        values["size_header"] = String(Self.headerBlock(of: response).utf8.count)
        values["num_headers"] = String(response.head.headerFields.count)
        values["content_type"] = response.head.headerFields[.contentType] ?? ""
        values["speed_download"] = String(Int(totalSeconds > 0 ? Double(transfer.size) / totalSeconds : 0))
        values["speed_upload"] = String(Int(totalSeconds > 0 ? Double(uploadSize) / totalSeconds : 0))
        values["time_starttransfer"] = seconds(transfer.timeStartTransfer)
        values["time_total"] = seconds(transfer.timeTotal)
        // The connection's figures: HTTP/3 only, as the TCP client (async-http-client) reports
        // none. A connection found open took no look-up, connect or handshake for this transfer.
        if let http3 = response.http3, let establishment = http3.establishment {
            let since = { (instant: ContinuousClock.Instant) in seconds(max(.zero, instant - transfer.started)) }
            let opened = http3.openedForRequest
            values["num_connects"] = opened ? "1" : "0"
            values["time_namelookup"] = opened ? since(establishment.resolvedAt) : seconds(.zero)
            // QUIC's handshake is TLS's (RFC 9001): connected and app-connected at once.
            values["time_connect"] = opened ? since(establishment.connectedAt) : seconds(.zero)
            values["time_appconnect"] = values["time_connect"]
            // Requests wait for the handshake, then leave at once (0-RTT ones left before it).
            values["time_pretransfer"] = since(establishment.connectedAt)
            values["remote_ip"] = establishment.remoteAddress
            values["remote_port"] = String(establishment.remotePort)
            values["local_ip"] = establishment.localAddress
            values["local_port"] = String(establishment.localPort)
        }
        return values
    }

    /// One line to stderr.
    private func log(_ text: String) {
        writeToStandardError(text + "\n")
    }
}

extension Result where Failure == any Error {
    init(catching body: () async throws -> Success) async {
        do { self = .success(try await body()) } catch { self = .failure(error) }
    }
}

