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
import NIOCore

/// One QUIC stream as a Network.framework connection, or, made with `init(host:port:using:)`,
/// a tunnel that carries one stream.
///
/// As on Apple platforms, a send ends the stream's sending side (FIN) when it completes the
/// `.finalMessage` or `.defaultStream` context; completing `.defaultMessage` does not, so an app
/// may send many messages with the default arguments. `receive` delivers bytes
/// in order; reading is what opens the peer's flow-control window, so an unread stream holds
/// the sender back. Setting `applicationError` in the QUIC metadata before `cancel()` resets
/// the stream with that code (RESET_STREAM and STOP_SENDING, RFC 9000 §19.4–§19.5).
// @unchecked Sendable: state, handler and queue live in `observable` (locked); the fields marked
// "Loop-confined" are touched only on the group's event loop, and skip Swift's run-time
// exclusivity check (no access to one spans a call that can reach it again): a short echo
// stream paid sixteen such checks here.
public final class NWConnection: @unchecked Sendable {
    /// A stream's life cycle, matching Apple's `NWConnection.State`: `.setup` until
    /// `start(queue:)`, `.preparing` until the stream has its ID, then `.ready`; `.failed` and
    /// `.cancelled` are final.
    public enum State: Equatable, Sendable {
        /// Made, and `start(queue:)` not called yet.
        case setup
        /// Kept for Apple's exhaustive switches; not entered here: tunnels fail rather than wait.
        case waiting(NWError)
        /// Started and waiting to open: for the tunnel's handshake (or 0-RTT keys with
        /// `allowFastOpen`) and for stream credit from the peer (MAX_STREAMS, RFC 9000 §19.11).
        case preparing
        /// The stream is open: it has its stream ID and sends and receives.
        case ready
        /// Final: the stream could not be opened, or its tunnel failed or closed under it, with the
        /// reason. A peer's RESET_STREAM leaves the state alone: receives then fail with its code.
        case failed(NWError)
        /// Final: `cancel()` or `forceCancel()` ended the stream.
        case cancelled
    }

    /// Describes a message's place in the stream and carries its protocol metadata, as in
    /// Network.framework. A received message's context holds the stream's QUIC metadata.
    /// Expiration and priority are kept for source compatibility; QUIC streams do not use them.
    // @unchecked Sendable: immutable after init.
    public class ContentContext: @unchecked Sendable {
        /// The context's name, as in Network.framework (`"default"`, `"final"`, `"stream"` for the
        /// predefined ones); QUIC streams do not use it.
        public let identifier: String
        /// Whether the message ends the stream. A received context is final at the peer's FIN; a
        /// send with `isComplete: true` in a final context sends FIN (RFC 9000 §19.8).
        public let isFinal: Bool
        /// Milliseconds after which an unsent message may be dropped; 0 for never.
        public let expirationMilliseconds: UInt64
        /// The message's priority relative to others, from 0.0 to 1.0.
        public let relativePriority: Double
        /// A message that must be sent before this one.
        public let antecedent: ContentContext?
        /// The protocol metadata attached to the message.
        public let protocolMetadata: [NWProtocolMetadata]

        /// A context with these values, matching Apple's initialiser: `expiration` in milliseconds
        /// (0 for never) and `priority` from 0.0 to 1.0, both kept but unused; nil `metadata` is
        /// none.
        public init(
            identifier: String,
            expiration: UInt64 = 0,
            priority: Double = 0.5,
            isFinal: Bool = false,
            antecedent: ContentContext? = nil,
            metadata: [NWProtocolMetadata]? = []
        ) {
            self.identifier = identifier
            self.expirationMilliseconds = expiration
            self.relativePriority = priority
            self.isFinal = isFinal
            self.antecedent = antecedent
            self.protocolMetadata = metadata ?? []
        }

        /// The attached metadata of one protocol, if any.
        public func protocolMetadata(definition: NWProtocolDefinition) -> NWProtocolMetadata? {
            protocolMetadata.first { $0.definition == definition }
        }

        /// Network.framework's default context (identifier `"default"`), the one `send` uses
        /// unless given another.
        public static let defaultMessage = ContentContext(identifier: "default")
        /// Network.framework's final context (identifier `"final"`, `isFinal` true).
        public static let finalMessage = ContentContext(identifier: "final", isFinal: true)
        /// Network.framework's byte-stream context (identifier `"stream"`): the whole stream is
        /// one message, so completing it sends FIN, as `finalMessage` does.
        public static let defaultStream = ContentContext(identifier: "stream")

