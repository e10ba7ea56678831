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

/// An open file read by position (`pread`), closed when the last reference goes.
///
/// A small file is read whole when it is opened and served from memory: a response sends
/// straight from `contents`, with no read and no copy, for as long as the lookup is reused.
/// Like a file replaced by a rename, a change in place is then seen when the lookup expires.
// @unchecked Sendable: the descriptor is only read with pread, which is safe from any thread,
// `contents` is written once, in init, and `wholeFileFields` once, before the reader is shared.
final class HTTP3FileReader: @unchecked Sendable {
    let descriptor: Int32
    let size: Int
    /// The whole file, for one of at most `inMemoryLimit` bytes that read in full when opened.
    let contents: UnsafeRawBufferPointer?
    /// The whole file's response head as encoded for nghttp3 (`HTTP3ServedFile.wholeFile`),
    /// kept for as long as the reader: a response sending from the reader's memory holds the
    /// reader until its stream closes, so nghttp3 may read that head in place (`HTTP3Codec`).
    private(set) var wholeFileFields: HTTP3FieldArray?
    /// The largest file kept in memory: 16 KiB, so the 256 lookups kept at most
    /// (`HTTP3RootDirectory.recentLimit`) hold at most 4 MiB.
    static let inMemoryLimit = 16 << 10

    /// Takes ownership of `descriptor`, an open regular file of `size` bytes.
    init(descriptor: Int32, size: Int) {
        self.descriptor = descriptor
        self.size = size
        guard size > 0, size <= Self.inMemoryLimit else {
            contents = nil
            return
        }
        let whole = UnsafeMutableRawBufferPointer.allocate(byteCount: size, alignment: 1)
        if Self.read(descriptor, 0..<size, into: whole) {
            contents = UnsafeRawBufferPointer(whole)
        } else {
            whole.deallocate()
            contents = nil
        }
    }

    deinit {
        contents?.deallocate()
        close(descriptor)
    }

    /// Keeps the whole file's encoded head; called once, before the reader is shared.
    func keepWholeFileFields(_ fields: HTTP3FieldArray) {
        wholeFileFields = fields
    }

    func read(_ range: Range<Int>) throws -> [UInt8] {
        try [UInt8](unsafeUninitializedCapacity: range.count) { buffer, initialized in
            guard read(range, into: UnsafeMutableRawBufferPointer(buffer)) else { throw CocoaError(.fileReadUnknown) }
            initialized = range.count
        }
    }

    /// Reads `range` into the start of `destination`; false when the file ends early or fails.
    func read(_ range: Range<Int>, into destination: UnsafeMutableRawBufferPointer) -> Bool {
        if let contents {
            guard range.upperBound <= contents.count else { return false }
            destination.baseAddress!.copyMemory(from: contents.baseAddress! + range.lowerBound, byteCount: range.count)
            return true
        }
        return Self.read(descriptor, range, into: destination)
    }

    private static func read(_ descriptor: Int32, _ range: Range<Int>, into destination: UnsafeMutableRawBufferPointer) -> Bool {
        var done = 0
        while done < range.count {
            let n = pread(descriptor, destination.baseAddress! + done, range.count - done, off_t(range.lowerBound + done))
            guard n > 0 else { return false }
            done += n
        }
        return true
    }

    /// The range as a stream of chunks, each read when the consumer asks for it.
    func chunks(of range: Range<Int>, size chunkSize: Int) -> AsyncThrowingStream<[UInt8], any Error> {
        var offset = range.lowerBound
        return AsyncThrowingStream(unfolding: { [self] in
            guard offset < range.upperBound else { return nil }
            let end = min(offset + chunkSize, range.upperBound)
            let chunk = try self.read(offset..<end)
            offset = end
            return chunk
        })
    }
}
