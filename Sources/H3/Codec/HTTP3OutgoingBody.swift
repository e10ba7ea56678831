import CQuicShims
import NIOCore
@_spi(StreamTable) import QuicTransport

/// A request or response body nghttp3 sends from: a queue of chunks, each kept until the peer
/// acknowledges it (nghttp3, like ngtcp2, sends straight from the application's memory). A
/// streaming body grows with `append` and ends with `finish`. A file body reads its region
/// into chunks of its own as nghttp3 asks for data, at most `windowLimit` ahead of the
/// peer's acknowledgements: the bytes go from the page cache into the memory ngtcp2 encrypts
/// from, with no copy in between. Owned by its codec and confined like it (exclusivity unchecked).
final class HTTP3OutgoingBody {
    /// Bytes a file body reads ahead of the peer's acknowledgements.
    static let windowLimit = HTTP3BodyPump.bufferLimit
    /// Bytes read from the file per chunk.
    static let fileChunkSize = 64 << 10

    /// The body's bytes in order, one chunk each, let go as the peer acknowledges them.
    @exclusivity(unchecked) private var chunks = ChunkQueue()
    /// Bytes queued for sending: memory this body allocated and frees, a buffer of
    /// `fileChunkSize` bytes a file was read into (used again for the next read), a small
    /// file's contents, which its reader keeps (held in `keptReader` until the body is done),
    /// or a `ByteBuffer`'s bytes (its storage held in `keptStorage`).
    private struct Chunk {
        enum Memory { case owned, fileBuffer, borrowed }
        let bytes: UnsafeRawBufferPointer
        let memory: Memory

        func release() { if memory != .borrowed { bytes.deallocate() } }
    }

    /// Chunks in order. Most bodies are one chunk (a small file, a complete body), and that one
    /// is held inline: only a body of several chunks allocates an array.
    private struct ChunkQueue {
        /// Nil only while `rest` is empty too.
        private var front: Chunk?
        private var rest: [Chunk] = []

        var count: Int { front == nil ? 0 : 1 + rest.count }
        var first: Chunk? { front }

        subscript(index: Int) -> Chunk { index == 0 ? front! : rest[index - 1] }

        mutating func append(_ chunk: Chunk) {
            if front == nil { front = chunk } else { rest.append(chunk) }
        }

        mutating func removeFirst() {
            front = rest.isEmpty ? nil : rest.removeFirst()
        }

        func releaseAll() {
            front?.release()
            for chunk in rest { chunk.release() }
        }
    }
    /// The reader whose in-memory contents chunks point into.
    @exclusivity(unchecked) private var keptReader: HTTP3FileReader?
    /// The storage of the `ByteBuffer` whose bytes are sent from where they are, retained
    /// and released when the body is done.
    @exclusivity(unchecked) private var keptStorage: Unmanaged<AnyObject>?
    /// Chunks already handed to nghttp3 (from the front of `chunks`).
    @exclusivity(unchecked) private var provided = 0
    /// Bytes of the front chunk already acknowledged.
    @exclusivity(unchecked) private var acknowledgedInFront: UInt64 = 0
    @exclusivity(unchecked) private(set) var isFinished = false
    /// Bytes queued and not yet acknowledged: what a producer's backpressure looks at.
    @exclusivity(unchecked) private(set) var unacknowledgedBytes = 0
    /// Trailer fields to send after the body (RFC 9114 §4.1); nghttp3 then ends the stream.
    @exclusivity(unchecked) var trailers: [(name: String, value: String)]?
    /// What is left to read of a file body; nil once it is all read.
    @exclusivity(unchecked) private var file: HTTP3FileRegion?
    /// The file stopped at its window, and nghttp3 waits for a resume.
    @exclusivity(unchecked) private var waitsForAcknowledgement = false
    /// The file could not be read to the end of its region.
    @exclusivity(unchecked) private(set) var readFailed = false
    /// File buffers whose bytes the peer has acknowledged, read into again before any new one
    /// is allocated. Fresh buffers cost page faults (glibc gives a thread arena's freed top back
    /// to the kernel) and a copy into memory that is not in the cache; these are at most the
    /// window's worth, since only acknowledged bytes free one.
    @exclusivity(unchecked) private var spareFileBuffers: [UnsafeMutableRawPointer] = []

    init(
        copying source: [UInt8]?, then buffer: ByteBuffer? = nil, file: HTTP3FileRegion?, finished: Bool,
        trailers: [(name: String, value: String)]?
    ) {
        if let source { append(source) }
        if let buffer { sendInPlace(buffer) }
        self.file = file.flatMap { $0.range.isEmpty ? nil : $0 }
        isFinished = finished
        self.trailers = trailers
    }

