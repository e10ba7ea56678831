/// Values kept by request path for a while, in a bounded, lossy table: `capacity` entries in
/// sets of `ways`, the set picked by a seeded hash of the path (FNV-1a over its UTF-8 bytes).
///
/// A lookup compares at most `ways` paths, and a full set gives the entry that expires first to
/// a new path. Paths that meet in one set, by chance or by a client's choice, so cost only
/// misses (the caller looks again), never a longer search. This is the open-file cache's index:
/// a `Dictionary`'s SipHash was the largest part of serving a cached file.
struct HTTP3RecentPaths<Value> {
    fileprivate struct Entry {
        let path: String
        let value: Value
        let expires: UInt64
    }

    static var ways: Int { 4 }
    private var entries: [Entry?]
    private let setMask: UInt64
    private let seed: UInt64
    /// Entries kept, expired or not.
    private(set) var count = 0

    /// - Parameter capacity: `ways` times a power of two.
    init(capacity: Int, seed: UInt64 = .random(in: .min ... .max)) {
        precondition(capacity >= Self.ways && capacity % Self.ways == 0 && (capacity / Self.ways).nonzeroBitCount == 1)
        entries = Array(repeating: nil, count: capacity)
        setMask = UInt64(capacity / Self.ways - 1)
        self.seed = seed
    }

    var capacity: Int { entries.count }

    /// The first entry of the set `path` belongs to.
    private func firstWay(of path: String) -> Int {
        var path = path  // withUTF8 may make it contiguous first; a request path already is.
        return path.withUTF8(firstWay(ofUTF8:))
    }

    private func firstWay(ofUTF8 path: UnsafeBufferPointer<UInt8>) -> Int {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325 ^ seed
        for byte in path { hash = (hash ^ UInt64(byte)) &* 0x0000_0100_0000_01b3 }
        // The low bits of FNV's product depend only on the low bits of what it mixed in.
        hash ^= hash >> 32
        return Int(truncatingIfNeeded: hash & setMask) * Self.ways
    }

    /// What is kept for `path`, unless it expired by `now`.
    func value(for path: String, now: UInt64) -> Value? {
        var path = path
        return path.withUTF8 { value(forUTF8: $0, now: now) }
    }

    /// What is kept for the path with these UTF-8 bytes, unless it expired by `now`: a request's
    /// path is looked up as it came, with no string made of it.
    func value(forUTF8 path: UnsafeBufferPointer<UInt8>, now: UInt64) -> Value? {
        let first = firstWay(ofUTF8: path)
        for index in first..<first + Self.ways {
            if let entry = entries[index], entry.path.utf8.withContiguousStorageIfAvailable({ $0.equals(path) }) == true {
                return now < entry.expires ? entry.value : nil
            }
        }
        return nil
    }

    /// Keeps `value` for `path` until `expires`: in place of what the path had, in a free way of
    /// its set, or in place of the set's entry that expires first.
    mutating func set(_ value: Value, for path: String, expires: UInt64) {
        let first = firstWay(of: path)
        var chosen = first
        var chosenExpires = UInt64.max
        for index in first..<first + Self.ways {
            guard let entry = entries[index] else {
                // A free way beats any taken one; the first free one is taken.
                if chosenExpires > 0 { (chosen, chosenExpires) = (index, 0) }
                continue
            }
            if entry.path == path {
                chosen = index
                break
            }
            if entry.expires < chosenExpires { (chosen, chosenExpires) = (index, entry.expires) }
        }
        if entries[chosen] == nil { count += 1 }
        entries[chosen] = Entry(path: path, value: value, expires: expires)
    }

    mutating func removeValue(for path: String) {
        let first = firstWay(of: path)
        for index in first..<first + Self.ways where entries[index]?.path == path {
            entries[index] = nil
            count -= 1
            return
        }
    }

    /// Lets go of every entry expired by `now`.
    mutating func removeExpired(now: UInt64) {
        for index in entries.indices {
            if let entry = entries[index], now >= entry.expires {
                entries[index] = nil
                count -= 1
            }
        }
    }

    /// Brings every entry `nanoseconds` nearer its expiry, as that much time passing would (tests).
    mutating func age(by nanoseconds: UInt64) {
        for index in entries.indices {
            guard let entry = entries[index] else { continue }
            entries[index] = Entry(path: entry.path, value: entry.value, expires: entry.expires - min(nanoseconds, entry.expires))
        }
    }

    /// Whether `a` and `b` share a set (tests).
    func shareASet(_ a: String, _ b: String) -> Bool { firstWay(of: a) == firstWay(of: b) }
}

extension HTTP3RecentPaths: Sendable where Value: Sendable {}
extension HTTP3RecentPaths.Entry: Sendable where Value: Sendable {}
