import AsyncAlgorithms
import H3
import HTTPTypes
import Hummingbird
import NIOConcurrencyHelpers
import NIOCore

/// Turns a Hummingbird `Response` into the `HTTP3ServerResponse` that `HTTP3Server` sends.
enum HTTP3ResponseBody {
    /// Bodies of a known length up to this size are collected and sent in one piece; longer or
    /// open-ended ones stream. Both send the trailers the body's writer gives at its end.
    static let collectedLimit = 256 << 10

    /// The HTTP/3 response for `response`. `ended` runs once the body has been written out
    /// (or has failed), whichever way it is sent.
    static func make(_ response: Response, ended: @escaping @Sendable () -> Void) async throws -> HTTP3ServerResponse {
        var http3 = HTTP3ServerResponse(head: response.head)
        // A handler changes its request's priority with the `priority` response field
        // (RFC 9218 §5), which also tells intermediaries; the server acts on it (§8).
        if let priority = response.headers[.priority] { http3.priority = HTTPPriority(fieldValue: priority) }
        if let length = response.body.contentLength, length <= collectedLimit {
            defer { ended() }
            let collected = CollectingWriter.Storage(capacity: length)
            try await response.body.write(CollectingWriter(storage: collected))
            http3.body = collected.bytes
            http3.trailers = collected.trailers
            return http3
        }
        let trailers = NIOLockedValueBox<HTTPFields?>(nil)
        http3.bodyStream = stream(response.body, trailers: trailers, ended: ended)
        http3.trailersAfterBodyStream = { trailers.withLockedValue { $0 } }
        return http3
    }

    /// A stream the server pulls from, fed by a task that runs the response's body writer.
    /// The writer waits until the server takes each piece, and the server takes one only while
    /// less than its send buffer waits for acknowledgement: QUIC flow control reaches back to
    /// the handler. If the server stops pulling (the client reset the stream), the writer task
    /// is cancelled.
    static func stream(
        _ body: ResponseBody,
        trailers: NIOLockedValueBox<HTTPFields?>,
        ended: @escaping @Sendable () -> Void
    ) -> AsyncThrowingStream<[UInt8], any Error> {
        let pieces = AsyncThrowingChannel<ByteBuffer, any Error>()
        let writing = Task {
            defer { ended() }
            do {
                try await body.write(HandingOverWriter(pieces: pieces, trailers: trailers))
            } catch {
                pieces.fail(error)
            }
        }
        let puller = Puller(iterator: pieces.makeAsyncIterator(), writing: writing)
        return AsyncThrowingStream(unfolding: { try await puller.next() })
    }

    /// Pulls the writer's pieces for the server; cancels the writer when the server lets go.
    // @unchecked Sendable: `iterator` is used only by the server's pump, one `next()` at a time.
    private final class Puller: @unchecked Sendable {
        private var iterator: AsyncThrowingChannel<ByteBuffer, any Error>.AsyncIterator
        private let writing: Task<Void, Never>

        init(iterator: AsyncThrowingChannel<ByteBuffer, any Error>.AsyncIterator, writing: Task<Void, Never>) {
            self.iterator = iterator
            self.writing = writing
        }

        func next() async throws -> [UInt8]? {
            guard let buffer = try await iterator.next() else { return nil }
            return buffer.withUnsafeReadableBytes { Array($0) }
        }

        deinit { writing.cancel() }
    }

    /// Hands each piece to the server's puller, waiting until it is taken; keeps the trailers
    /// for the server, which reads them once the pieces have ended.
    private struct HandingOverWriter: ResponseBodyWriter {
        let pieces: AsyncThrowingChannel<ByteBuffer, any Error>
        let trailers: NIOLockedValueBox<HTTPFields?>

        mutating func write(_ buffer: ByteBuffer) async throws {
            await pieces.send(buffer)
            try Task.checkCancellation()
        }

        consuming func finish(_ trailingHeaders: HTTPFields?) async throws {
            trailers.withLockedValue { $0 = trailingHeaders }
            pieces.finish()
        }
    }

    /// Collects a short body, and its trailers, in memory.
    private struct CollectingWriter: ResponseBodyWriter {
        final class Storage {
            var bytes: [UInt8] = []
            var trailers: HTTPFields?
            init(capacity: Int) { bytes.reserveCapacity(capacity) }
        }

        let storage: Storage

        mutating func write(_ buffer: ByteBuffer) async throws {
            // One copy of the bytes: appending the buffer's view went a byte at a time.
            buffer.withUnsafeReadableBytes { storage.bytes.append(contentsOf: $0) }
        }

        consuming func finish(_ trailingHeaders: HTTPFields?) async throws {
            storage.trailers = trailingHeaders
        }
    }
}
