import Dispatch
import Foundation
import NIOConcurrencyHelpers
import NIOCore

/// One QUIC stream as a Network.framework connection, or, made with `init(host:port:using:)`,
/// a tunnel that carries one stream.
///
/// `send` with `isComplete: true` ends the stream's sending side (FIN). `receive` delivers bytes
/// in order; reading is what opens the peer's flow-control window, so an unread stream holds
/// the sender back. Setting `applicationError` in the QUIC metadata before `cancel()` resets
/// the stream with that code (RESET_STREAM and STOP_SENDING, RFC 9000 §19.4–§19.5).
// @unchecked Sendable: state, handler and queue live in `observable` (locked); the fields marked
// "Loop-confined" are touched only on the group's event loop.
public final class NWConnection: @unchecked Sendable {
    public enum State: Equatable, Sendable {
        case setup
        case waiting(NWError)
        case preparing
        case ready
        case failed(NWError)
        case cancelled
    }

    /// Describes a message's place in the stream and carries its protocol metadata, as in
    /// Network.framework. A received message's context holds the stream's QUIC metadata.
    /// Expiration and priority are kept for source compatibility; QUIC streams do not use them.
    // @unchecked Sendable: immutable after init.
    public class ContentContext: @unchecked Sendable {
        public let identifier: String
        public let isFinal: Bool
        /// Milliseconds after which an unsent message may be dropped; 0 for never.
        public let expirationMilliseconds: UInt64
        /// The message's priority relative to others, from 0.0 to 1.0.
        public let relativePriority: Double
        /// A message that must be sent before this one.
        public let antecedent: ContentContext?
        /// The protocol metadata attached to the message.
        public let protocolMetadata: [NWProtocolMetadata]

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

        public static let defaultMessage = ContentContext(identifier: "default")
        public static let finalMessage = ContentContext(identifier: "final", isFinal: true)
        public static let defaultStream = ContentContext(identifier: "stream")
    }

    /// When a send completes.
    public enum SendCompletion: Sendable {
        /// Called once the bytes are written into QUIC packets (flow control permitting), or with an error.
        case contentProcessed(@Sendable (NWError?) -> Void)
        /// No completion.
        case idempotent
    }

    public typealias ReceiveCompletion = @Sendable (Data?, ContentContext?, Bool, NWError?) -> Void

    let group: NWConnectionGroup
    let metadataObject: NWProtocolQUIC.Metadata
    /// True for `init(host:port:using:)`: the connection owns its tunnel.
    let ownsGroup: Bool

    private let observable = ObservableState<State>(.setup) { state in
        switch state {
        case .failed, .cancelled: return true
        default: return false
        }
    }

    // MARK: Loop-confined
    private(set) var streamID: Int64?
    private var started = false
    private var isCancelled = false
    private var pendingSends: [(Data?, Bool, SendCompletion)] = []
    private var sendCompletions: [UInt64: @Sendable (NWError?) -> Void] = [:]
    private var nextToken: UInt64 = 1
    private var receives: [(minimum: Int, maximum: Int, completion: ReceiveCompletion)] = []
    private var message = Data()
    private var failure: NWError?
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