        /// Whether completing this context ends the stream: Apple's write-close contexts.
        var endsStream: Bool { isFinal || self === ContentContext.defaultStream }
    }

    /// When a send completes.
    public enum SendCompletion: Sendable {
        /// Called once the bytes are written into QUIC packets (flow control permitting), or with an error.
        @preconcurrency case contentProcessed(@Sendable (NWError?) -> Void)
        /// No completion.
        case idempotent
    }

    /// The completion of `receive` and `receiveMessage`, as in Network.framework: the bytes (nil
    /// for none), the context (with the stream's QUIC metadata; final at the peer's FIN), whether
    /// the peer's FIN has been reached, and the error (then bytes and context are nil).
    @preconcurrency public typealias ReceiveCompletion = @Sendable (Data?, ContentContext?, Bool, NWError?) -> Void

    let group: NWConnectionGroup
    let metadataObject: NWProtocolQUIC.Metadata
    /// True for `init(host:port:using:)`: the connection owns its tunnel.
    let ownsGroup: Bool

    let observable = ObservableState<State>(.setup) { state in
        switch state {
        case .failed, .cancelled: return true
        default: return false
        }
    }

    /// Apple's path handlers and the task that feeds them from the tunnel's path updates.
    private struct PathObservers {
        var path: (@Sendable (NWPath) -> Void)?
        var viability: (@Sendable (Bool) -> Void)?
        var betterPath: (@Sendable (Bool) -> Void)?
        var watch: Task<Void, Never>?
        var ended = false
    }
    private let pathObservers = NIOLockedValueBox(PathObservers())

    /// The TCP, TLS or UDP socket under a connection made from such parameters; nil for a
    /// QUIC stream. Set only while the connection is being made.
    @exclusivity(unchecked) var socketTransport: (any NWConnectionTransport)?

    // MARK: Loop-confined
    @exclusivity(unchecked) private(set) var streamID: Int64?
    @exclusivity(unchecked) private var started = false
    @exclusivity(unchecked) private var isCancelled = false
    @exclusivity(unchecked) private var pendingSends: [(Data?, Bool, SendCompletion, CompletionDelivery)] = []
    @exclusivity(unchecked) private var sendCompletions: [UInt64: (handler: @Sendable (NWError?) -> Void, delivery: CompletionDelivery)] = [:]
    @exclusivity(unchecked) private var nextToken: UInt64 = 1
    @exclusivity(unchecked) private var receives: [(minimum: Int, maximum: Int, completion: ReceiveCompletion, delivery: CompletionDelivery)] = []
    @exclusivity(unchecked) private var message = Data()
    @exclusivity(unchecked) private var failure: NWError?
    /// The contexts received data comes with, Apple's default and final message with the
    /// stream's QUIC metadata attached; made on first use.
    private lazy var receivedContext = ContentContext(identifier: "default", metadata: [metadataObject])
    private lazy var finalContext = ContentContext(identifier: "final", isFinal: true, metadata: [metadataObject])

    /// Opens a new outbound stream in `group`, as Network.framework does: nil until the group is
    /// `.ready` (with `allowFastOpen`, it opens before that too, even before `start`, and waits
    /// for 0-RTT keys or the handshake), and nil once it has ended. `options` may be QUIC options whose
    /// `direction` chooses a unidirectional stream. A tunnel has one peer, so `endpoint` must be
    /// nil or the tunnel's own.
    public convenience init?(from group: NWConnectionGroup, to endpoint: NWEndpoint? = nil, using options: NWProtocolOptions? = nil) {
        guard group.canOpenStreams else { return nil }
        if let endpoint, endpoint != group.remoteEndpoint { return nil }
        let quicOptions = options as? NWProtocolQUIC.Options
        self.init(outboundIn: group, direction: (quicOptions ?? group.options).direction)
    }

    /// A connection for a message received on a group: a new stream to the message's sender, that
    /// is, on its tunnel. Nil while the group cannot open streams.
    public convenience init?(message: NWConnectionGroup.Message) {
        guard let group = message.group else { return nil }
        self.init(from: group)
    }

