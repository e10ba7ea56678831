import Dispatch
import H3
import HTTPTypes
import QuicTransport
import Vapor
import VaporTodosApp

#if canImport(Glibc)
import Glibc
#endif

/// The benchmark's baseline (`scripts/bench-frameworks`): the Vapor application's `/kib`
/// answer, 1 KiB, from a bare `HTTP3Server` handler, so that the difference is what Vapor and
/// its adapter cost per request. Hummingbird's `todos-bare` is the same handler; each example
/// has its own so that its benchmark builds from its own package.
///
///     vapor-todos-bare PORT [--framework-fields] [--promise-responder]
///     vapor-todos-bare --through-adapter PORT
///     vapor-todos-bare --vapor-only [--route-only] [--batch N] COUNT
///
/// `--framework-fields` answers with the header fields Vapor's response carries over HTTP/3,
/// `content-length` and `date` beside `content-type`, so that encoding them is not counted as
/// the adapter's. `--promise-responder` answers as the adapter answers a request without a body,
/// through an `HTTP3Server.PromiseResponder` and no task.
@main
struct VaporTodosBare {
    /// Runs on a blocked main thread, not one parked in `dispatch_main`, where Valgrind 3.19
    /// crashes in dispatch's `sigsuspend`.
    static func main() {
        let finished = DispatchSemaphore(value: 0)
        // Detached: a task made here would inherit the main actor, whose thread waits below.
        Task.detached {
            do {
                try await serve()
            } catch {
                print("vapor-todos-bare: \(error)")
                exit(1)
            }
            finished.signal()
        }
        finished.wait()
    }

    static func serve() async throws {
        let arguments = CommandLine.arguments
        if arguments.count == 3, arguments[1] == "--through-adapter", let port = UInt16(arguments[2]) {
            return try await serveThroughAdapter(port: port)
        }
        if arguments.count >= 3, arguments[1] == "--vapor-only", let vaporOnly = VaporOnly(arguments.dropFirst(2)) {
            return try await vaporOnly.run()
        }
        let options = arguments.dropFirst(2)
        guard arguments.count >= 2, let port = UInt16(arguments[1]),
            options.allSatisfy({ ["--framework-fields", "--promise-responder"].contains($0) })
        else {
            print(usage)
            exit(2)
        }
        var configuration = HTTP3Server.Configuration()
        configuration.host = "127.0.0.1"
        configuration.port = port
        let identity = try SelfSignedCertificate.generate()
        configuration.identity = identity
        let body = TodosKiB.body
        let answer: @Sendable () -> HTTP3ServerResponse
        if options.contains("--framework-fields") {
            // The date made once a second, as the adapter makes it (`HTTPDateField`).
            let dates = HTTPDateField()
            let fields: HTTPFields = [.contentType: "application/octet-stream", .contentLength: String(body.count)]
            answer = {
                var withDate = fields
                withDate.append(dates.current)
                return HTTP3ServerResponse(status: .ok, headerFields: withDate, body: body)
            }
        } else {
            answer = { HTTP3ServerResponse(status: .ok, headerFields: [.contentType: "application/octet-stream"], body: body) }
        }
        let server: HTTP3Server
        if options.contains("--promise-responder") {
            // Answered as the adapter answers a request without a body: a promise, no task.
            server = try HTTP3Server(
                configuration: configuration,
                promiseResponder: { _, promise in
                    promise.succeed(answer())
                    return true
                },
                handler: { _ in answer() }
            )
        } else {
            server = try HTTP3Server(configuration: configuration) { _ in answer() }
        }
        let bound = try await server.start()
        print("HTTP/3 https://127.0.0.1:\(bound)/kib  SHA-256 \(identity.sha256FingerprintHex)")
        fflush(nil)  // also into a pipe, where stdout is fully buffered
        while true { try await Task.sleep(for: .seconds(3600)) }
    }

    static let usage = """
        usage: vapor-todos-bare PORT [--framework-fields] [--promise-responder]
               vapor-todos-bare --through-adapter PORT
               vapor-todos-bare --vapor-only [--route-only] [--batch N] COUNT
        """