    /// Opens a QUIC tunnel to `endpoint` that carries one stream.
    public init(to endpoint: NWEndpoint, using parameters: NWParameters) {
        let group = NWConnectionGroup(with: NWMultiplexGroup(to: endpoint), using: parameters)
        self.group = group
        self.metadataObject = NWProtocolQUIC.Metadata(
            tunnel: group.tunnelMetadata,
            streamType: parameters.quicOptions.direction == .unidirectional ? .unidirectional : .bidirectional
        )
        self.ownsGroup = true
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

    public var state: State { observable.current }

    public var stateUpdateHandler: (@Sendable (State) -> Void)? {
        get { observable.updateHandler }
        set { observable.updateHandler = newValue }
    }

    /// The tunnel this stream belongs to.
    public var connectionGroup: NWConnectionGroup { group }

    public var endpoint: NWEndpoint { group.descriptor.members[0] }

    /// The parameters of the tunnel this stream belongs to.
    public var parameters: NWParameters { group.parameters }

    /// The queue given to `start(queue:)`, where handlers and completions run.
    public var queue: DispatchQueue? { observable.startQueue }

    public func start(queue: DispatchQueue) {
        observable.setQueue(queue)
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

    /// Sends bytes on the stream; `isComplete: true` also sends FIN.
    public func send(
        content: Data?,
        contentContext: ContentContext = .defaultMessage,
        isComplete: Bool = true,
        completion: SendCompletion
    ) {
        group.eventLoop.execute {
            if let error = self.failure ?? (self.isCancelled ? NWError.posix(.ECANCELED) : nil) {
                self.complete(completion, error)
                return
            }
            guard self.streamID != nil else {
                self.pendingSends.append((content, isComplete, completion))
                return
            }
            self.write(content, fin: isComplete, completion: completion)
        }
    }

    /// Delivers between `minimumIncompleteLength` and `maximumLength` bytes, or fewer with
    /// `isComplete` when the peer finished the stream.
    public func receive(
        minimumIncompleteLength: Int,
        maximumLength: Int,
        completion: @escaping ReceiveCompletion
    ) {
        group.eventLoop.execute {
            self.receives.append((max(1, minimumIncompleteLength), max(1, maximumLength), completion))
            self.serviceReceives()
        }
    }

    /// Delivers everything up to the peer's FIN in one piece.
    public func receiveMessage(completion: @escaping ReceiveCompletion) {
        group.eventLoop.execute {
            self.receives.append((Int.max, Int.max, completion))
            self.serviceReceives()
        }
    }

    /// Ends the stream: with `applicationError` set in the metadata it resets it with that code;
    /// otherwise it finishes the sending side. A tunnel made with `init(host:port:using:)` closes too.
    public func cancel() {
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
                driver.afterInput()
            }
            self.failPending(.posix(.ECANCELED))
            self.setState(.cancelled)
            if self.ownsGroup { self.group.cancel() }
        }
    }

    /// Ends the stream at once, as `cancel()` does; Network.framework's `forceCancel()` also skips
    /// a graceful close, which for a QUIC stream is the same thing.
    public func forceCancel() { cancel() }

    /// Abandons only the sending side with RESET_STREAM carrying `applicationError` (RFC 9000 §19.4);
    /// receiving continues. An extension beyond Network.framework, whose `cancel()` ends both sides.
    public func reset(applicationError: UInt64) {
        group.eventLoop.execute {
            guard let id = self.streamID, let driver = self.group.driver, driver.core.canSend(on: id) else { return }
            driver.core.resetStream(streamID: id, code: applicationError)
            driver.afterInput()
        }
    }

    /// Asks the peer to stop sending with STOP_SENDING carrying `applicationError` (RFC 9000 §19.5);
    /// sending continues. An extension beyond Network.framework.
    public func stopSending(applicationError: UInt64) {
        group.eventLoop.execute {
            guard let id = self.streamID, let driver = self.group.driver, driver.core.canReceive(on: id) else { return }
            driver.core.stopSending(streamID: id, code: applicationError)
            driver.afterInput()
        }
    }

    /// QUIC stream metadata: identifier, type and the settable application error.
    public func metadata(definition: NWProtocolDefinition) -> NWProtocolMetadata? {
        definition == NWProtocolQUIC.definition ? metadataObject : nil
    }

    // MARK: Swift concurrency

    /// State changes from now on; ends at `.failed` or `.cancelled`.
    public var states: AsyncStream<State> { observable.stream }