    /// A new outbound stream of `group`; it gets its ID when started.
    init(outboundIn group: NWConnectionGroup, direction: NWProtocolQUIC.Options.Direction) {
        self.group = group
        self.metadataObject = NWProtocolQUIC.Metadata(
            tunnel: group.tunnelMetadata, streamType: direction == .unidirectional ? .unidirectional : .bidirectional
        )
        self.ownsGroup = false
    }

    /// Opens a QUIC tunnel to `host:port` that carries one stream.
    public convenience init(host: NWEndpoint.Host, port: NWEndpoint.Port, using parameters: NWParameters) {
        self.init(to: .hostPort(host: host, port: port), using: parameters)
    }

    /// Opens a QUIC tunnel to `endpoint` that carries one stream; with TCP, TLS-over-TCP or UDP
    /// parameters (`.tcp`, `.tls`, `.udp`), a connection over that socket instead.
    public init(to endpoint: NWEndpoint, using parameters: NWParameters) {
        let group = NWConnectionGroup(with: NWMultiplexGroup(to: endpoint), using: parameters)
        self.group = group
        self.metadataObject = NWProtocolQUIC.Metadata(
            tunnel: group.tunnelMetadata,
            streamType: parameters.quicOptions.direction == .unidirectional ? .unidirectional : .bidirectional
        )
        let socketStack = parameters.socketStack
        self.ownsGroup = socketStack == nil
        if let socketStack {
            socketTransport = NWSocketConnection(origin: .outbound(endpoint), stack: socketStack, observable: observable)
        }
    }

    /// A stream the peer opened.
    init(inbound streamID: Int64, group: NWConnectionGroup) {
        self.group = group
        self.metadataObject = NWProtocolQUIC.Metadata(
            tunnel: group.tunnelMetadata, streamType: streamID & 0x2 == 0 ? .bidirectional : .unidirectional
        )
        self.metadataObject.streamIdentifier = UInt64(streamID)
        self.ownsGroup = false
        self.streamID = streamID
    }

    // MARK: Public API

    /// The current state, matching Apple's `state`.
    public var state: State { observable.current }

    /// Called on the start queue with each new state, matching Apple's `stateUpdateHandler`. It is
    /// released once `.failed` or `.cancelled` has been delivered, and not kept if set after that.
    @preconcurrency public var stateUpdateHandler: (@Sendable (State) -> Void)? {
        get { observable.updateHandler }
        set { observable.updateHandler = newValue }
    }

    /// The tunnel this stream belongs to.
    public var connectionGroup: NWConnectionGroup { group }

    /// The path the stream's tunnel uses now, matching Apple's `currentPath`; nil until the
    /// tunnel's handshake completes.
    public var currentPath: NWPath? { group.currentPath }

    /// Called on the start queue with the tunnel's path once its handshake completes, and with
    /// each new one after a validated migration (RFC 9000 §9), matching Apple's
    /// `pathUpdateHandler`. Released when the connection ends.
    @preconcurrency public var pathUpdateHandler: (@Sendable (NWPath) -> Void)? {
        get { pathObservers.withLockedValue { $0.path } }
        set {
            pathObservers.withLockedValue { $0.path = $0.ended ? nil : newValue }
            watchPathIfNeeded()
        }
    }

    /// Called on the start queue with `true` once the tunnel has a path to send and receive on,
    /// and then each time that changes, matching Apple's `viabilityUpdateHandler`: `false` when
    /// the kernel reports the route to the server gone (ENETUNREACH, EHOSTUNREACH), `true` when
    /// the server is heard from again. A path that goes silent without such a report ends in the
    /// idle timeout and `.failed`. Released when the connection ends.
    @preconcurrency public var viabilityUpdateHandler: (@Sendable (Bool) -> Void)? {
        get { pathObservers.withLockedValue { $0.viability } }
        set {
            pathObservers.withLockedValue { $0.viability = $0.ended ? nil : newValue }
            watchPathIfNeeded()
        }
    }

    /// Matching Apple's `betterPathUpdateHandler`, kept so code that sets it compiles: Linux has
    /// no preference among interfaces, so there is never a better path and it is not called.
    @preconcurrency public var betterPathUpdateHandler: (@Sendable (Bool) -> Void)? {
        get { pathObservers.withLockedValue { $0.betterPath } }
        set { pathObservers.withLockedValue { $0.betterPath = $0.ended ? nil : newValue } }
    }

