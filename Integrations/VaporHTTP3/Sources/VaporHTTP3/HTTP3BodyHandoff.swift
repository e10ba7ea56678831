import NIOConcurrencyHelpers
import NIOCore
import Vapor

/// Hands a streamed response body from the route that writes it to the HTTP/3 server that
/// sends it, one piece at a time: a write returns once the server has taken its piece, and the
/// server takes the next only while less than 4 MiB waits for acknowledgement. QUIC flow
/// control thus paces the route (backpressure), with at most one piece between the two.
final class HTTP3BodyHandoff: AsyncBodyStreamWriter, Sendable {
    private let state = NIOLockedValueBox(State())

    private struct State {
        /// The piece a writer waits to hand over.
        var offered: (bytes: [UInt8], taken: CheckedContinuation<Void, any Error>)?
        /// The server, waiting for a piece.
        var waiting: CheckedContinuation<[UInt8]?, any Error>?
        /// How the body ended: nil while open, then success (the end) or the failure.
        var ended: Result<Void, any Error>?
    }

    /// What the server pulls from. Once the server lets go of it (the request was reset, or
    /// its task cancelled) the writer's next write fails, so the route stops.
    var stream: AsyncThrowingStream<[UInt8], any Error> {
        let reader = Reader(handoff: self)
        return AsyncThrowingStream(unfolding: {
            try await withTaskCancellationHandler {
                try await reader.handoff.next()
            } onCancel: {
                reader.handoff.end(.failure(CancellationError()))
            }
        })
    }

    /// Held only by the stream: when the server drops the stream, it ends the body.
    private final class Reader: Sendable {
        let handoff: HTTP3BodyHandoff
        init(handoff: HTTP3BodyHandoff) { self.handoff = handoff }
        deinit { handoff.end(.failure(CancellationError())) }
    }

    func write(_ result: BodyStreamResult) async throws {
        switch result {
        case .buffer(let buffer):
            guard buffer.readableBytes > 0 else { return }
            try await offer(Array(buffer.readableBytesView))
        case .end:
            end(.success(()))
        case .error(let error):
            end(.failure(error))
        }
    }

    /// Ends the body, if the writer did not: a route that returns without `.end` ends it too.
    func end(_ result: Result<Void, any Error>) {
        let (waiting, offered) = state.withLockedValue { state -> (CheckedContinuation<[UInt8]?, any Error>?, CheckedContinuation<Void, any Error>?) in
            guard state.ended == nil else { return (nil, nil) }
            state.ended = result
            defer { state.waiting = nil; state.offered = nil }
            return (state.waiting, state.offered?.taken)
        }
        switch result {
        case .success: waiting?.resume(returning: nil)
        case .failure(let error): waiting?.resume(throwing: error)
        }
        offered?.resume(throwing: CancellationError())
    }

    private func offer(_ bytes: [UInt8]) async throws {
        try await withCheckedThrowingContinuation { (taken: CheckedContinuation<Void, any Error>) in
            let action = state.withLockedValue { state -> (CheckedContinuation<[UInt8]?, any Error>?, (any Error)?) in
                if let ended = state.ended {
                    if case .failure(let error) = ended { return (nil, error) }
                    return (nil, HTTP3BodyHandoffError.writeAfterEnd)
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

    private func next() async throws -> [UInt8]? {
        try await withCheckedThrowingContinuation { (waiting: CheckedContinuation<[UInt8]?, any Error>) in
            enum Action { case piece([UInt8], CheckedContinuation<Void, any Error>), ended(Result<Void, any Error>), wait }
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

/// A write to a streamed HTTP/3 body after it ended.
enum HTTP3BodyHandoffError: Error {
    case writeAfterEnd
}
