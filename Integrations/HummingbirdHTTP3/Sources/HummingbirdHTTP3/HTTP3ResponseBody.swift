import H3
import HTTPTypes
import Hummingbird
import NIOCore

/// Turns a Hummingbird `Response` into the `HTTP3ServerResponse` that `HTTP3Server` sends.
enum HTTP3ResponseBody {
    /// Bodies of a known length up to this size are collected and sent in one piece; longer or
    /// open-ended ones are written through an `HTTP3BodyWriter`, paced by QUIC flow control.
    /// Both send the trailers the body's writer gives at its end.
    static let collectedLimit = 256 << 10

    /// The HTTP/3 response for `response`. The request's `channel` is told once the body has
    /// been written out (or has failed), whichever way it is sent; it is passed rather than a
    /// closure, which would be one more allocation for every request.
    @inline(__always)  // into `HTTP3Service.respond`: one async return, and its executor switch, fewer
    static func make(_ response: Response, for channel: HTTP3RequestChannel) async throws -> HTTP3ServerResponse {
        var http3: HTTP3ServerResponse
        if let length = response.body.contentLength, length <= collectedLimit {
            defer { channel.requestEnded() }
            let collected = CollectingWriter.Storage(capacity: length)
            try await response.body.write(CollectingWriter(storage: collected))
            http3 = HTTP3ServerResponse(head: response.head, body: collected.bytes)
            http3.trailers = collected.trailers
        } else {
            let body = response.body
            http3 = HTTP3ServerResponse(head: response.head) { writer in
                defer { channel.requestEnded() }
                try await body.write(ForwardingWriter(writer: writer))
            }
        }
        // A handler changes its request's priority with the `priority` response field
        // (RFC 9218 §5), which also tells intermediaries; the server acts on it (§8).
        if let priority = response.headers[.priority] { http3.priority = HTTPPriority(fieldValue: priority) }
        return http3
    }

    /// Hummingbird's body writer over H3's: each buffer waits until the server takes it.
    private struct ForwardingWriter: ResponseBodyWriter {
        let writer: HTTP3BodyWriter

        mutating func write(_ buffer: ByteBuffer) async throws {
            try await writer.write(buffer.withUnsafeReadableBytes { Array($0) })
        }

        consuming func finish(_ trailingHeaders: HTTPFields?) async throws {
            writer.finish(trailers: trailingHeaders)
        }
    }

    /// Collects a short body, and its trailers, in memory.
    private struct CollectingWriter: ResponseBodyWriter {
        /// Written by one writer and read after it has finished, never at once: its properties
        /// skip Swift's run-time exclusivity check, which cost a call into the runtime and a
        /// lookup of the thread's access set at each write and read.
        final class Storage {
            @exclusivity(unchecked) var bytes: [UInt8] = []
            @exclusivity(unchecked) var trailers: HTTPFields?
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
