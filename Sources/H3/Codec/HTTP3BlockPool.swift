import CQuicShims
import Glibc

/// The memory one `nghttp3_conn` allocates from (`nghttp3_mem`): small blocks it frees are
/// kept by size and handed out again, rather than returned to glibc.
///
/// nghttp3 0.8 pools its stream objects, but each request stream still allocates about five
/// small blocks (the frame, chunk and output queues of a stream, and a decoded field's buffer,
/// 45 to 192 bytes) and frees them when the stream closes. With many requests in flight,
/// glibc's per-thread cache, seven blocks of each size, overflows: the rest are freed into the
/// arena's bins under its lock and taken back out of them for the next requests. A free list
/// per size class, kept by the one loop that owns the connection, costs a fraction of that.
///
/// Each block is preceded by a 16-byte header: its size class while it is in use, the next
/// free block of its class while it waits. At most `keptPerClass` blocks wait in each class,
/// so what the pool keeps is bounded by what the connection once had in use at the same time;
/// blocks over `largestPooled` bytes come from and go back to glibc. Everything kept is freed
/// with the pool, which must outlive its connection (nghttp3 keeps a pointer to `memory`).
/// Under AddressSanitizer nothing is kept (`keepsFreedBlocks`), so the sanitizer still sees
/// each use of a block nghttp3 freed. Used only by its codec, on that codec's loop.
final class HTTP3BlockPool {
    /// Sizes are rounded up to a multiple of this.
    static let classStep = 32
    /// The largest block kept: the blocks nghttp3 allocates per request are all smaller.
    static let largestPooled = 512
    /// Free blocks kept per size class: enough for a client's 100 concurrent requests in the
    /// common ones (RFC 9114 §6.1, `nghttp3_conn_set_max_client_streams_bidi`).
    static let keptPerClass = 128
    private static let classCount = largestPooled / classStep
    private static let headerSize = 16
    /// The size class a block from glibc's own sizes carries in its header.
    private static let unpooled = -1

    /// False in a process built with AddressSanitizer: every block goes back to glibc when
    /// freed, where the sanitizer watches it.
    let keepsFreedBlocks = !HTTP3BlockPool.isAddressSanitized
    private static let isAddressSanitized = dlsym(nil, "__asan_init") != nil

    /// What nghttp3 calls; it points back at this pool, unretained.
    let memory: UnsafeMutablePointer<nghttp3_mem>
    /// Per size class, the first free block (its header), threaded through the headers.
    private let freeBlocks: UnsafeMutablePointer<UnsafeMutableRawPointer?>
    private let freeCounts: UnsafeMutablePointer<Int>

    init() {
        memory = .allocate(capacity: 1)
        freeBlocks = .allocate(capacity: Self.classCount)
        freeBlocks.initialize(repeating: nil, count: Self.classCount)
        freeCounts = .allocate(capacity: Self.classCount)
        freeCounts.initialize(repeating: 0, count: Self.classCount)
        memory.initialize(
            to: nghttp3_mem(
                user_data: Unmanaged.passUnretained(self).toOpaque(),
                malloc: { size, pool in HTTP3BlockPool.with(pool) { $0.allocate(size) } },
                free: { block, pool in HTTP3BlockPool.with(pool) { $0.free(block) } },
                calloc: { count, size, pool in HTTP3BlockPool.with(pool) { $0.allocateZeroed(count: count, size: size) } },
                realloc: { block, size, pool in HTTP3BlockPool.with(pool) { $0.reallocate(block, size: size) } }
            )
        )
    }

    deinit {
        for sizeClass in 0..<Self.classCount {
            var next = freeBlocks[sizeClass]
            while let header = next {
                next = header.load(as: UnsafeMutableRawPointer?.self)
                Glibc.free(header)
            }
        }
        freeBlocks.deallocate()
        freeCounts.deallocate()
        memory.deallocate()
    }

    @inline(__always)
    private static func with<Result>(_ pool: UnsafeMutableRawPointer?, _ body: (HTTP3BlockPool) -> Result) -> Result {
        Unmanaged<HTTP3BlockPool>.fromOpaque(pool!)._withUnsafeGuaranteedRef(body)
    }

    /// Free blocks waiting in the class that `size` bytes fall in (tests).
    func keptBlocks(forSize size: Int) -> Int { size > Self.largestPooled ? 0 : freeCounts[Self.sizeClass(of: size)] }

    @inline(__always)
    private static func sizeClass(of size: Int) -> Int { size <= classStep ? 0 : (size - 1) / classStep }

    /// A block of at least `size` bytes, or nil when memory is exhausted.
    func allocate(_ size: Int) -> UnsafeMutableRawPointer? {
        guard size <= Self.largestPooled else {
            guard let header = malloc(Self.headerSize + size) else { return nil }
            header.storeBytes(of: Self.unpooled, as: Int.self)
            return header + Self.headerSize
        }
        let sizeClass = Self.sizeClass(of: size)
        let header: UnsafeMutableRawPointer
        if let free = freeBlocks[sizeClass] {
            freeBlocks[sizeClass] = free.load(as: UnsafeMutableRawPointer?.self)
            freeCounts[sizeClass] -= 1
            header = free
        } else {
            guard let fresh = malloc(Self.headerSize + (sizeClass + 1) * Self.classStep) else { return nil }
            header = fresh
        }
        header.storeBytes(of: sizeClass, as: Int.self)
        return header + Self.headerSize
    }

    /// Keeps `block` for the next allocation of its class, or gives it back to glibc.
    func free(_ block: UnsafeMutableRawPointer?) {
        guard let block else { return }
        let header = block - Self.headerSize
        let sizeClass = header.load(as: Int.self)
        guard keepsFreedBlocks, sizeClass != Self.unpooled, freeCounts[sizeClass] < Self.keptPerClass else {
            Glibc.free(header)
            return
        }
        header.storeBytes(of: freeBlocks[sizeClass], as: UnsafeMutableRawPointer?.self)
        freeBlocks[sizeClass] = header
        freeCounts[sizeClass] += 1
    }

    func allocateZeroed(count: Int, size: Int) -> UnsafeMutableRawPointer? {
        let (bytes, overflow) = count.multipliedReportingOverflow(by: size)
        guard !overflow, let block = allocate(bytes) else { return nil }
        memset(block, 0, bytes)
        return block
    }

    /// `realloc`: the same block while it has room, else a new one with the old contents.
    func reallocate(_ block: UnsafeMutableRawPointer?, size: Int) -> UnsafeMutableRawPointer? {
        guard let block else { return allocate(size) }
        let sizeClass = (block - Self.headerSize).load(as: Int.self)
        if sizeClass == Self.unpooled {
            guard size > Self.largestPooled else {
                // Shrunk into the pool's sizes: a pooled block, with the bytes that still fit.
                guard let smaller = allocate(size) else { return nil }
                smaller.copyMemory(from: block, byteCount: size)
                free(block)
                return smaller
            }
            guard let header = realloc(block - Self.headerSize, Self.headerSize + size) else { return nil }
            return header + Self.headerSize
        }
        let capacity = (sizeClass + 1) * Self.classStep
        if size <= capacity { return block }
        guard let larger = allocate(size) else { return nil }
        larger.copyMemory(from: block, byteCount: capacity)
        free(block)
        return larger
    }
}
