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
///     vapor-todos-bare PORT [--framework-fields] [--future-responder]
///     vapor-todos-bare --vapor-only COUNT
///
/// `--framework-fields` answers with the header fields Vapor's response carries over HTTP/3,
/// `content-length` and `date` beside `content-type`, so that encoding them is not counted as
/// the adapter's. `--future-responder` answers as the adapter answers a request without a body,
/// with a future from an `HTTP3Server.FutureResponder` and no task.
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
        if arguments.count == 3, arguments[1] == "--vapor-only", let count = Int(arguments[2]) {
            return try await vaporOnly(count: count)
        }
        let options = arguments.dropFirst(2)
        guard arguments.count >= 2, let port = UInt16(arguments[1]),
            options.allSatisfy({ ["--framework-fields", "--future-responder"].contains($0) })
        else {
            print("usage: vapor-todos-bare PORT [--framework-fields] [--future-responder] | --vapor-only COUNT")
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
        if options.contains("--future-responder") {
            // Answered as the adapter answers a request without a body: a future, no task.
            server = try HTTP3Server(
                configuration: configuration,
                futureResponder: { request in request.eventLoop?.makeSucceededFuture(answer()) },
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

    /// `--vapor-only COUNT`: the Vapor application's own work for COUNT requests of `/kib`,
    /// with no transport at all, so that the benchmark can tell Vapor's cost per request from
    /// its adapter's.
    ///
    /// The application is set up by the example's own `configure(_:)`, and no server is
    /// started. Each request is made as Vapor's HTTP/1.1 decoder makes one (`URI(path:)`, the
    /// headers h3load sends), with a logger whose `request-id` is held back as the adapter holds
    /// it, and goes through the application's responder: `FileMiddleware`, then the router.
    /// The requests run on the event loop they name, as the adapter runs them on their
    /// connection's. Off it, every future would complete on another thread, and Vapor's own
    /// count would grow by some 10 k of hand-offs the adapter never makes. The benchmark runs
    /// it under callgrind at two counts; the difference, divided by the difference in requests,
    /// is the cost per request, with start-up cancelled out.
    static func vaporOnly(count: Int) async throws {
        // Logging as `VaporTodos serve --env production` sets it up: notices and above.
        var environment = Environment(name: "production", arguments: ["vapor-todos-bare"])
        try LoggingSystem.bootstrap(from: &environment)
        let app = try await Application.make(environment)
        do {
            try await configure(app)
            try await app.asyncBoot()
            let responder = app.responder.current
            let eventLoop = app.eventLoopGroup.any()
            // On the request's event loop, as HTTP3Server runs each handler on its connection's:
            // Vapor's futures then complete on the thread that waits for them.
            let written = try await withTaskExecutorPreference(EventLoopExecutor(eventLoop)) {
                try await requests(count, through: responder, of: app, on: eventLoop)
            }
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

    /// Sends `count` requests through `responder` and returns the bytes of their bodies.
    static func requests(_ count: Int, through responder: any Responder, of app: Application, on eventLoop: any EventLoop) async throws -> Int {
        let allocator = app.allocator
        var written = 0
        for _ in 0..<count {
            var logger = app.logger
            logger.handler = DeferredMetadataLogHandler(base: logger.handler)
            let request = Request(
                application: app, method: .GET, url: URI(path: "/kib"), version: .http1_1,
                headersNoUpdate: ["host": "127.0.0.1:4433", "user-agent": "h3load/0.1"], collectedBody: nil,
                remoteAddress: nil, logger: logger, byteBufferAllocator: allocator, on: eventLoop
            )
            let response = try await responder.respond(to: request).get()
            written += response.body.buffer?.readableBytes ?? 0
        }
        return written
    }
}

/// Runs Swift tasks on one NIO event loop (SE-0417), as H3 runs a connection's handlers.
final class EventLoopExecutor: TaskExecutor {
    let eventLoop: any EventLoop

    init(_ eventLoop: any EventLoop) {
        self.eventLoop = eventLoop
    }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        eventLoop.execute { job.runSynchronously(on: self.asUnownedTaskExecutor()) }
    }
}
