#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Dispatch
#if canImport(Glibc)
import Glibc
#endif
import NIOConcurrencyHelpers

/// A connection in Network.framework's 2025 structured-concurrency API; here, with `QUIC` as
/// its protocol stack, one QUIC tunnel: `NetworkConnection<QUIC>`.
///
/// ```swift
/// let connection = NetworkConnection(to: .hostPort(host: "example.net", port: 4433)) {
///     QUIC(alpn: ["echo"]).idleTimeout(10_000)
/// }
/// let stream = try await connection.openStream()
/// try await stream.send(Data("hello".utf8), endOfStream: true)
/// ```
///
/// It is the same engine as the classic face: a `NetworkConnection<QUIC>` drives an
/// `NWConnectionGroup`, and each `QUIC.Stream` an `NWConnection`. The first call that needs
/// the tunnel starts it. `withNetworkConnection(to:using:_:)` scopes one to a closure.
// @unchecked Sendable: `group`, `stack` and `datagramInbox` are Sendable; `inboundTaken`,
// `started` and `datagramChannelStorage` are guarded by `lock`.
public final class NetworkConnection<ApplicationProtocol: Sendable>: NetworkChannel<ApplicationProtocol>, @unchecked Sendable {
    /// A connection's life cycle, Network.framework's channel states, which are a classic
    /// stream's: `.setup` until first use, `.preparing` while it connects and handshakes,
    /// `.ready` once the handshake completes (RFC 9001 §4.1.1), and the final `.failed` (the
    /// tunnel could not be made, or closed with an error) or `.cancelled` (this side closed it,
    /// or the peer did with application error 0). `.waiting` is not entered.
    public typealias State = NWConnection.State

    /// The protocol stack the connection was made with.
    public let stack: ApplicationProtocol
    /// The classic tunnel underneath.
    let group: NWConnectionGroup
    private let lock = NIOLock()
    private var started = false
    private var inboundTaken = false
    /// Streams the peer opens, subscribed before the group starts so none is missed.
    private let inbound: NWConnectionGroup.InboundStreams
    /// Datagrams the peer sends, when the stack enables them; subscribed before the group starts,
    /// and holding the newest `QUIC.Datagrams.unreadLimit` nobody has read.
    let datagramInbox: AsyncStream<Data>?
    /// The datagram channel, made on first use.
    private var datagramChannelStorage: AnyObject?
    /// Where the group's callbacks and completions run.
    let queue: DispatchQueue

    init(group: NWConnectionGroup, stack: ApplicationProtocol) {
        self.group = group
        self.stack = stack
        self.inbound = group.inboundStreams
        let datagramsEnabled = (stack as? QUIC)?.datagramsEnabled ?? false
        self.datagramInbox = datagramsEnabled ? group.datagrams(buffering: .bufferingNewest(QUIC.Datagrams<QUICDatagram>.unreadLimit)) : nil
        self.queue = DispatchQueue(label: "quic.network-connection")
        super.init(id: "quic-\(UUID().uuidString.lowercased())", parameters: group.parameters)
    }

    /// Starts the tunnel unless it started already; every operation that needs it calls this.
    func startIfNeeded() {
        let first = lock.withLock { () -> Bool in
            defer { started = true }
            return !started
        }
        if first { group.start(queue: queue) }
    }

    /// The current state.
    public var state: State { Self.state(of: group.state, started: lock.withLock { started }) }

    /// The current state, then every change; it ends after `.failed` or `.cancelled`. An
    /// addition: Apple offers `onStateUpdate(_:)` only.
    public var states: AsyncStream<State> {
        let groupStates = group.states
        return AsyncStream { continuation in
            let task = Task {
                for await state in groupStates {
                    continuation.yield(Self.state(of: state, started: self.lock.withLock { self.started }))
                }
                continuation.finish()
            }
            continuation.onTermination = { _ in task.cancel() }
        }
    }

    /// Calls `handler` with each new state, as Network.framework's `onStateUpdate`; returns
    /// the connection, so calls chain.
    @discardableResult
    public func onStateUpdate(_ handler: @escaping @Sendable (NetworkConnection, State) -> Void) -> Self {
        let states = self.states
        Task { for await state in states { handler(self, state) } }
        return self
    }

    /// The path the tunnel uses now; nil until its handshake completes.
    public var currentPath: NWPath? { group.currentPath }

    /// Calls `handler` with the tunnel's path once its handshake completes and with each new one
    /// after a validated migration (RFC 9000 §9), as Network.framework's `onPathUpdate`, until
    /// the tunnel ends; returns the connection, so calls chain.
    @discardableResult
    public func onPathUpdate(_ handler: @escaping @Sendable (NetworkConnection, NWPath) -> Void) -> Self {
        let paths = group.pathUpdates
        Task { for await path in paths { handler(self, path) } }
        return self
    }

