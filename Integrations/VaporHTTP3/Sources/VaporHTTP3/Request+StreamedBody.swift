import H3
import NIOCore
import Vapor

extension Request {
    /// The request body as it arrives, on either protocol: over HTTP/3 for a route marked
    /// ``Route/streamsHTTP3RequestBody()``, the QUIC stream's data, each chunk taken opening
    /// the client's flow control window; otherwise Vapor's `req.body` (streamed over TCP for a
    /// `body: .stream` route, one buffer when collected).
    public var streamedBody: StreamedRequestBody {
        if let body = http3?.streamedBody { return StreamedRequestBody(source: .http3(body)) }
        return StreamedRequestBody(source: .vapor(self.body))
    }
}

/// A request body as `ByteBuffer` chunks in order, from HTTP/3 or from Vapor.
public struct StreamedRequestBody: AsyncSequence, Sendable {
    public typealias Element = ByteBuffer

    enum Source: Sendable {
        case http3(HTTP3RequestBody)
        case vapor(Request.Body)
    }

    let source: Source

    public func makeAsyncIterator() -> AsyncIterator {
        switch source {
        case .http3(let body): AsyncIterator(base: .http3(body.makeAsyncIterator()))
        case .vapor(let body): AsyncIterator(base: .vapor(body.makeAsyncIterator()))
        }
    }

    /// Hands out the chunks of whichever body it reads.
    public struct AsyncIterator: AsyncIteratorProtocol {
        enum Base {
            case http3(HTTP3RequestBody.Iterator)
            case vapor(Request.Body.AsyncIterator)
        }

        var base: Base

        public mutating func next() async throws -> ByteBuffer? {
            switch base {
            case .http3(var iterator):
                let chunk = try await iterator.next()
                base = .http3(iterator)
                return chunk.map { ByteBuffer(bytes: $0) }
            case .vapor(var iterator):
                let chunk = try await iterator.next()
                base = .vapor(iterator)
                return chunk
            }
        }
    }
}
