import HTTPTypes
import NIOConcurrencyHelpers

/// Writes a response body piece by piece from code that pushes, as web frameworks' body writers
/// do, while the server pulls: a `write` returns once the server has taken its piece, and the
/// server takes the next only while less than `HTTP3BodyPump.bufferLimit` (4 MiB) waits for the
/// client's acknowledgement. QUIC flow control thus paces the writer, with at most one piece
/// between the two. Made by ``HTTP3ServerResponse/init(head:writingBody:)``.
public final class HTTP3BodyWriter: Sendable {
    private let state = NIOLockedValueBox(State())

    private struct State {
        /// The piece a writer waits to hand over.
        var offered: (bytes: [UInt8], taken: CheckedContinuation<Void, any Error>)?
        /// The server, waiting for a piece.
        var waiting: CheckedContinuation<[UInt8]?, any Error>?
        /// How the body ended: nil while open, then success (the end) or the failure.
        var ended: Result<Void, any Error>?
        /// The trailers given with the end.
        var trailers: HTTPFields?
    }

    init() {}

    /// Hands `bytes` to the server and returns once it has taken them. Throws once the body has
    /// ended, or once the server let go of it (the client reset the stream): the writer stops.
    public func write(_ bytes: [UInt8]) async throws {
        guard !bytes.isEmpty else { return }
        try await withCheckedThrowingContinuation { (taken: CheckedContinuation<Void, any Error>) in
            let action = state.withLockedValue { state -> (CheckedContinuation<[UInt8]?, any Error>?, (any Error)?) in
                if let ended = state.ended {
                    if case .failure(let error) = ended { return (nil, error) }
                    return (nil, HTTP3BodyWriterError.writeAfterEnd)
                }
                if let waiting = state.waiting {
                    state.waiting = nil
                    return (waiting, nil)
                }
                state.offered = (bytes, taken)
                return (nil, nil)
            }
            switch action {
            case (let waiting?, _):
                waiting.resume(returning: bytes)
                taken.resume()
            case (nil, let error?):
                taken.resume(throwing: error)
            case (nil, nil):
                break
            }
        }
    }

    /// Ends the body; `trailers` follow it (RFC 9114 §4.1). Later calls do nothing.
    public func finish(trailers: HTTPFields? = nil) {
        end(.success(()), trailers: trailers)
    }

    /// Ends the body with `error`: the server resets the stream.
    public func fail(_ error: any Error) {
        end(.failure(error), trailers: nil)
    }

    private func end(_ result: Result<Void, any Error>, trailers: HTTPFields?) {
        let (waiting, offered) = state.withLockedValue { state -> (CheckedContinuation<[UInt8]?, any Error>?, CheckedContinuation<Void, any Error>?) in
            guard state.ended == nil else { return (nil, nil) }
            state.ended = result
            state.trailers = trailers
            defer { (state.waiting, state.offered) = (nil, nil) }
            return (state.waiting, state.offered?.taken)
        }
        switch result {
        case .success: waiting?.resume(returning: nil)
        case .failure(let error): waiting?.resume(throwing: error)
        }
        offered?.resume(throwing: CancellationError())
    }

    /// The trailers given with the end, read by the server once the stream has ended.
    var trailers: HTTPFields? { state.withLockedValue { $0.trailers } }

    /// What the server pulls from. Once the server lets go of it (the request was reset, or
    /// its task cancelled), the body ends as failed, so the writer's next write throws.
    var stream: AsyncThrowingStream<[UInt8], any Error> {
        let reader = Reader(writer: self)
        return AsyncThrowingStream(unfolding: {
            try await withTaskCancellationHandler {
                try await reader.writer.next()
            } onCancel: {
                reader.writer.fail(CancellationError())
            }
        })
    }

    /// Held only by the stream: when the server drops the stream, it ends the body.
    private final class Reader: Sendable {
        let writer: HTTP3BodyWriter
        init(writer: HTTP3BodyWriter) { self.writer = writer }
        deinit { writer.fail(CancellationError()) }
    }

    private func next() async throws -> [UInt8]? {
        try await withCheckedThrowingContinuation { (waiting: CheckedContinuation<[UInt8]?, any Error>) in
            enum Action {
                case piece([UInt8], CheckedContinuation<Void, any Error>)
                case ended(Result<Void, any Error>)
                case wait
            }
            let action = state.withLockedValue { state -> Action in
                if let offered = state.offered {
                    state.offered = nil
                    return .piece(offered.bytes, offered.taken)
                }
                if let ended = state.ended { return .ended(ended) }
                state.waiting = waiting
                return .wait
            }
            switch action {
            case .piece(let bytes, let taken):
                waiting.resume(returning: bytes)
                taken.resume()
            case .ended(.success):
                waiting.resume(returning: nil)
            case .ended(.failure(let error)):
                waiting.resume(throwing: error)
            case .wait:
                break
            }
        }
    }
}

/// A write to an ``HTTP3BodyWriter`` after its body ended.
public struct HTTP3BodyWriterError: Error, Hashable, CustomStringConvertible {
    private let code: Int

    /// `write` was called after `finish` or `fail`.
    public static let writeAfterEnd = HTTP3BodyWriterError(code: 1)

    /// What went wrong, in words.
    public var description: String { "a body piece was written after the body ended" }
}

extension HTTP3ServerResponse {
    /// A response whose body `write` writes, for code that pushes pieces (a framework's body
    /// writer). `write` runs in a task of its own, started with the response; each
    /// ``HTTP3BodyWriter/write(_:)`` returns once the server has taken the piece. Returning from
    /// `write` ends the body (unless it called ``HTTP3BodyWriter/finish(trailers:)`` with
    /// trailers first) and throwing fails it.
    public init(head: HTTPResponse, writingBody write: @escaping @Sendable (HTTP3BodyWriter) async throws -> Void) {
        self.init(head: head)
        let writer = HTTP3BodyWriter()
        bodyStream = writer.stream
        trailersAfterBodyStream = { writer.trailers }
        Task {
            do {
                try await write(writer)
                writer.finish()
            } catch {
                writer.fail(error)
            }
        }
    }
}