    /// Feeds the path and viability handlers from the tunnel's path updates while either is set.
    private func watchPathIfNeeded() {
        let wanted = pathObservers.withLockedValue { $0.watch == nil && !$0.ended && ($0.path != nil || $0.viability != nil) }
        guard wanted else { return }
        let updates = group.pathUpdates
        let watch = Task { [weak self] in
            var reportedViability: Bool?
            for await path in updates {
                guard let self else { return }
                let (pathHandler, viabilityHandler) = self.pathObservers.withLockedValue { ($0.path, $0.viability) }
                if let pathHandler { self.observable.callback { pathHandler(path) } }
                let isViable = path.status == .satisfied
                if reportedViability != isViable, let viabilityHandler {
                    reportedViability = isViable
                    self.observable.callback { viabilityHandler(isViable) }
                }
            }
        }
        let kept = pathObservers.withLockedValue { observers -> Bool in
            guard observers.watch == nil, !observers.ended else { return false }
            observers.watch = watch
            return true
        }
        if !kept { watch.cancel() }
    }

    /// The connection has ended: its path handlers go, as its state handler does.
    private func endPathObservers() {
        let watch = pathObservers.withLockedValue { observers -> Task<Void, Never>? in
            defer { observers = PathObservers(ended: true) }
            return observers.watch
        }
        watch?.cancel()
    }

    /// The remote endpoint of the stream's tunnel, matching Apple's `endpoint`.
    public var endpoint: NWEndpoint { group.descriptor.members[0] }

    /// The parameters of the tunnel this stream belongs to.
    public var parameters: NWParameters { group.parameters }

    /// The queue given to `start(queue:)`, where handlers and completions run.
    public var queue: DispatchQueue? { observable.startQueue }

    /// Starts the connection, matching Apple's `start(queue:)`; handlers and completions run on
    /// `queue`. A stream the peer opened is `.ready` at once; an outbound one is `.preparing` until
    /// it gets its stream ID. A connection made with `init(host:port:using:)` starts its tunnel
    /// too.
    public func start(queue: DispatchQueue) {
        observable.setQueue(queue)
        if let socketTransport { return socketTransport.start() }
        if ownsGroup {
            group.stateUpdateHandler = { [weak self] state in self?.tunnelStateChanged(state) }
            group.start(queue: queue)
        }
        group.eventLoop.execute {
            guard !self.started else { return }
            self.started = true
            if self.streamID != nil {
                self.setState(.ready)
                self.serviceReceives()
            } else {
                self.setState(.preparing)
                self.group.enqueueOpen(self)
            }
        }
    }

    /// Sends bytes on the stream. With `isComplete: true` in `.finalMessage`, `.defaultStream` or
    /// any context whose `isFinal` is set, it also sends FIN (RFC 9000 §19.8), as Apple's
    /// write-close does; completing any other context only ends that message.
    @preconcurrency public func send(
        content: Data?,
        contentContext: ContentContext = .defaultMessage,
        isComplete: Bool = true,
        completion: SendCompletion
    ) {
        send(content: content, contentContext: contentContext, isComplete: isComplete, completion: completion, delivery: .queue)
    }

    private func send(
        content: Data?,
        contentContext: ContentContext,
        isComplete: Bool,
        completion: SendCompletion,
        delivery: CompletionDelivery
    ) {
        if let socketTransport {
            return socketTransport.send(
                content: content, contentContext: contentContext, isComplete: isComplete, completion: completion, delivery: delivery, token: nil
            )
        }
        group.eventLoop.execute {
            if let error = self.failure ?? (self.isCancelled ? NWError.posix(.ECANCELED) : nil) {
                self.complete(completion, error, delivery)
                return
            }
            let fin = isComplete && contentContext.endsStream
            guard self.streamID != nil else {
                self.pendingSends.append((content, fin, completion, delivery))
                return
            }
            self.write(content, fin: fin, completion: completion, delivery: delivery)
        }
    }

    /// Delivers between `minimumIncompleteLength` and `maximumLength` bytes, or fewer with
    /// `isComplete` when the peer finished the stream.
    @preconcurrency public func receive(
        minimumIncompleteLength: Int,
        maximumLength: Int,
        completion: @escaping ReceiveCompletion
    ) {
        receive(minimum: minimumIncompleteLength, maximum: maximumLength, completion: completion, delivery: .queue)
    }

