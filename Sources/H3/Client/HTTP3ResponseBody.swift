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

/// The response body as byte chunks, in order; ends at the peer's FIN (RFC 9114 §4.1).
public struct HTTP3ResponseBody: AsyncSequence, Sendable {
    public typealias Element = [UInt8]
    let exchange: HTTP3Exchange

    public func makeAsyncIterator() -> Iterator {
        Iterator(exchange: exchange)
    }

    /// Hands out chunks in order, and tells the connection each time one has been taken, which
    /// is when QUIC flow control lets the server send more (the response's backpressure).
    public struct Iterator: AsyncIteratorProtocol {
        let exchange: HTTP3Exchange

        nonisolated(nonsending) public mutating func next() async throws -> [UInt8]? {
            guard let chunk = try await exchange.nextChunk() else { return nil }
            exchange.consumed(chunk.count)
            return chunk
        }
    }

    /// The whole body.
    public func collect() async throws -> [UInt8] {
        var all: [UInt8] = []
        for try await chunk in self { all += chunk }
        return all
    }

    /// Trailer fields, once the body has ended (RFC 9114 §4.1).
    public var trailers: HTTPFields? { exchange.trailers }
}
