#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif
import CQuicShims
import HTTPTypes
import NIOConcurrencyHelpers
import NIOCore
import QuicTransport

/// A byte range of an open file, sent as a response body without passing through the handler:
/// HTTP/3 reads it chunk by chunk as the client acknowledges, HTTP/1.1 and HTTP/2 stream it.
package struct HTTP3FileRegion: Sendable {
    let reader: HTTP3FileReader
    let range: Range<Int>

    /// The whole region (tests and small consumers; servers read it piece by piece).
    package func readAll() throws -> [UInt8] { try reader.read(range) }

    /// The region's bytes where they lie, when the reader holds its file in memory (valid for
    /// as long as the reader lives); nil when they must be read.
    var inMemoryBytes: UnsafeRawBufferPointer? {
        guard let contents = reader.contents, range.upperBound <= contents.count else { return nil }
        return UnsafeRawBufferPointer(rebasing: contents[range])
    }

    /// The region as chunks read on demand.
    func chunks(size: Int = 256 << 10) -> AsyncThrowingStream<[UInt8], any Error> { reader.chunks(of: range, size: size) }
}