    /// Delivers everything up to the peer's FIN in one piece.
    @preconcurrency public func receiveMessage(completion: @escaping ReceiveCompletion) {
        receive(minimum: .max, maximum: .max, completion: completion, delivery: .queue)
    }

    /// `minimum` `.max` asks for the whole message (`receiveMessage`); either bound is at least 1.
    private func receive(minimum: Int, maximum: Int, completion: @escaping ReceiveCompletion, delivery: CompletionDelivery) {
        if let socketTransport {
            return socketTransport.receive(minimum: minimum, maximum: maximum, completion: completion, delivery: delivery, token: nil)
        }
        group.eventLoop.execute {
            self.receives.append((max(1, minimum), max(1, maximum), completion, delivery))
            self.serviceReceives()
        }
    }

    /// Ends the stream: with `applicationError` set in the metadata it resets it with that code;
    /// otherwise it finishes the sending side. A tunnel made with `init(host:port:using:)` closes too.
    public func cancel() {
        if let socketTransport { return socketTransport.cancel(force: false) }
        group.eventLoop.execute {
            guard !self.isCancelled else { return }
            self.isCancelled = true
            if let id = self.streamID, let driver = self.group.driver {
                let code = self.metadataObject.applicationErrorIfSet?.code
                let core = driver.core
                let canSend = core.canSend(on: id)
                let canReceive = core.canReceive(on: id)
                if let code {
                    if canSend { core.resetStream(streamID: id, code: code) }
                    if canReceive { core.stopSending(streamID: id, code: code) }
                } else {
                    if canSend { try? core.send(streamID: id, bytes: UnsafeRawBufferPointer(start: nil, count: 0), fin: true, token: nil) }
                    if canReceive, core.receiveStatus(streamID: id).map({ !$0.finReceived && $0.resetCode == nil }) == true {
                        core.stopSending(streamID: id, code: 0)
                    }
                }
                driver.runPass()
            }
            self.failPending(.posix(.ECANCELED))
            self.setState(.cancelled)
            if self.ownsGroup { self.group.cancel() }
        }
    }

    /// Ends the stream at once, as `cancel()` does; Network.framework's `forceCancel()` also skips
    /// a graceful close, which for a QUIC stream is the same thing. A TLS connection closes
    /// without close_notify.
    public func forceCancel() {
        if let socketTransport { return socketTransport.cancel(force: true) }
        cancel()
    }

    /// Abandons only the sending side with RESET_STREAM carrying `applicationError` (RFC 9000 §19.4);
    /// receiving continues. An extension beyond Network.framework, whose `cancel()` ends both sides.
    public func reset(applicationError: UInt64) {
        group.eventLoop.execute {
            guard let id = self.streamID, let driver = self.group.driver, driver.core.canSend(on: id) else { return }
            driver.core.resetStream(streamID: id, code: applicationError)
            driver.runPass()
        }
    }

    /// Asks the peer to stop sending with STOP_SENDING carrying `applicationError` (RFC 9000 §19.5);
    /// sending continues. An extension beyond Network.framework.
    public func stopSending(applicationError: UInt64) {
        group.eventLoop.execute {
            guard let id = self.streamID, let driver = self.group.driver, driver.core.canReceive(on: id) else { return }
            driver.core.stopSending(streamID: id, code: applicationError)
            driver.runPass()
        }
    }

    /// QUIC stream metadata: identifier, type and the settable application error.
    public func metadata(definition: NWProtocolDefinition) -> NWProtocolMetadata? {
        if let socketTransport { return socketTransport.metadata(definition: definition) }
        return definition == NWProtocolQUIC.definition ? metadataObject : nil
    }

    // MARK: Swift concurrency
    //
    // These resume their caller from the tunnel's loop, not through the queue given to
    // `start(queue:)`: the caller's task runs on its own executor either way.

    /// State changes from now on; ends at `.failed` or `.cancelled`.
    public var states: AsyncStream<State> { observable.stream }

    /// Waits for `.ready`; throws the error of `.failed`, or ECANCELED. Call it after
    /// `start(queue:)`: it begins from the current state. (An addition, as on the group.)
    public func waitUntilReady() async throws {
        for await state in states {
            switch state {
            case .ready: return
            case .failed(let error): throw error
            case .cancelled: throw NWError.posix(.ECANCELED)
            default: continue
            }
        }
        throw NWError.posix(.ECANCELED)
    }

