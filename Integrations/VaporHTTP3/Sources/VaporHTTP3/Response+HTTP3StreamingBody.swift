import NIOHTTP1
import Vapor

extension Response {
    /// A response whose body `stream` writes piece by piece, paced by the client on either
    /// protocol.
    ///
    /// Returning from `stream` ends the body and throwing fails it, as with Vapor's
    /// `Body(managedAsyncStream:)`, which is what it is over TCP. Over HTTP/3 each
    /// write returns once the server has taken the piece, which it does only while QUIC flow
    /// control has room (less than 4 MiB unacknowledged): a large download is never held
    /// whole. Vapor 4 keeps a plain `Body(asyncStream:)`'s writer to itself, so the HTTP/3
    /// bridge can only collect such a body before sending it; this initializer hands it the
    /// writer instead.
    public convenience init(
        status: HTTPResponseStatus = .ok,
        headers: HTTPHeaders = [:],
        streamingBody stream: @escaping @Sendable (any AsyncBodyStreamWriter) async throws -> Void
    ) {
        self.init(status: status, headers: headers, body: .init(managedAsyncStream: stream))
        self.storage[HTTP3StreamingBodyKey.self] = HTTP3StreamingBody(write: stream)
    }
}

/// The writer closure of a response made with `Response(streamingBody:)`.
struct HTTP3StreamingBody: Sendable {
    let write: @Sendable (any AsyncBodyStreamWriter) async throws -> Void
}

struct HTTP3StreamingBodyKey: StorageKey {
    typealias Value = HTTP3StreamingBody
}
