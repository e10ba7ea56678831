#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import HTTPTypes
import Logging
import NIOConcurrencyHelpers
import NIOCore
import QuicTransport

/// A request body as byte chunks, in order, ending at the client's FIN (RFC 9114 §4.1).
public struct HTTP3RequestBody: AsyncSequence, Sendable {
    public typealias Element = [UInt8]

    /// Nil for a request that ended with its head (a GET, say): nothing to stream, nothing to
    /// allocate for it, and nothing to count when the request is copied.
    private let storage: Storage?

    /// A streamed body's parts, behind one reference.
    private final class Storage: Sendable {
        let stream: AsyncThrowingStream<[UInt8], any Error>
        let trailers: NIOLockedValueBox<HTTPFields?>
        let consumed: @Sendable (Int) -> Void

        init(stream: AsyncThrowingStream<[UInt8], any Error>, trailers: NIOLockedValueBox<HTTPFields?>, consumed: @escaping @Sendable (Int) -> Void) {
            self.stream = stream
            self.trailers = trailers
            self.consumed = consumed
        }
    }

    init(stream: AsyncThrowingStream<[UInt8], any Error>, trailers: NIOLockedValueBox<HTTPFields?>, consumed: @escaping @Sendable (Int) -> Void) {
        storage = Storage(stream: stream, trailers: trailers, consumed: consumed)
    }

    init(complete bytes: [UInt8], trailers: HTTPFields?) {
        guard !bytes.isEmpty || trailers != nil else {
            self = .empty
            return
        }
        let (stream, continuation) = AsyncThrowingStream.makeStream(of: [UInt8].self)
        if !bytes.isEmpty { continuation.yield(bytes) }
        continuation.finish()
        self.init(stream: stream, trailers: NIOLockedValueBox(trailers), consumed: { _ in })
    }

    private init() {
        storage = nil
    }

    /// No body and no trailers.
    static let empty = HTTP3RequestBody()

    /// Whether the request ended with its head (RFC 9114 §4.1: its HEADERS frame came with the
    /// stream's end), so that there is no body and no trailers to wait for.
    public var endedWithHead: Bool { storage == nil }

    public func makeAsyncIterator() -> Iterator {
        guard let storage else { return Iterator(base: nil, consumed: { _ in }) }
        return Iterator(base: storage.stream.makeAsyncIterator(), consumed: storage.consumed)
    }

    /// Hands out the body's chunks in order, crediting QUIC flow control for each one taken.
    public struct Iterator: AsyncIteratorProtocol {
        var base: AsyncThrowingStream<[UInt8], any Error>.Iterator?
        let consumed: @Sendable (Int) -> Void

        public mutating func next() async throws -> [UInt8]? {
            guard let chunk = try await base?.next() else { return nil }
            consumed(chunk.count)
            return chunk
        }
    }

    /// The whole body.
    public func collect() async throws -> [UInt8] {
        var all: [UInt8] = []
        for try await chunk in self { all += chunk }
        return all
    }

    /// Trailer fields the client sent after the body; known once the body has ended.
    public var trailers: HTTPFields? { storage?.trailers.withLockedValue { $0 } }
}