    /// Sends and waits until the bytes are written into packets; `isComplete: true` sends FIN.
    /// (An addition: the handler form needs `.finalMessage` for that, as on Apple platforms.)
    public func send(content: Data?, isComplete: Bool = true) async throws {
        if let socketTransport { return try await socketSend(socketTransport, content: content, isComplete: isComplete) }
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            let context: ContentContext = isComplete ? .finalMessage : .defaultMessage
            send(content: content, contentContext: context, isComplete: isComplete, completion: .contentProcessed { error in
                if let error { continuation.resume(throwing: error) } else { continuation.resume() }
            }, delivery: .loop)
        }
    }

    /// Receives the next bytes; `isComplete` is true once the peer's FIN has been reached.
    public func receive(minimumIncompleteLength: Int = 1, maximumLength: Int = 65_536) async throws -> (content: Data?, isComplete: Bool) {
        if let socketTransport { return try await socketReceive(socketTransport, minimum: minimumIncompleteLength, maximum: maximumLength) }
        return try await withCheckedThrowingContinuation { continuation in
            receive(minimum: minimumIncompleteLength, maximum: maximumLength, completion: { data, _, isComplete, error in
                if let error { continuation.resume(throwing: error) } else { continuation.resume(returning: (data, isComplete)) }
            }, delivery: .loop)
        }
    }

    /// Receives the whole stream up to FIN.
    public func receiveMessage() async throws -> Data {
        if let socketTransport { return try await socketReceive(socketTransport, minimum: .max, maximum: .max).content ?? Data() }
        return try await withCheckedThrowingContinuation { continuation in
            receive(minimum: .max, maximum: .max, completion: { data, _, _, error in
                if let error { continuation.resume(throwing: error) } else { continuation.resume(returning: data ?? Data()) }
            }, delivery: .loop)
        }
    }

    // MARK: Loop-confined machinery

    /// How many receives wait for bytes; read on the group's loop (tests).
    var waitingReceiveCount: Int { receives.count }

    var streamIDForLogs: String { streamID.map(String.init) ?? "-" }

    private func deliver(_ delivery: CompletionDelivery, _ body: @escaping @Sendable () -> Void) {
        observable.deliver(delivery, body)
    }

    private func setState(_ new: State) {
        observable.update(new)
        switch new {
        case .failed, .cancelled: endPathObservers()
        default: break
        }
    }

    /// For a connection that owns its tunnel: the tunnel's failure is the connection's.
    private func tunnelStateChanged(_ state: NWConnectionGroup.State) {
        group.eventLoop.execute {
            switch state {
            case .failed(let error): self.groupFailed(error)
            case .waiting(let error): self.setState(.waiting(error))
            case .cancelled: if !self.isCancelled { self.groupFailed(.posix(.ECANCELED)) }
            default: break
            }
        }
    }

    /// The group gave this stream its ID.
    func didOpen(streamID: Int64) {
        self.streamID = streamID
        metadataObject.streamIdentifier = UInt64(streamID)
        if !isCancelled { setState(.ready) }
        let sends = pendingSends
        pendingSends.removeAll()
        for (content, fin, completion, delivery) in sends { write(content, fin: fin, completion: completion, delivery: delivery) }
        if isCancelled {
            isCancelled = false
            cancel()
        }
    }

    private func write(_ content: Data?, fin: Bool, completion: SendCompletion, delivery: CompletionDelivery) {
        guard let id = streamID, let driver = group.driver else {
            complete(completion, .posix(.ENOTCONN), delivery)
            return
        }
        var token: UInt64?
        if case .contentProcessed(let handler) = completion {
            token = nextToken
            sendCompletions[nextToken] = (handler, delivery)
            nextToken += 1
        }
        do {
            let bytes = content ?? Data()
            try bytes.withUnsafeBytes { try driver.core.send(streamID: id, bytes: $0, fin: fin, token: token) }
            driver.runPass()
        } catch {
            if let token { sendCompletions[token] = nil }
            complete(completion, .quic(.invalid("\(error)")), delivery)
        }
    }

    private func complete(_ completion: SendCompletion, _ error: NWError?, _ delivery: CompletionDelivery) {
        if case .contentProcessed(let handler) = completion { deliver(delivery) { handler(error) } }
    }

    func completeSend(token: UInt64, error: UInt64?) {
        guard let (handler, delivery) = sendCompletions.removeValue(forKey: token) else { return }
        let failure: NWError? = error.map { _ in .posix(.ECONNRESET) }
        deliver(delivery) { handler(failure) }
    }

    /// Hands received bytes to waiting `receive` calls, in order. Reading is what credits the
    /// peer's flow-control window, so a read made outside the driver's pass (a receive called
    /// after the bytes arrived) asks the driver to send the MAX_STREAM_DATA and MAX_DATA it made
    /// (RFC 9000 §4.2); without that a sender blocked on the window would wait forever.
    func serviceReceives() {
        guard started, let id = streamID else { return }
        var creditedBytes = false
        defer { if creditedBytes { group.driver?.runPass() } }
        while let request = receives.first {
            if let failure {
                receives.removeFirst()
                let completion = request.completion
                deliver(request.delivery) { completion(nil, nil, false, failure) }
                continue
            }
            guard let core = group.driver?.core, let status = core.receiveStatus(streamID: id) else {
                // The stream is finished and forgotten: only the end is left to report.
                receives.removeFirst()
                let completion = request.completion
                let data = message.isEmpty ? nil : message
                message = Data()
                let context = finalContext
                deliver(request.delivery) { completion(data, context, true, nil) }
                continue
            }
            if let code = status.resetCode {
                _ = core.read(streamID: id, maximumLength: 0)
                metadataObject.applicationError = .init(code: code)
                failure = .quic(.streamReset(code))
                continue
            }
            if request.minimum == Int.max {
                // receiveMessage: keep draining so flow control never stalls, finish at FIN.
                let read = core.read(streamID: id, maximumLength: .max)
                creditedBytes = creditedBytes || !read.bytes.isEmpty
                message.append(contentsOf: read.bytes)
                guard read.isFinished else { break }
                receives.removeFirst()
                let data = message
                message = Data()
                let completion = request.completion
                let context = finalContext
                deliver(request.delivery) { completion(data, context, true, nil) }
                continue
            }
            guard status.readableBytes >= request.minimum || status.finReceived else { break }
            let read = core.read(streamID: id, maximumLength: request.maximum)
            creditedBytes = creditedBytes || !read.bytes.isEmpty
            receives.removeFirst()
            let data = read.bytes.isEmpty ? nil : Data(read.bytes)
            let completion = request.completion
            let context = read.isFinished ? finalContext : receivedContext
            deliver(request.delivery) { completion(data, context, read.isFinished, nil) }
        }
    }

    /// ngtcp2 closed the stream in both directions.
    func transportClosed(code: UInt64?) {
        serviceReceives()
        if let id = streamID, group.driver?.core.receiveStatus(streamID: id) == nil, receives.isEmpty {
            group.forget(streamID: id)
        }
    }

    /// The tunnel failed or closed under this stream.
    func groupFailed(_ error: NWError) {
        failure = failure ?? error
        failPending(error)
        if !isCancelled { setState(.failed(error)) }
    }

    private func failPending(_ error: NWError) {
        let receivesToFail = receives
        receives.removeAll()
        for request in receivesToFail {
            let completion = request.completion
            deliver(request.delivery) { completion(nil, nil, false, error) }
        }
        let sends = sendCompletions.values
        sendCompletions.removeAll()
        for (handler, delivery) in sends { deliver(delivery) { handler(error) } }
        let queued = pendingSends
        pendingSends.removeAll()
        for (_, _, completion, delivery) in queued { complete(completion, error, delivery) }
    }
}

extension NWConnection {
    /// Network.framework's establishment report; here QUIC's figures for the stream's tunnel.
    public typealias EstablishmentReport = QUICEstablishmentReport
    /// Network.framework's data-transfer report; here QUIC's figures for the stream's tunnel.
    public typealias DataTransferReport = QUICDataTransferReport
    /// A data-transfer report in progress; a stream's report covers its whole tunnel.
    public typealias PendingDataTransferReport = NWConnectionGroup.PendingDataTransferReport

    /// How the stream's tunnel was established; nil before its handshake completes.
    @preconcurrency public func requestEstablishmentReport(queue: DispatchQueue, completion: @escaping @Sendable (EstablishmentReport?) -> Void) {
        group.requestEstablishmentReport(queue: queue, completion: completion)
    }

    /// Starts measuring what the stream's tunnel carries; `collect` on the result ends the interval.
    public func startDataTransferReport() -> PendingDataTransferReport {
        group.startDataTransferReport()
    }
}