    /// Calls `handler` with `true` once the tunnel has a path to send and receive on, and then
    /// each time that changes, as Network.framework's `onViabilityUpdate`: `false` when the
    /// kernel reports the route to the server gone (ENETUNREACH, EHOSTUNREACH), `true` when the
    /// server is heard from again. A path that goes silent without such a report ends in the
    /// idle timeout and `.failed`. Returns the connection, so calls chain.
    @discardableResult
    public func onViabilityUpdate(_ handler: @escaping @Sendable (NetworkConnection, Bool) -> Void) -> Self {
        let paths = group.pathUpdates
        Task {
            var reported: Bool?
            for await path in paths where reported != (path.status == .satisfied) {
                reported = path.status == .satisfied
                handler(self, path.status == .satisfied)
            }
        }
        return self
    }

    /// Network.framework's `onBetterPathUpdate`, kept so code that calls it compiles: Linux has
    /// no preference among interfaces, so there is never a better path and `handler` is not
    /// called. Returns the connection, so calls chain.
    @discardableResult
    public func onBetterPathUpdate(_ handler: @escaping @Sendable (NetworkConnection, Bool) -> Void) -> Self {
        self
    }

    private static func state(of groupState: NWConnectionGroup.State, started: Bool) -> State {
        switch groupState {
        case .setup: return started ? .preparing : .setup
        case .waiting(let error): return .waiting(error)
        case .ready: return .ready
        case .failed(let error): return .failed(error)
        case .cancelled: return .cancelled
        }
    }

    /// Waits for `.ready`, starting the connection; throws the error it failed with, or
    /// ECANCELED.
    func ready() async throws {
        startIfNeeded()
        try await group.waitUntilReady()
    }

    /// Takes the inbound streams; throws if they were taken already.
    func takeInbound() throws -> NWConnectionGroup.InboundStreams {
        try lock.withLock {
            guard !inboundTaken else { throw NWError.posix(.EALREADY) }
            inboundTaken = true
            return inbound
        }
    }
}

extension NetworkConnection where ApplicationProtocol == QUIC {
    /// The datagram channel, when the stack enables datagrams.
    private var datagramChannel: QUIC.Datagrams<QUICDatagram>? {
        guard let inbox = datagramInbox else { return nil }
        return lock.withLock {
            if let channel = datagramChannelStorage as? QUIC.Datagrams<QUICDatagram> { return channel }
            let channel = QUIC.Datagrams<QUICDatagram>(parent: self, inbox: inbox)
            datagramChannelStorage = channel
            return channel
        }
    }

    /// A QUIC tunnel to `endpoint` with the stack the closure builds, for example
    /// `NetworkConnection(to: endpoint) { QUIC(alpn: ["echo"]) }`. It starts on first use.
    public convenience init(to endpoint: NWEndpoint, @ProtocolStackBuilder<QUIC> using stack: () -> QUIC) {
        let quic = stack()
        let group = NWConnectionGroup(with: NWMultiplexGroup(to: endpoint), using: quic.parameters)
        self.init(group: group, stack: quic)
    }

    /// A QUIC tunnel to `endpoint` with this stack.
    public convenience init(to endpoint: NWEndpoint, using stack: QUIC) {
        self.init(to: endpoint) { stack }
    }

    /// Starts the tunnel now rather than at first use, as Apple's `start()`: it connects and
    /// handshakes, and `onStateUpdate` reports `.ready` or `.failed`. Optional; opening a
    /// stream starts it too.
    @discardableResult
    public func start() -> Self {
        startIfNeeded()
        return self
    }

    /// Opens a stream; waits until the tunnel is ready and the peer's stream limit allows one
    /// more (MAX_STREAMS, RFC 9000 §4.6). Bidirectional unless asked otherwise.
    public func openStream(directionality: QUICStream.Directionality = .bidirectional) async throws -> QUIC.Stream<QUICStream> {
        try await openStream(directionality: directionality) { stream in stream }
    }

    /// Opens a stream whose stack puts framing on top of it, for example
    /// `openStream { stream in TLV { stream } }` or `Coder(Note.self, using: .json) { stream }`.
    public func openStream<NewApplicationProtocol: OneToOneProtocol>(
        directionality: QUICStream.Directionality = .bidirectional,
        @ProtocolStackBuilder<NewApplicationProtocol> _ prepending: (QUICStream) -> NewApplicationProtocol
    ) async throws -> QUIC.Stream<NewApplicationProtocol> {
        let top = prepending(QUICStream())
        try await ready()
        let connection = NWConnection(outboundIn: group, direction: directionality == .bidirectional ? .bidirectional : .unidirectional)
        let states = connection.states
        connection.start(queue: queue)
        let streamID = try await withTaskCancellationHandler {
            for await state in states {
                switch state {
                case .ready:
                    return connection.metadataObject.streamIdentifier
                case .failed(let error): throw error
                case .cancelled: throw CancellationError()
                default: continue
                }
            }
            throw NWError.posix(.ECANCELED)
        } onCancel: {
            connection.cancel()
        }
        return QUIC.Stream(connection, parent: self, streamID: streamID, applicationProtocol: top)
    }

