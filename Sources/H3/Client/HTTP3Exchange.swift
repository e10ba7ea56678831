#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import CQuicShims
import HTTPTypes
import Logging
import NIOConcurrencyHelpers
import NIOCore
import QuicTransport
import Synchronization

/// One request's response, filled in on the connection's loop and read by the caller.
///
/// The body is handed over here rather than through an `AsyncThrowingStream`: the stream's
/// generic storage, instantiated at run time for every request, looked up its type metadata
/// on every operation, a large part of a small request's cost on the client.
final class HTTP3Exchange: Sendable {
    /// How the body ended, as the reader sees it.
    private enum BodyEnd {
        /// The peer's FIN (RFC 9114 §4.1): the reader gets nil after the last chunk.
        case finished
        /// A stream or connection error, thrown once after the chunks that came before it.
        case failed(HTTP3ClientError)
        /// The reading task was cancelled; the request is reset with H3_REQUEST_CANCELLED.
        case cancelled
        /// The failure has been thrown; the reader gets nil from now on.
        case reported
    }

    private struct State {
        /// Where bytes the caller took earn back flow-control credit; set with `streamID`.
        var flowCredit: HTTP3FlowCredit?
        var head: Result<HTTP3ResponseHeadSource, HTTP3ClientError>?
        var headWaiter: UnsafeContinuation<HTTP3ResponseHeadSource, any Error>?
        var trailers: HTTPFields?
        var finished = false
        var streamID: Int64?
        /// The connection the request went to; set on the loop before any other use of it there.
        var connection: HTTP3ClientConnection?
        /// Whether the client opened `connection` for this exchange (curl's `num_connects`).
        var openedConnection = false
        /// Chunks not yet taken, from `nextChunk` on.
        var chunks: [[UInt8]] = []
        var nextChunk = 0
        var bodyEnd: BodyEnd?
        var bodyWaiter: UnsafeContinuation<[UInt8]?, any Error>?

        /// The next chunk, or how the body ended; nil when the reader must wait.
        mutating func takeReady() -> Result<[UInt8]?, any Error>? {
            if nextChunk < chunks.count {
                let chunk = chunks[nextChunk]
                nextChunk += 1
                if nextChunk == chunks.count {
                    chunks.removeAll()
                    nextChunk = 0
                }
                return .success(chunk)
            }
            switch bodyEnd {
            case nil: return nil
            case .finished, .reported: return .success(nil)
            case .cancelled: return finished ? .success(nil) : .failure(CancellationError())
            case .failed(let error):
                bodyEnd = .reported
                return .failure(error)
            }
        }

        /// Ends the body unless it has ended already.
        mutating func endBody(_ end: BodyEnd) {
            if bodyEnd == nil { bodyEnd = end }
        }
    }

    private let state = Mutex(State())
    private let eventLoop: any EventLoop

    init(eventLoop: any EventLoop) {
        self.eventLoop = eventLoop
    }

    var isFinished: Bool { state.withLock { $0.finished } }

    var streamID: Int64? {
        get { state.withLock { $0.streamID } }
        set { state.withLock { $0.streamID = newValue } }
    }

    var connection: HTTP3ClientConnection? {
        get { state.withLock { $0.connection } }
        set { state.withLock { $0.connection = newValue } }
    }

    /// Records the connection the request goes on, and whether it was opened for it.
    func use(_ connection: HTTP3ClientConnection, opened: Bool) {
        state.withLock { state in
            state.connection = connection
            state.openedConnection = opened
        }
    }

    /// A snapshot of the connection for the response. Read after the head arrived, which is
    /// after the handshake wrote what it reports (see `HTTP3ClientConnection.info`).
    var connectionInfo: HTTP3ConnectionInfo {
        let (connection, opened) = state.withLock { ($0.connection, $0.openedConnection) }
        guard let connection else { return HTTP3ConnectionInfo(alpn: nil, qlogPath: nil) }
        return HTTP3ConnectionInfo(
            alpn: connection.negotiatedALPN, qlogPath: connection.qlogPath, establishment: connection.establishment,
            openedForRequest: opened
        )
    }

    var trailers: HTTPFields? { state.withLock { $0.trailers } }

    /// Set by the connection with the stream: the request is on `streamID`, and bytes the
    /// caller takes earn back flow-control credit through `flowCredit`.
    func sent(on streamID: Int64, flowCredit: HTTP3FlowCredit) {
        state.withLock { state in
            state.streamID = streamID
            state.flowCredit = flowCredit
        }
    }

