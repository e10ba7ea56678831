import CQuicShims

/// The packets of one write pass laid back to back in the caller's scratch buffer, cut into
/// batches that one UDP GSO send carries: the same path, the same ECN codepoint, every packet
/// but the last exactly `segmentSize` long, and under 64 KiB in all.
///
/// Nothing in the scratch is moved or overwritten within a pass, so each batch's bytes stay
/// valid until the pass returns. The two path storages live in the caller's temporary memory:
/// `packetPath` is where ngtcp2 writes each packet's path, `batchPath` the batch's, compared in
/// place (`ngtcp2_path_eq`).
struct QUICPacketBatch {
    /// Receives each batch with its segment size, destination and ECN codepoint.
    typealias Emit = (UnsafeRawBufferPointer, _ segmentSize: Int, _ path: QUICPath, _ ecn: UInt32) -> Void

    /// The most one batch holds: one UDP send carries at most 64 KiB.
    static let maximumBytes = 65_000

    private let scratch: UnsafeMutableRawBufferPointer
    let packetPath: UnsafeMutablePointer<ngtcp2_path_storage>
    private let batchPath: UnsafeMutablePointer<ngtcp2_path_storage>
    private var start = 0
    /// Where the next packet goes; the end of the bytes written so far.
    private(set) var end = 0
    private var segmentSize = 0
    /// Set from the batch's first packet: `ngtcp2_path_eq` aborts on the empty path a zeroed
    /// storage holds.
    private var hasAddresses = false
    /// ngtcp2 picks each packet's ECN codepoint (ECT(0) while validating and after, RFC 9000
    /// §13.4.2); a batch shares one, so a change ends the batch.
    private var ecn: UInt32 = 0

    /// A pass over `scratch`, with `paths` (two storages) for the packet's path and the batch's.
    init(scratch: UnsafeMutableRawBufferPointer, paths: UnsafeMutablePointer<ngtcp2_path_storage>) {
        self.scratch = scratch
        self.packetPath = paths
        self.batchPath = paths + 1
        ngtcp2_path_storage_zero(packetPath)
        ngtcp2_path_storage_zero(batchPath)
    }

    /// The room for the next packet: a whole packet of `maxPacket`, or the batch's segment size.
    func capacity(maxPacket: Int) -> Int { segmentSize == 0 ? maxPacket : segmentSize }

    /// Whether the scratch has room for another packet of `maxPacket` bytes.
    func hasRoom(maxPacket: Int) -> Bool { end + maxPacket <= scratch.count }

    /// Where the next packet is written.
    var nextPacket: UnsafeMutablePointer<UInt8> {
        scratch.baseAddress!.advanced(by: end).assumingMemoryBound(to: UInt8.self)
    }

    /// The scratch not yet written.
    var unusedScratch: UnsafeMutableRawBufferPointer { UnsafeMutableRawBufferPointer(rebasing: scratch[end...]) }

    /// Ends the batch before a packet of `capacity` would take it over `maximumBytes`.
    mutating func makeRoom(for capacity: Int, emit: Emit) {
        if end - start + capacity > Self.maximumBytes { flush(emit: emit) }
    }

    /// Takes the packet of `size` bytes just written at `nextPacket`, to `packetPath` with `ecn`:
    /// a packet for another path or with another ECN mark ends the batch before it, and a short
    /// one ends the batch after it.
    mutating func append(size: Int, ecn packetECN: UInt32, emit: Emit) {
        let samePath = hasAddresses && ngtcp2_path_eq(&packetPath.pointee.path, &batchPath.pointee.path) != 0
        if !samePath || packetECN != ecn { flush(emit: emit) }
        if end == start {
            if !samePath {
                ngtcp2_path_copy(&batchPath.pointee.path, &packetPath.pointee.path)
                hasAddresses = true
            }
            ecn = packetECN
        }
        if segmentSize == 0 { segmentSize = size }
        end += size
        if size < segmentSize { flush(emit: emit) }
    }

    /// Hands the batch so far to `emit`, if it holds anything, and starts the next.
    mutating func flush(emit: Emit) {
        if end > start {
            emit(UnsafeRawBufferPointer(rebasing: scratch[start..<end]), segmentSize, QUICPath(batchPath.pointee.path), ecn)
        }
        start = end
        segmentSize = 0
    }
}