    /// Runs `handler` for each stream the peer opens, each in its own child task, until the
    /// tunnel ends; call it once (a second call throws EALREADY). Starts the tunnel if needed.
    ///
    /// When a handler returns, its stream ends: an unfinished sending side is finished (FIN).
    /// When it throws, or its task is cancelled, the stream is reset with its
    /// `streamApplicationErrorCode`, or `QUIC.Stream.cancelledErrorCode`. Returns when the
    /// tunnel closes; throws the error it failed with.
    public func inboundStreams(_ handler: @escaping @Sendable (QUIC.Stream<QUICStream>) async throws -> Void) async throws {
        try await inboundStreams(prepending: { stream in stream }, handler)
    }

    /// Runs `handler` for each stream the peer opens, with framing on top of each, as
    /// `inboundStreams(_:)` does.
    public func inboundStreams<NewApplicationProtocol: OneToOneProtocol>(
        @ProtocolStackBuilder<NewApplicationProtocol> prepending: @escaping (QUICStream) -> NewApplicationProtocol,
        _ handler: @escaping @Sendable (QUIC.Stream<NewApplicationProtocol>) async throws -> Void
    ) async throws {
        let streams = try takeInbound()
        startIfNeeded()
        let queue = self.queue
        await withDiscardingTaskGroup { tasks in
            for await connection in streams {
                connection.start(queue: queue)
                let stream = QUIC.Stream(
                    connection, parent: self, streamID: connection.metadataObject.streamIdentifier, applicationProtocol: prepending(QUICStream()))
                tasks.addTask {
                    do {
                        try await handler(stream)
                        stream.cancel()
                    } catch {
                        stream.resetForCancellation()
                    }
                }
            }
        }
        if case .failed(let error) = group.state { throw error }
    }

    /// The application error this side closes the tunnel with (CONNECTION_CLOSE, RFC 9000
    /// §10.2), or, once the peer closed it with one, the peer's; as Apple's, code 0 until one is
    /// set or received.
    public var applicationError: NWProtocolQUIC.ApplicationError {
        get { group.tunnelMetadata.applicationError ?? NWProtocolQUIC.ApplicationError(code: 0) }
        set { group.tunnelMetadata.applicationError = newValue }
    }

    /// The ALPN protocol the handshake settled on (RFC 9001 §8.1); nil before `.ready`.
    public var negotiatedALPN: String? { quicMetadata.negotiatedALPN }

    /// The peer's `max_idle_timeout` (RFC 9000 §18.2) in milliseconds, as Apple's; 0 before
    /// `.ready`.
    public var remoteIdleTimeout: Int { quicMetadata.remoteIdleTimeout }

    /// The TLS side of the tunnel, for `sec_protocol_metadata_get_negotiated_protocol` and the
    /// other `sec_protocol_metadata_*` calls; before the handshake it reports nothing.
    public var securityProtocolMetadata: sec_protocol_metadata_t { quicMetadata.securityProtocolMetadata }

    /// The largest datagram payload the peer accepts now (RFC 9221 §3); 0 when datagrams are off.
    public var usableDatagramFrameSize: Int { quicMetadata.usableDatagramFrameSize }

    /// Whether the tunnel sends PINGs to stay open (RFC 9000 §10.1.2); off by default.
    public var keepalive: NWProtocolQUIC.Metadata.KeepAliveBehavior {
        get { quicMetadata.keepAlive }
        set { quicMetadata.keepAlive = newValue }
    }

    private var quicMetadata: NWProtocolQUIC.Metadata { group.metadataObject }

    /// The tunnel's one datagram channel (RFC 9221), the same object on every access: every
    /// datagram the peer sends arrives on it. Waits until the tunnel is ready, starting it.
    ///
    /// - Throws: `NWError.posix(.EOPNOTSUPP)` when the stack did not enable datagrams with
    ///   `maxDatagramFrameSize(_:)`, or the error the tunnel failed with.
    public var datagrams: QUIC.Datagrams<QUICDatagram> {
        get async throws {
            guard let channel = datagramChannel else { throw NWError.posix(.EOPNOTSUPP) }
            try await ready()
            return channel
        }
    }

    /// Closes the tunnel: with `applicationError` when set, otherwise NO_ERROR (CONNECTION_CLOSE,
    /// RFC 9000 §10.2). Every stream ends with it. An addition: on Apple platforms a connection
    /// closes when its scope or task ends, which `withNetworkConnection(to:using:_:)` gives too.
    public func cancel() {
        if lock.withLock({ !started }) {
            // Never started: start so the group reports its end, then close.
            startIfNeeded()
        }
        group.cancel()
    }
}

/// Runs `body` with a QUIC tunnel to `endpoint` and closes the tunnel when `body` returns or
/// throws: with the `applicationError` set on it, otherwise NO_ERROR. Nothing the tunnel made
/// outlives the call.
public func withNetworkConnection<Result: Sendable>(
    to endpoint: NWEndpoint,
    @ProtocolStackBuilder<QUIC> using stack: () -> QUIC,
    _ body: (NetworkConnection<QUIC>) async throws -> Result
) async throws -> Result {
    let connection = NetworkConnection(to: endpoint, using: stack)
    defer { connection.cancel() }
    return try await body(connection)
}