    /// `--through-adapter PORT`: the trivial route served through the adapter, the benchmark's
    /// measure of its cost. A Vapor application with `/kib` as its only route and nothing else
    /// but the adapter (`app.servers.use(.http3(…))`, with its `Alt-Svc` middleware), so that
    /// what it costs over the bare handler is Vapor's routing and the adapter's own work.
    /// Hummingbird's `todos-bare --through-adapter` is its counterpart.
    static func serveThroughAdapter(port: UInt16) async throws {
        let app = try await productionApplication()
        do {
            let identity = try SelfSignedCertificate.generate()
            configureRouteOnly(app, identity: identity)
            try await app.asyncBoot()
            try await app.server.start(address: .hostname("127.0.0.1", port: Int(port)))
            print("HTTP/3 https://127.0.0.1:\(port)/kib  SHA-256 \(identity.sha256FingerprintHex)")
            fflush(nil)  // also into a pipe, where stdout is fully buffered
            while true { try await Task.sleep(for: .seconds(3600)) }
        } catch {
            try await app.asyncShutdown()
            throw error
        }
    }

    /// An application with Vapor's logging as `VaporTodos serve --env production` sets it up:
    /// notices and above.
    static func productionApplication() async throws -> Application {
        var environment = Environment(name: "production", arguments: ["vapor-todos-bare"])
        try LoggingSystem.bootstrap(from: &environment)
        return try await Application.make(environment)
    }

    /// Configures `app` with the adapter, serving with `identity`, and `/kib` alone.
    static func configureRouteOnly(_ app: Application, identity: SelfSignedCertificate?) {
        var configuration = Application.HTTP3.Configuration()
        configuration.server.identity = identity
        app.servers.use(.http3(configuration))
        addKiBRoute(to: app)
    }

    /// Requests in flight at once in `--vapor-only`: h3load's `-m 50`.
    static let inFlight = 50
}

/// `--vapor-only [--route-only] [--batch N] COUNT`: Vapor's own work for COUNT requests of
/// `/kib`, with no transport at all, so that the benchmark can tell Vapor's cost per request
/// from its adapter's.
///
/// The application is set up by the example's own `configure(_:)`, or with `--route-only` as
/// `--through-adapter` sets it up, and no server is started. Each request is made as the adapter
/// makes one (`URI(path:)`, version 3.0, the headers h3load sends), with a logger whose
/// `request-id` is held back as the adapter holds it, and goes through the application's
/// responder: `HTTP3AltSvcMiddleware`, which passes an HTTP/3 request by, then in the example
/// `FileMiddleware`, then the router.
///
/// Vapor is driven as the adapter drives it (``RequestsInFlight``): from the event loop, outside
/// any task, so that `FileMiddleware`'s task runs on the global pool as it does in Vapor's own
/// server; and fifty at a time, as `h3load -m 50` keeps them at the server. One at a time, the
/// loop would sleep and be woken twice for every request, some 7k instructions that a loop with
/// fifty requests shares among them all. The benchmark runs it under callgrind at two counts;
/// the difference, divided by the difference in requests, is the cost per request, with start-up
/// cancelled out.
///
/// `--batch N` sends the replacements for answered requests N at a time, as requests that
/// arrive several to a datagram reach the server; the benchmark sends them one for one.
struct VaporOnly {
    var routeOnly = false
    var batch = 1
    var count: Int

    init?(_ arguments: ArraySlice<String>) {
        var arguments = arguments
        guard let count = arguments.popLast().flatMap(Int.init), count > 0 else { return nil }
        self.count = count
        while let option = arguments.popFirst() {
            switch option {
            case "--route-only": routeOnly = true
            case "--batch":
                guard let batch = arguments.popFirst().flatMap(Int.init), (1...VaporTodosBare.inFlight).contains(batch)
                else { return nil }
                self.batch = batch
            default: return nil
            }
        }
    }

