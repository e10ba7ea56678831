#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif
import NIOConcurrencyHelpers

/// A QUIC stream's own protocol (RFC 9000 §2): the bottom of every stream's stack in
/// Network.framework's 2025 API. Streams carrying it send and receive bytes.
public struct QUICStream: StreamProtocol {
    /// Whether both sides send on a stream (RFC 9000 §2.1).
    public enum Directionality: Sendable, Hashable {
        /// Both sides send.
        case bidirectional
        /// Only the side that opened the stream sends.
        case unidirectional
    }

    /// Which side opened a stream, from the low bit of its ID (RFC 9000 §2.1).
    public enum Initiator: Sendable, Hashable {
        /// The client opened it: an even stream ID.
        case client
        /// The server opened it: an odd stream ID.
        case server
    }

    /// What a receive returns beside the bytes.
    public struct Metadata: Sendable, Hashable {
        /// The peer finished its side (FIN, RFC 9000 §19.8): no bytes follow these.
        public var endOfStream: Bool

        /// Metadata with `endOfStream` as given.
        public init(endOfStream: Bool = false) { self.endOfStream = endOfStream }
    }

    /// The stream protocol; streams add it themselves, so stacks rarely spell it.
    public init() {}
}

extension QUIC {
    /// One QUIC stream of a `NetworkConnection<QUIC>`, as Network.framework's `QUIC.Stream`:
    /// a channel whose top protocol is `ApplicationProtocol` (`QUICStream` for bytes, `TLV` or
    /// `Coder` for typed messages).
    ///
    /// Flow control is backpressure (RFC 9000 §4): `send` returns once QUIC has taken the bytes
    /// into packets, so it waits while the peer's window is closed; bytes nobody receives are
    /// never credited back, so a stream nobody reads holds its sender back.
    ///
    /// A task cancelled while it waits in `send` or `receive` resets the stream with
    /// `streamApplicationErrorCode`, or `QUIC.Stream.cancelledErrorCode` when none is set, in
    /// both directions (RESET_STREAM and STOP_SENDING, RFC 9000 §19.4–§19.5), and throws
    /// `CancellationError`. A stream that is released while open finishes its sending side
    /// (FIN) and asks the peer to stop sending, with code 0.
    // @unchecked Sendable: `connection` is Sendable; `messageBuffer` is touched only by the one
    // message receive that `receiveTurn` lets through at a time, so messages come off the
    // stream whole and in order.
    public final class Stream<ApplicationProtocol: OneToOneProtocol>: NetworkChannel<ApplicationProtocol>, @unchecked Sendable {
        /// The classic stream underneath: both faces share the engine.
        let connection: NWConnection
        /// The tunnel the stream belongs to; the stream ends with it.
        public let parent: NetworkConnection<QUIC>
        /// The stack's top protocol.
        public let applicationProtocol: ApplicationProtocol
        /// Bytes received past the last whole message.
        private var messageBuffer = Data()
        private let receiveTurn = AsyncTurnstile()

        /// The stream ID (RFC 9000 §2.1).
        public let streamID: UInt64

        init(_ connection: NWConnection, parent: NetworkConnection<QUIC>, streamID: UInt64, applicationProtocol: ApplicationProtocol) {
            self.connection = connection
            self.parent = parent
            self.streamID = streamID
            self.applicationProtocol = applicationProtocol
            super.init(id: "\(parent.id)/stream/\(streamID)", parameters: parent.parameters)
        }

        deinit { connection.cancel() }

        /// Whether both sides send on the stream.
        public var directionality: QUICStream.Directionality { streamID & 0x2 == 0 ? .bidirectional : .unidirectional }

        /// Which side opened the stream.
        public var initiator: QUICStream.Initiator { streamID & 0x1 == 0 ? .client : .server }

        /// The application error code that ends this stream when it is reset or cancelled
        /// (RESET_STREAM and STOP_SENDING carry it); after the peer resets the stream, the
        /// peer's code. As Apple's, 0 until one is set or received; setting it, even to 0,
        /// makes `cancel()` reset the stream rather than finish it.
        public var streamApplicationErrorCode: UInt64 {
            get { quicMetadata.applicationErrorIfSet?.code ?? 0 }
            set { quicMetadata.applicationErrorIfSet = NWProtocolQUIC.ApplicationError(code: newValue) }
        }

        /// The code a stream is reset with when its task is cancelled and no
        /// `streamApplicationErrorCode` was set: 0x0, as the peer reads "no reason given".
        public static var cancelledErrorCode: UInt64 { 0 }

        private var quicMetadata: NWProtocolQUIC.Metadata { connection.metadataObject }

        /// Ends the stream now: with `streamApplicationErrorCode` set, resets both directions with
        /// it; otherwise finishes sending (FIN) and stops receiving (STOP_SENDING 0).
        public func cancel() { connection.cancel() }

        /// Resets the stream in both directions with `code`, which `streamApplicationErrorCode`
        /// then reports.
        public func reset(applicationErrorCode code: UInt64) {
            streamApplicationErrorCode = code
            connection.cancel()
        }

        // MARK: Bytes, for every protocol

        /// Sends raw bytes, finishing the stream with them when `endOfStream`; returns once QUIC
        /// has taken them into packets (flow control permitting).
        func sendBytes(_ content: Data, endOfStream: Bool) async throws {
            try await resettingOnCancel {
                try await self.connection.send(content: content, isComplete: endOfStream)
            }
        }

