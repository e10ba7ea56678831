import Dispatch
#if canImport(Glibc)
import Glibc
#endif
import NIOConcurrencyHelpers

/// A listener in Network.framework's 2025 structured-concurrency API; with `QUIC` as its
/// stack, `run` delivers one `NetworkConnection<QUIC>` per QUIC tunnel.
///
/// ```swift
/// let listener = try NetworkListener(for: .hostPort(host: "127.0.0.1", port: 4433)) {
///     QUIC(alpn: ["echo"]).tls.localIdentity(.files(certificateChain: "cert.pem", privateKey: "key.pem"))
/// }
/// try await listener.run { connection in
///     try await connection.inboundStreams { stream in … }
/// }
/// ```
///
/// It runs on the classic `NWListener`, with the same workers, limits and address validation.
// @unchecked Sendable: `listener` and `stack` are Sendable; `running` is guarded by `lock`.
public final class NetworkListener<ApplicationProtocol: Sendable>: @unchecked Sendable {
    /// A listener's life cycle, the classic listener's states: `.setup`, `.ready` once its port
    /// is bound, and the final `.failed` (the port could not be bound, or the stack cannot serve
    /// QUIC) or `.cancelled` (`run` ended).
    public typealias State = NWListener.State

    /// The stack the listener serves.
    public let stack: ApplicationProtocol
    /// The classic listener underneath.
    let listener: NWListener
    private let lock = NIOLock()
    private var running = false

    init(listener: NWListener, stack: ApplicationProtocol) {
        self.listener = listener
        self.stack = stack
    }

    /// The bound port, once `.ready`.
    public var port: NWEndpoint.Port? { listener.port }

    /// The current state.
    public var state: State { listener.state }

    /// How many more connections `run` delivers, as Network.framework's `newConnectionLimit`:
    /// each delivered connection takes one off, unless it is `NWListener.InfiniteConnectionLimit`
    /// (the default). At 0 the handler is not called; tunnels that complete their handshake wait,
    /// in order, until the limit is raised (see `NWListener.newConnectionLimit`).
    public var newConnectionLimit: Int {
        get { listener.newConnectionLimit }
        set { listener.newConnectionLimit = newValue }
    }

    /// The current state, then every change; it ends after `.failed` or `.cancelled`. An
    /// addition: Apple offers `onStateUpdate(_:)` only.
    public var states: AsyncStream<State> { listener.states }

    /// Calls `handler` with each new state, as Network.framework's `onStateUpdate`; returns
    /// the listener, so `try await NetworkListener { … }.onStateUpdate { … }.run { … }` chains.
    @discardableResult
    public func onStateUpdate(_ handler: @escaping @Sendable (NetworkListener, State) -> Void) -> Self {
        let states = self.states
        Task { for await state in states { handler(self, state) } }
        return self
    }
}

extension NetworkListener where ApplicationProtocol == QUIC {
    /// A QUIC listener on `endpoint` (host and port; port 0 or `.any` picks one), or on every
    /// IPv4 address and a free port when nil. Without a `localIdentity` in the stack's TLS it
    /// generates a self-signed certificate for `localhost`, `127.0.0.1` and `::1`.
    ///
    /// - Throws: `TLSError` when the certificate or key cannot be loaded.
    public convenience init(for endpoint: NWEndpoint? = nil, @ProtocolStackBuilder<QUIC> using stack: () -> QUIC) throws {
        let quic = stack()
        let parameters = quic.parameters
        parameters.requiredLocalEndpoint = endpoint
        self.init(listener: try NWListener(using: parameters), stack: quic)
    }

    /// The certificate the listener generated because the stack named none.
    public var generatedCertificate: SelfSignedCertificate? { listener.generatedCertificate }

    /// Binds the port and runs `handler` for each QUIC tunnel, each in its own child task, until
    /// the calling task is cancelled or the port fails. Call it once.
    ///
    /// When a handler returns or throws, its tunnel closes: with the `applicationError` set on
    /// it, otherwise NO_ERROR. When `run` ends, the listener and every tunnel close.
    public func run(_ handler: @escaping @Sendable (NetworkConnection<QUIC>) async throws -> Void) async throws {
        try lock.withLock {
            guard !running else { throw NWError.posix(.EALREADY) }
            running = true
        }
        let groups = listener.connectionGroups
        let states = listener.states
        listener.start(queue: DispatchQueue(label: "quic.network-listener"))
        for await state in states {
            if case .ready = state { break }
            if case .failed(let error) = state { throw error }
            if case .cancelled = state { return }
        }
        let stack = self.stack
        await withTaskCancellationHandler {
            await withDiscardingTaskGroup { tasks in
                for await group in groups {
                    let connection = NetworkConnection(group: group, stack: stack)
                    connection.startIfNeeded()
                    tasks.addTask {
                        defer { connection.cancel() }
                        try? await handler(connection)
                    }
                }
            }
        } onCancel: {
            listener.cancel()
        }
        if case .failed(let error) = listener.state { throw error }
    }
}
