/// The path model: what happens to each datagram, drawn from one seeded generator so runs repeat.
struct Impairments {
    var delay = 0.0
    var jitter = 0.0
    var loss = 0.0
    /// Probability of starting a burst, and its length in datagrams.
    var burst: (probability: Double, length: Int)?
    var reorder = 0.0
    var reorderDelay = 0.01
    var duplicate = 0.0
    var corrupt = 0.0
    /// 0 for no rate limit.
    var bitsPerSecond = 0.0
    var queueLimit = 1000
    /// Windows, in seconds since the first datagram, in which everything is dropped.
    var blackholes: [(start: Double, duration: Double)] = []

    private var random: SplitMix64
    private var burstRemaining = [0, 0]
    /// When each direction's link is next free, and the departure times still queued behind it.
    private var linkFreeAt = [0.0, 0.0]
    private var queued: [[Double]] = [[], []]
    private var firstSeen: Double?

    /// What happened to the datagrams of one direction.
    struct Counts: CustomStringConvertible {
        var received = 0
        var forwarded = 0
        var lost = 0
        var queueDropped = 0
        var blackholed = 0
        var duplicated = 0
        var corrupted = 0
        var reordered = 0

        var description: String {
            "received \(received), forwarded \(forwarded), lost \(lost), queue drops \(queueDropped), "
                + "blackholed \(blackholed), duplicated \(duplicated), corrupted \(corrupted), reordered \(reordered)"
        }
    }

    init(seed: UInt64) {
        random = SplitMix64(seed: seed)
    }

    static func parseBurst(_ text: String) -> (probability: Double, length: Int)? {
        let parts = text.split(separator: ",")
        guard parts.count == 2, let probability = Double(parts[0]), (0...1).contains(probability),
            let length = Int(parts[1]), length > 0
        else { return nil }
        return (probability, length)
    }

    static func parseWindow(_ text: String) -> (start: Double, duration: Double)? {
        let parts = text.split(separator: ":")
        guard parts.count == 2, let start = Double(parts[0]), let duration = Double(parts[1]), start >= 0, duration > 0 else { return nil }
        return (start, duration)
    }

    private mutating func chance(_ probability: Double) -> Bool {
        probability > 0 && Double(random.next() >> 11) / Double(1 << 53) < probability
    }

    private mutating func uniform(_ upper: Double) -> Double {
        upper > 0 ? Double(random.next() >> 11) / Double(1 << 53) * upper : 0
    }

    /// The copies of `bytes` to deliver and when; empty when it is dropped.
    mutating func apply(_ bytes: [UInt8], direction: Int, now: Double, counts: inout Counts) -> [(Double, [UInt8])] {
        counts.received += 1
        let start = firstSeen ?? now
        firstSeen = start
        let elapsed = now - start
        if blackholes.contains(where: { elapsed >= $0.start && elapsed < $0.start + $0.duration }) {
            counts.blackholed += 1
            return []
        }
        if burstRemaining[direction] > 0 {
            burstRemaining[direction] -= 1
            counts.lost += 1
            return []
        }
        if let burst, chance(burst.probability) {
            burstRemaining[direction] = burst.length - 1
            counts.lost += 1
            return []
        }
        if chance(loss) {
            counts.lost += 1
            return []
        }
        // The rate limit: the datagram leaves when the link is free; past the queue limit, tail drop.
        var departure = now
        if bitsPerSecond > 0 {
            queued[direction].removeAll { $0 <= now }
            guard queued[direction].count < queueLimit else {
                counts.queueDropped += 1
                return []
            }
            departure = max(now, linkFreeAt[direction])
            linkFreeAt[direction] = departure + Double(bytes.count * 8) / bitsPerSecond
            queued[direction].append(departure)
        }
        var payload = bytes
        if chance(corrupt), !payload.isEmpty {
            let index = Int(random.next() % UInt64(payload.count))
            payload[index] ^= UInt8(truncatingIfNeeded: random.next() | 1)
            counts.corrupted += 1
        }
        var at = departure + delay + uniform(jitter)
        if chance(reorder) {
            at += reorderDelay
            counts.reordered += 1
        }
        var deliveries = [(at, payload)]
        if chance(duplicate) {
            deliveries.append((at + uniform(max(jitter, 0.001)), payload))
            counts.duplicated += 1
        }
        return deliveries
    }
}

/// SplitMix64: small, fast and seedable; enough to make impairment runs repeatable.
struct SplitMix64 {
    private var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
