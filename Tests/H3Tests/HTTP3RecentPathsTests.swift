@testable import H3
import QuicTestSupport
import Testing

/// The open-file cache's index is lossy by design, but never wrong: what it answers is the
/// latest value kept for that path and not expired, and a path just kept is always found.
@Suite("HTTP3 recent paths")
struct HTTP3RecentPathsTests {
    /// Random keeps, removals, lookups and sweeps over more paths than fit, against a
    /// Dictionary of what was last kept for each path.
    @Test func answersOnlyWhatWasLastKeptAndNotExpired() {
        var generator = SeededGenerator(seed: 0xCAC4E)
        var table = HTTP3RecentPaths<Int>(capacity: 16, seed: 7)
        var latest: [String: (value: Int, expires: UInt64)] = [:]
        var now: UInt64 = 1_000
        var found = 0
        for step in 0..<100_000 {
            now += generator.next() % 3
            let path = "/file-\(generator.next() % 40)" + (generator.next() % 2 == 0 ? "" : "/with/a/longer/name.html")
            switch generator.next() % 8 {
            case 0, 1, 2:
                let expires = now + 1 + generator.next() % 50
                table.set(step, for: path, expires: expires)
                latest[path] = (step, expires)
                #expect(table.value(for: path, now: now) == step, "a path just kept is found")
            case 3:
                table.removeValue(for: path)
                latest[path] = nil
                #expect(table.value(for: path, now: now) == nil)
            case 4:
                table.removeExpired(now: now)
            default:
                guard let answer = table.value(for: path, now: now) else { continue }
                found += 1
                let expected = latest[path]
                #expect(answer == expected?.value, "\(path) answered \(answer), last kept \(String(describing: expected))")
                #expect(now < expected?.expires ?? 0, "\(path) answered after it expired")
            }
            #expect(table.count <= table.capacity)
        }
        #expect(found > 1_000, "the lookups found something often enough to check it: \(found)")
    }

    /// Paths that share a set take its free places first, then the place of the entry that
    /// expires first; however many share it, a lookup compares at most four paths.
    @Test func aFullSetGivesTheEarliestExpiryToANewPath() throws {
        var table = HTTP3RecentPaths<Int>(capacity: 256, seed: 42)
        let sharing = (0..<10_000).map { "/p\($0)" }.filter { table.shareASet($0, "/p0") }
        try #require(sharing.count >= 6, "only \(sharing.count) paths share a set")
        for (index, path) in sharing.prefix(4).enumerated() {
            table.set(index, for: path, expires: UInt64(100 + index))
        }
        for (index, path) in sharing.prefix(4).enumerated() { #expect(table.value(for: path, now: 0) == index) }
        table.set(4, for: sharing[4], expires: 200)
        #expect(table.value(for: sharing[0], now: 0) == nil, "the entry expiring first gave way")
        for index in 1...4 { #expect(table.value(for: sharing[index], now: 0) == index) }
        // Many more in the same set: the table stays within it, and the last one kept is found.
        for (index, path) in sharing.dropFirst(5).enumerated() { table.set(1_000 + index, for: path, expires: 300 + UInt64(index)) }
        #expect(table.count == 4)
        #expect(table.value(for: sharing.last!, now: 0) == 1_000 + sharing.count - 6)
        table.removeExpired(now: 10_000)
        #expect(table.count == 0)
    }
}