        /// Receives between `atLeast` and `atMost` bytes, or fewer at the peer's FIN.
        func receiveBytes(atLeast: Int, atMost: Int) async throws -> (Data, Bool) {
            try await resettingOnCancel {
                let (content, isComplete) = try await self.connection.receive(minimumIncompleteLength: atLeast, maximumLength: atMost)
                return (content ?? Data(), isComplete)
            }
        }

        /// Runs `body`; if the task is cancelled meanwhile, resets the stream and throws
        /// `CancellationError`.
        func resettingOnCancel<T: Sendable>(_ body: @Sendable () async throws -> T) async throws -> T {
            try Task.checkCancellation()
            return try await withTaskCancellationHandler {
                do {
                    return try await body()
                } catch {
                    if Task.isCancelled { throw CancellationError() }
                    throw error
                }
            } onCancel: {
                self.resetForCancellation()
            }
        }

        func resetForCancellation() {
            if quicMetadata.applicationErrorIfSet == nil { streamApplicationErrorCode = Self.cancelledErrorCode }
            connection.cancel()
        }

        // MARK: Messages

        /// Receives one whole message, reading as many bytes as it needs; nil at the peer's FIN
        /// between messages.
        func receiveMessage() async throws -> (content: ApplicationProtocol.ContentType, metadata: ApplicationProtocol.Metadata)?
        where ApplicationProtocol: MessageProtocol {
            await receiveTurn.enter()
            defer { receiveTurn.leave() }
            while true {
                if let message = try applicationProtocol.decode(&messageBuffer) { return message }
                let (bytes, finished) = try await receiveBytes(atLeast: 1, atMost: 1 << 20)
                messageBuffer.append(bytes)
                if finished {
                    if let message = try applicationProtocol.decode(&messageBuffer) { return message }
                    // The peer's FIN: between messages it ends them; inside one it cuts it short.
                    guard messageBuffer.isEmpty else { throw NWError.posix(.EBADMSG) }
                    return nil
                }
            }
        }
    }
}

extension QUIC.Stream where ApplicationProtocol == QUICStream {
    /// Sends bytes, as Apple's `send(_:endOfStream:)`; `endOfStream` also finishes this side
    /// (FIN). Returns once QUIC has taken the bytes into packets, so it waits while the peer's
    /// flow-control window is closed.
    public func send(_ content: some DataProtocol, endOfStream: Bool = false) async throws {
        try await sendBytes(Data(content), endOfStream: endOfStream)
    }

    /// Finishes this side of the stream (FIN) without more bytes. An addition.
    public func finish() async throws { try await sendBytes(Data(), endOfStream: true) }

    /// Receives between `atLeast` and `atMost` bytes; fewer, perhaps none, once the peer
    /// finished the stream, which `metadata.endOfStream` then says.
    public func receive(atLeast: Int = 1, atMost: Int) async throws -> (content: Data, metadata: QUICStream.Metadata) {
        let (content, finished) = try await receiveBytes(atLeast: atLeast, atMost: atMost)
        return (content, QUICStream.Metadata(endOfStream: finished))
    }

    /// Receives exactly `count` bytes; fewer only if the peer finishes the stream first.
    public func receive(exactly count: Int) async throws -> (content: Data, metadata: QUICStream.Metadata) {
        try await receive(atLeast: count, atMost: count)
    }
}

extension QUIC.Stream where ApplicationProtocol: MessageProtocol {
    /// Sends one message; it arrives whole. `lastMessage` finishes this side (FIN) after it.
    public func send(
        _ content: ApplicationProtocol.ContentType,
        metadata: ApplicationProtocol.Metadata,
        lastMessage: Bool = false
    ) async throws {
        let bytes = try applicationProtocol.encode(content, metadata: metadata)
        try await sendBytes(bytes, endOfStream: lastMessage)
    }

    /// Receives the next whole message. Throws `NWError.posix(.ENODATA)` once the peer has
    /// finished the stream, and `.EBADMSG` when it ends inside a message.
    public func receive() async throws -> (content: ApplicationProtocol.ContentType, metadata: ApplicationProtocol.Metadata) {
        guard let message = try await receiveMessage() else {
            throw NWError.posix(.ENODATA)
        }
        return message
    }

    /// The messages still to come, ending when the peer finishes the stream.
    public var messages: AsyncThrowingStream<(content: ApplicationProtocol.ContentType, metadata: ApplicationProtocol.Metadata), any Error> {
        AsyncThrowingStream { try await self.receiveMessage() }
    }

    /// Finishes this side of the stream (FIN) without another message. An addition.
    public func finish() async throws { try await sendBytes(Data(), endOfStream: true) }
}

/// Lets one task at a time through, in arrival order, without blocking a thread.
// @unchecked Sendable: `busy` and `waiters` are only touched under `lock`.
final class AsyncTurnstile: @unchecked Sendable {
    private let lock = NIOLock()
    private var busy = false
    private var waiters: [CheckedContinuation<Void, Never>] = []

    func enter() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let admitted = lock.withLock { () -> Bool in
                if busy {
                    waiters.append(continuation)
                    return false
                }
                busy = true
                return true
            }
            if admitted { continuation.resume() }
        }
    }

    func leave() {
        let next = lock.withLock { () -> CheckedContinuation<Void, Never>? in
            if waiters.isEmpty {
                busy = false
                return nil
            }
            return waiters.removeFirst()
        }
        next?.resume()
    }
}