    func append(_ source: [UInt8]) {
        guard !source.isEmpty else { return }
        let bytes = UnsafeMutableRawBufferPointer.allocate(byteCount: source.count, alignment: 1)
        source.withUnsafeBytes { bytes.copyMemory(from: $0) }
        enqueue(Chunk(bytes: UnsafeRawBufferPointer(bytes), memory: .owned))
    }

    /// Adds the buffer's readable bytes, sent from where they are: its storage is kept, by a
    /// reference of its own (NIO's storage management, for memory handed to C), until the body
    /// is done. A `ByteBuffer` never changes storage it shares, so the bytes stay as they are.
    /// Once per body, from `init`.
    private func sendInPlace(_ buffer: ByteBuffer) {
        guard buffer.readableBytes > 0 else { return }
        let bytes = buffer.withUnsafeReadableBytesWithStorageManagement { bytes, storage in
            keptStorage = storage.retain()
            return bytes
        }
        enqueue(Chunk(bytes: bytes, memory: .borrowed))
    }

    private func enqueue(_ chunk: Chunk) {
        chunks.append(chunk)
        unacknowledgedBytes += chunk.bytes.count
    }

    func finish() { isFinished = true }

    /// Fills `vectors` with chunks nghttp3 has not seen yet; nil means "nothing now, more later".
    func provide(into vectors: UnsafeMutablePointer<nghttp3_vec>, capacity: Int) -> (count: Int, endOfBody: Bool)? {
        var count = 0
        while count < capacity && (provided < chunks.count || readFromFile()) {
            let chunk = chunks[provided].bytes
            vectors[count] = nghttp3_vec(base: UnsafeMutablePointer(mutating: chunk.baseAddress?.assumingMemoryBound(to: UInt8.self)), len: chunk.count)
            provided += 1
            count += 1
        }
        let endOfBody = isFinished && file == nil && provided == chunks.count
        if count == 0 && !endOfBody {
            waitsForAcknowledgement = file != nil && !readFailed
            return nil
        }
        return (count, endOfBody)
    }

    /// Reads the file's next chunk while the window has room; false when it has none, the
    /// file is all read, or reading failed.
    private func readFromFile() -> Bool {
        guard let region = file, !readFailed, unacknowledgedBytes < Self.windowLimit else { return false }
        if let bytes = region.inMemoryBytes {
            // A small file in memory: the whole region at once, sent from where it is.
            keptReader = region.reader
            enqueue(Chunk(bytes: bytes, memory: .borrowed))
            file = nil
            return true
        }
        let length = min(Self.fileChunkSize, region.range.count)
        let buffer = UnsafeMutableRawBufferPointer(
            start: spareFileBuffers.popLast() ?? .allocate(byteCount: Self.fileChunkSize, alignment: 16),
            count: Self.fileChunkSize
        )
        guard region.reader.read(region.range.lowerBound..<region.range.lowerBound + length, into: buffer) else {
            buffer.deallocate()
            readFailed = true
            return false
        }
        enqueue(Chunk(bytes: UnsafeRawBufferPointer(rebasing: buffer[..<length]), memory: .fileBuffer))
        let rest = region.range.dropFirst(length)
        file = rest.isEmpty ? nil : HTTP3FileRegion(reader: region.reader, range: rest)
        return true
    }

    /// True once when a file body that waited at its window has room again (half of it).
    func resumesAfterAcknowledgement() -> Bool {
        guard waitsForAcknowledgement, unacknowledgedBytes < HTTP3BodyPump.resumeLevel else { return false }
        waitsForAcknowledgement = false
        return true
    }

    /// Frees the chunks the peer has now acknowledged in full.
    func acknowledge(_ bytes: UInt64) {
        var remaining = bytes
        unacknowledgedBytes -= Int(bytes)
        while remaining > 0, let front = chunks.first {
            let left = UInt64(front.bytes.count) - acknowledgedInFront
            if remaining >= left {
                remaining -= left
                acknowledgedInFront = 0
                // Kept only while the file has more to read.
                if front.memory == .fileBuffer && file != nil, let base = front.bytes.baseAddress {
                    spareFileBuffers.append(UnsafeMutableRawPointer(mutating: base))
                } else {
                    front.release()
                }
                chunks.removeFirst()
                provided -= 1
            } else {
                acknowledgedInFront += remaining
                remaining = 0
            }
        }
    }

    deinit {
        chunks.releaseAll()
        keptStorage?.release()
        for buffer in spareFileBuffers { buffer.deallocate() }
    }
}
