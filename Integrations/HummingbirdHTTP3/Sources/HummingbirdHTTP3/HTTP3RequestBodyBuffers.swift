import H3
import NIOCore

/// An HTTP/3 request body as Hummingbird reads one: `ByteBuffer`s, pulled as the handler asks.
///
/// Each piece is taken from the QUIC stream only when the handler asks for it, and taking it is
/// what gives the client flow-control credit (RFC 9000 §4.1): a handler that reads slowly holds
/// the upload back, as it does on TCP.
struct HTTP3RequestBodyBuffers: AsyncSequence, Sendable {
    typealias Element = ByteBuffer
    let body: HTTP3RequestBody

    struct AsyncIterator: AsyncIteratorProtocol {
        var pieces: HTTP3RequestBody.Iterator

        mutating func next() async throws -> ByteBuffer? {
            guard let piece = try await pieces.next() else { return nil }
            return ByteBuffer(bytes: piece)
        }
    }

    func makeAsyncIterator() -> AsyncIterator { AsyncIterator(pieces: body.makeAsyncIterator()) }
}