    func run() async throws {
        let app = try await VaporTodosBare.productionApplication()
        do {
            // No certificate is made, since no server starts: making one costs a key's
            // generation and a signature, whose count of instructions varies from run to run
            // by millions, some 5k for each of 1,000 requests.
            if routeOnly {
                VaporTodosBare.configureRouteOnly(app, identity: nil)
            } else {
                // The example's `configure(_:)` makes one unless it is given PEM files, which
                // it reads only when the server starts.
                setenv("TLS_CERT", "unread-cert.pem", 1)
                setenv("TLS_KEY", "unread-key.pem", 1)
                try await configure(app)
            }
            try await app.asyncBoot()
            let responder = app.responder.current
            let eventLoop = app.eventLoopGroup.any()
            let written = try await eventLoop.flatSubmit {
                RequestsInFlight(count: count, batch: batch, responder: responder, app: app, eventLoop: eventLoop).start()
            }.get()
            guard written == count * TodosKiB.body.count else {
                throw Abort(.internalServerError, reason: "\(count) responses carried \(written) bytes, not \(count) KiB")
            }
            print("vapor-todos-bare: \(count) requests through Vapor alone")
        } catch {
            try await app.asyncShutdown()
            throw error
        }
        try await app.asyncShutdown()
    }
}

/// `count` requests through a Vapor responder, ``VaporTodosBare/inFlight`` at a time; each
/// `batch` answered is replaced by as many new requests at once. Confined to one event loop, where
/// every request starts and every answer lands.
// @unchecked Sendable: its counters are read and written only on `eventLoop`.
final class RequestsInFlight: @unchecked Sendable {
    let count: Int
    let batch: Int
    let responder: any Responder
    let app: Application
    let eventLoop: any EventLoop
    /// Read once, as the adapter reads it: `Application.allocator` is a storage look-up.
    let allocator: ByteBufferAllocator
    /// Made once and copied for each request, as the adapter does.
    let requestLogger: Logger
    let done: EventLoopPromise<Int>
    var sent = 0
    /// Requests that may be sent so far: those sent and those the sending loop has yet to send.
    var released = 0
    /// Whether the sending loop (``release(_:)``) is on the stack. A responder that answers at
    /// once completes inside it, and the replacement is left to that loop: sent from within, each
    /// request would nest another, and every request's blocks would live until the last.
    var sending = false
    var answered = 0
    /// Requests answered whose replacements are not released yet.
    var owed = 0
    /// Bytes of the bodies answered.
    var written = 0
    /// The first request that failed stops the run.
    var failure: (any Error)?

    init(count: Int, batch: Int, responder: any Responder, app: Application, eventLoop: any EventLoop) {
        self.count = count
        self.batch = batch
        self.responder = responder
        self.app = app
        self.eventLoop = eventLoop
        self.allocator = app.allocator
        var requestLogger = app.logger
        requestLogger.handler = DeferredMetadataLogHandler(base: requestLogger.handler)
        self.requestLogger = requestLogger
        self.done = eventLoop.makePromise()
    }

    /// Sends the first requests, on the loop; the future gives the bytes of all the bodies.
    func start() -> EventLoopFuture<Int> {
        release(min(VaporTodosBare.inFlight, count))
        return done.futureResult
    }

    private func release(_ more: Int) {
        released += more
        guard !sending else { return }
        sending = true
        while sent < released, failure == nil { send() }
        sending = false
    }

    private func send() {
        sent += 1
        let request = Request(
            application: app, method: .GET, url: URI(path: "/kib"), version: HTTPVersion(major: 3, minor: 0),
            headersNoUpdate: ["host": "127.0.0.1:4433", "user-agent": "h3load/0.1"], collectedBody: nil,
            remoteAddress: nil, logger: requestLogger, byteBufferAllocator: allocator, on: eventLoop
        )
        responder.respond(to: request).hop(to: eventLoop).whenComplete { result in
            self.answered += 1
            switch result {
            case .success(let response): self.written += response.body.buffer?.readableBytes ?? 0
            case .failure(let error): self.failure = self.failure ?? error
            }
            if self.failure == nil, self.released < self.count {
                self.owed += 1
                // The last of a batch, or the last request in flight: release the replacements.
                if self.owed == self.batch || self.answered == self.sent {
                    let replacements = min(self.owed, self.count - self.released)
                    self.owed = 0
                    self.release(replacements)
                }
            } else if self.answered == self.sent, self.failure != nil || self.sent == self.count {
                if let failure = self.failure { self.done.fail(failure) } else { self.done.succeed(self.written) }
            }
        }
    }
}