    /// Credits flow control for bytes the caller took.
    func consumed(_ count: Int) {
        let (flowCredit, streamID) = state.withLock { ($0.flowCredit, $0.streamID) }
        if let flowCredit, let streamID { flowCredit.credit(streamID: streamID, bytes: count) }
    }

    /// Resets the request with H3_REQUEST_CANCELLED (RFC 9114 §4.1.1), on the loop.
    func cancelOnLoop() {
        eventLoop.execute { self.connection?.cancel(self) }
    }

    func updatePriority(_ priority: HTTPPriority) async throws {
        try await eventLoop.submit { try self.connection?.updatePriority(self, to: priority) }.get()
    }

    func statistics() async -> HTTP3ConnectionStatistics? {
        (try? await eventLoop.submit { self.connection?.statistics }.get()) ?? nil
    }

    nonisolated(nonsending) func head() async throws -> HTTP3ResponseHeadSource {
        try await withUnsafeThrowingContinuation { continuation in
            let ready: Result<HTTP3ResponseHeadSource, HTTP3ClientError>? = state.withLock { state in
                if let head = state.head { return head }
                state.headWaiter = continuation
                return nil
            }
            if let ready { continuation.resume(with: ready.mapError { $0 as any Error }) }
        }
    }

    /// The next body chunk; nil after the last. Throws the stream's error once, or
    /// `CancellationError` when the task was cancelled before the body ended, which also resets
    /// the request.
    nonisolated(nonsending) func nextChunk() async throws -> [UInt8]? {
        if !Task.isCancelled, let ready = state.withLock({ $0.takeReady() }) {
            return try ready.get()
        }
        return try await withTaskCancellationHandler {
            try await withUnsafeThrowingContinuation { (continuation: UnsafeContinuation<[UInt8]?, any Error>) in
                let ready: Result<[UInt8]?, any Error>? = state.withLock { state in
                    if let ready = state.takeReady() { return ready }
                    state.bodyWaiter = continuation
                    return nil
                }
                if let ready { continuation.resume(with: ready) }
            }
        } onCancel: {
            cancelBody()
        }
    }

    /// The reading task was cancelled: wake the reader, and reset the request unless its body
    /// had already ended.
    private func cancelBody() {
        var ended = false
        changeBody { state in
            ended = state.bodyEnd != nil
            state.endBody(.cancelled)
        }
        if !ended { cancelOnLoop() }
    }

    /// Applies a change to the body's state, then hands a waiting reader what is ready for it.
    private func changeBody(_ change: (inout State) -> Void) {
        let wake = state.withLock { state -> (UnsafeContinuation<[UInt8]?, any Error>, Result<[UInt8]?, any Error>)? in
            change(&state)
            guard let waiter = state.bodyWaiter, let ready = state.takeReady() else { return nil }
            state.bodyWaiter = nil
            return (waiter, ready)
        }
        if let (waiter, ready) = wake { waiter.resume(with: ready) }
    }

    func receive(fields: HTTP3ReceivedFields, isTrailers: Bool) {
        if isTrailers {
            state.withLock { $0.trailers = HTTPFields(fields) }
            return
        }
        guard let status = fields.firstPseudoHeader(NGHTTP3_QPACK_TOKEN__STATUS), let code = Int(fields.value(of: status)) else {
            fail(.protocolError("response without a valid :status"))
            return
        }
        if (100..<200).contains(code) { return }  // Interim responses (RFC 9114 §4.1) carry no body.
        resolveHead(.success(HTTP3ResponseHeadSource(status: .init(code: code), fields: fields)))
    }

    func receive(body: [UInt8]) {
        changeBody { state in
            if state.bodyEnd == nil { state.chunks.append(body) }
        }
    }

    func finish() {
        changeBody { state in
            state.finished = true
            state.endBody(.finished)
        }
        resolveHead(.failure(.protocolError("the response ended without a head")))
    }

    func fail(_ error: HTTP3ClientError) {
        resolveHead(.failure(error))
        changeBody { $0.endBody(.failed(error)) }
    }

    private func resolveHead(_ result: Result<HTTP3ResponseHeadSource, HTTP3ClientError>) {
        let waiter: UnsafeContinuation<HTTP3ResponseHeadSource, any Error>? = state.withLock { state in
            guard state.head == nil else { return nil }
            state.head = result
            defer { state.headWaiter = nil }
            return state.headWaiter
        }
        waiter?.resume(with: result.mapError { $0 as any Error })
    }
}
