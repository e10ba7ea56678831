import CQuicShims
import Glibc
@testable import H3
import QuicTestSupport
import Testing

/// nghttp3's allocator: what it hands out is usable memory of the size asked for, whatever
/// path a block took (fresh, kept, grown, shrunk, larger than the pool keeps), and what it
/// keeps is bounded.
@Suite("HTTP3 block pool")
struct HTTP3BlockPoolTests {
    /// A freed block is what the next request of its size class gets, so a connection's steady
    /// state allocates nothing from glibc.
    /// (Under AddressSanitizer the pool keeps nothing, so that the sanitizer sees every free.)
    @Test func aFreedBlockServesTheNextAllocationOfItsClass() throws {
        let pool = HTTP3BlockPool()
        let first = try #require(pool.allocate(150))
        pool.free(first)
        #expect(pool.keptBlocks(forSize: 150) == (pool.keepsFreedBlocks ? 1 : 0))
        // 140 and 160 round up to the same 32-byte class as 150.
        let second = try #require(pool.allocate(140))
        if pool.keepsFreedBlocks { #expect(second == first) }
        #expect(pool.keptBlocks(forSize: 150) == 0)
        let other = try #require(pool.allocate(100))
        #expect(other != first)
        pool.free(second)
        pool.free(other)
    }

    /// Random allocations, frees and reallocations of every size through nghttp3's own entry
    /// points: each live block keeps its own pattern, so no two overlap and none is lost on a
    /// move, and calloc's blocks are zero even when they were used before.
    @Test func liveBlocksNeverOverlapAndKeepTheirBytes() throws {
        let pool = HTTP3BlockPool()
        let memory = pool.memory.pointee
        var generator = SeededGenerator(seed: 0xB10C)
        var live: [(block: UnsafeMutableRawPointer, size: Int, pattern: UInt8)] = []
        func fill(_ block: UnsafeMutableRawPointer, _ size: Int, _ pattern: UInt8) {
            block.initializeMemory(as: UInt8.self, repeating: pattern, count: size)
        }
        func holds(_ block: UnsafeMutableRawPointer, _ size: Int, _ pattern: UInt8) -> Bool {
            UnsafeRawBufferPointer(start: block, count: size).allSatisfy { $0 == pattern }
        }
        for step in 0..<20_000 {
            let size = Int.random(in: 0...700, using: &generator)
            let pattern = UInt8(truncatingIfNeeded: step | 1)
            switch Int.random(in: 0..<4, using: &generator) {
            case 0 where !live.isEmpty:
                let victim = live.remove(at: Int.random(in: 0..<live.count, using: &generator))
                #expect(holds(victim.block, victim.size, victim.pattern))
                memory.free(victim.block, memory.user_data)
            case 1 where !live.isEmpty:
                let index = Int.random(in: 0..<live.count, using: &generator)
                let old = live[index]
                let moved = try #require(memory.realloc(old.block, size, memory.user_data))
                #expect(holds(moved, min(old.size, size), old.pattern), "realloc \(old.size) → \(size)")
                fill(moved, size, pattern)
                live[index] = (moved, size, pattern)
            case 2:
                let count = Int.random(in: 1...8, using: &generator)
                let block = try #require(memory.calloc(count, size / 8, memory.user_data))
                #expect(holds(block, count * (size / 8), 0))
                fill(block, count * (size / 8), pattern)
                live.append((block, count * (size / 8), pattern))
            default:
                let block = try #require(memory.malloc(size, memory.user_data))
                fill(block, size, pattern)
                live.append((block, size, pattern))
            }
        }
        for entry in live {
            #expect(holds(entry.block, entry.size, entry.pattern))
            memory.free(entry.block, memory.user_data)
        }
        memory.free(nil, memory.user_data)
    }

    /// What waits for reuse is at most `keptPerClass` blocks a class; the rest go back to glibc.
    @Test func keepsAtMostItsLimitPerClass() throws {
        let pool = HTTP3BlockPool()
        let blocks = try (0..<(HTTP3BlockPool.keptPerClass + 50)).map { _ in try #require(pool.allocate(64)) }
        for block in blocks { pool.free(block) }
        let kept = pool.keepsFreedBlocks ? HTTP3BlockPool.keptPerClass : 0
        #expect(pool.keptBlocks(forSize: 64) == kept)
        // Larger than the pool keeps: from glibc, and back to it.
        let large = try #require(pool.allocate(HTTP3BlockPool.largestPooled + 1))
        pool.free(large)
        #expect(pool.keptBlocks(forSize: 64) == kept)
    }

    /// A process without AddressSanitizer keeps freed blocks: the pool is on where it counts.
    @Test func keepsFreedBlocksWithoutAddressSanitizer() {
        #expect(HTTP3BlockPool().keepsFreedBlocks == (dlsym(nil, "__asan_init") == nil))
    }

    /// calloc's count times size overflowing is a failed allocation, not a small block.
    @Test func callocOfAnOverflowingSizeFails() {
        let pool = HTTP3BlockPool()
        #expect(pool.allocateZeroed(count: Int.max / 2, size: 4) == nil)
    }
}