    /// Sends and waits until the bytes are written into packets.
    public func send(content: Data?, isComplete: Bool = true) async throws {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            send(content: content, isComplete: isComplete, completion: .contentProcessed { error in
                if let error { continuation.resume(throwing: error) } else { continuation.resume() }
            })
        }
    }

    /// Receives the next bytes; `isComplete` is true once the peer's FIN has been reached.
    public func receive(minimumIncompleteLength: Int = 1, maximumLength: Int = 65_536) async throws -> (content: Data?, isComplete: Bool) {
        try await withCheckedThrowingContinuation { continuation in
            receive(minimumIncompleteLength: minimumIncompleteLength, maximumLength: maximumLength) { data, _, isComplete, error in
                if let error { continuation.resume(throwing: error) } else { continuation.resume(returning: (data, isComplete)) }
            }
        }
    }

    /// Receives the whole stream up to FIN.
    public func receiveMessage() async throws -> Data {
        try await withCheckedThrowingContinuation { continuation in
            receiveMessage { data, _, _, error in
                if let error { continuation.resume(throwing: error) } else { continuation.resume(returning: data ?? Data()) }
            }
        }
    }

    // MARK: Loop-confined machinery

    var streamIDForLogs: String { streamID.map(String.init) ?? "-" }

    private func callback(_ body: @escaping @Sendable () -> Void) { observable.callback(body) }

    private func setState(_ new: State) { observable.update(new) }

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
        for (content, fin, completion) in sends { write(content, fin: fin, completion: completion) }
        if isCancelled {
            isCancelled = false
            cancel()
        }
    }

    private func write(_ content: Data?, fin: Bool, completion: SendCompletion) {
        guard let id = streamID, let driver = group.driver else {
            complete(completion, .posix(.ENOTCONN))
            return
        }
        var token: UInt64?
        if case .contentProcessed(let handler) = completion {
            token = nextToken
            sendCompletions[nextToken] = handler
            nextToken += 1
        }
        do {
            let bytes = content ?? Data()
            try bytes.withUnsafeBytes { try driver.core.send(streamID: id, bytes: $0, fin: fin, token: token) }
            driver.afterInput()
        } catch {
            if let token { sendCompletions[token] = nil }
            complete(completion, .quic(.invalid("\(error)")))
        }
    }

    private func complete(_ completion: SendCompletion, _ error: NWError?) {
        if case .contentProcessed(let handler) = completion { callback { handler(error) } }
    }

    func completeSend(token: UInt64, error: UInt64?) {
        guard let handler = sendCompletions.removeValue(forKey: token) else { return }
        let failure: NWError? = error.map { _ in .posix(.ECONNRESET) }
        callback { handler(failure) }
    }

    /// Hands received bytes to waiting `receive` calls, in order.
    func serviceReceives() {
        guard started, let id = streamID else { return }
        while let request = receives.first {
            if let failure {
                receives.removeFirst()
                let completion = request.completion
                callback { completion(nil, nil, false, failure) }
                continue
            }
            guard let core = group.driver?.core, let status = core.receiveStatus(streamID: id) else {
                // The stream is finished and forgotten: only the end is left to report.
                receives.removeFirst()
                let completion = request.completion
                let data = message.isEmpty ? nil : message
                message = Data()
                let context = finalContext
                callback { completion(data, context, true, nil) }
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
                message.append(contentsOf: read.bytes)
                guard read.isFinished else { break }
                receives.removeFirst()
                let data = message
                message = Data()
                let completion = request.completion
                let context = finalContext
                callback { completion(data, context, true, nil) }
                continue
            }
            guard status.readableBytes >= request.minimum || status.finReceived else { break }
            let read = core.read(streamID: id, maximumLength: request.maximum)
            receives.removeFirst()
            let data = read.bytes.isEmpty ? nil : Data(read.bytes)
            let completion = request.completion
            let context = read.isFinished ? finalContext : receivedContext
            callback { completion(data, context, read.isFinished, nil) }
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
            callback { completion(nil, nil, false, error) }
        }
        let sends = sendCompletions.values
        sendCompletions.removeAll()
        for handler in sends { callback { handler(error) } }
        let queued = pendingSends
        pendingSends.removeAll()
        for (_, _, completion) in queued { complete(completion, error) }
    }
}

extension NWConnection {
    public typealias EstablishmentReport = QUICEstablishmentReport
    public typealias DataTransferReport = QUICDataTransferReport
    public typealias PendingDataTransferReport = NWConnectionGroup.PendingDataTransferReport

    /// How the stream's tunnel was established; nil before its handshake completes.
    public func requestEstablishmentReport(queue: DispatchQueue, completion: @escaping @Sendable (EstablishmentReport?) -> Void) {
        group.requestEstablishmentReport(queue: queue, completion: completion)
    }

    /// Starts measuring what the stream's tunnel carries; `collect` on the result ends the interval.
    public func startDataTransferReport() -> PendingDataTransferReport {
        group.startDataTransferReport()
    }
}
