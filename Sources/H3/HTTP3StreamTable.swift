/// Values by stream ID, for the tables touched on every request: open addressing
/// with linear probing over a power-of-two array, and Fibonacci hashing, so a lookup costs a
/// multiply and a compare or two.
///
/// `Dictionary<Int64, _>` hashes every key with seeded SipHash, about 100 instructions, and
/// the server inserted and removed each request's stream ID in two tables (about 1,000
/// instructions per request in all). SipHash's seed defends against keys chosen to collide;
/// stream IDs cannot be chosen that way. A client opens its streams in order, within the limit
/// the server grants (RFC 9000 §4.6, §2.1), so the keys in a table are a dense run of IDs,
/// which the multiplication spreads over the slots.
struct HTTP3StreamTable<Value> {
    /// A stream ID (never negative, RFC 9000 §2.1), `empty` or `removed`, and its value.
    fileprivate struct Slot {
        var key: Int64
        var value: Value?
    }

    private var slots: [Slot] = []
    /// Stream IDs held.
    private(set) var count = 0
    /// Slots not empty: the IDs held and the `removed` marks left where probing must go on.
    private var occupied = 0

    private static var empty: Int64 { -1 }
    private static var removed: Int64 { -2 }

    init() {}

    var isEmpty: Bool { count == 0 }

    /// Slots allocated (a power of two, at least 16, once anything was inserted).
    var capacity: Int { slots.count }

    subscript(streamID: Int64) -> Value? {
        get { slot(of: streamID).flatMap { slots[$0].value } }
        set {
            if let newValue {
                insert(newValue, for: streamID)
            } else {
                removeValue(forKey: streamID)
            }
        }
    }

    /// Removes and returns the value for `streamID`, if there is one.
    @discardableResult
    mutating func removeValue(forKey streamID: Int64) -> Value? {
        guard let slot = slot(of: streamID) else { return nil }
        count -= 1
        return slots.withUnsafeMutableBufferPointer { slots in
            let value = slots[slot].value.take()
            let mask = slots.count - 1
            if slots[(slot + 1) & mask].key == Self.empty {
                // Nothing probes past an empty slot: this one, and the marks just before it,
                // can be empty again.
                var index = slot
                slots[index].key = Self.empty
                occupied -= 1
                index = (index - 1) & mask
                while slots[index].key == Self.removed {
                    slots[index].key = Self.empty
                    occupied -= 1
                    index = (index - 1) & mask
                }
            } else {
                slots[slot].key = Self.removed
            }
            return value
        }
    }

    /// The stream IDs held and their values, in no particular order: a copy, so the table may
    /// change while a caller goes through it.
    var entries: [(streamID: Int64, value: Value)] {
        var entries: [(streamID: Int64, value: Value)] = []
        entries.reserveCapacity(count)
        for slot in slots where slot.key >= 0 {
            if let value = slot.value { entries.append((slot.key, value)) }
        }
        return entries
    }

    mutating func removeAll() {
        slots = []
        count = 0
        occupied = 0
    }

    /// The slot that holds `streamID`.
    private func slot(of streamID: Int64) -> Int? {
        guard count > 0 else { return nil }
        return slots.withUnsafeBufferPointer { slots in
            let mask = slots.count - 1
            var index = Self.home(of: streamID, mask: mask)
            while true {
                let key = slots[index].key
                if key == streamID { return index }
                if key == Self.empty { return nil }
                index = (index + 1) & mask
            }
        }
    }

    private mutating func insert(_ value: Value, for streamID: Int64) {
        precondition(streamID >= 0, "stream IDs are never negative (RFC 9000 §2.1)")
        if let slot = slot(of: streamID) {
            slots[slot].value = value
            return
        }
        // At most half the slots occupied, so probes stay short and one always ends.
        if 2 * (occupied + 1) > slots.count { rebuild(capacity: Swift.max(16, 4 * (count + 1))) }
        count += 1
        slots.withUnsafeMutableBufferPointer { slots in
            let mask = slots.count - 1
            var index = Self.home(of: streamID, mask: mask)
            while slots[index].key >= 0 { index = (index + 1) & mask }
            if slots[index].key == Self.empty { occupied += 1 }
            slots[index] = Slot(key: streamID, value: value)
        }
    }

    /// Moves every value into `capacity` slots (rounded up to a power of two), dropping the
    /// `removed` marks.
    private mutating func rebuild(capacity: Int) {
        let size = 1 << (Int.bitWidth - (capacity - 1).leadingZeroBitCount)
        let old = slots
        slots = [Slot](repeating: Slot(key: Self.empty, value: nil), count: size)
        occupied = count
        let mask = size - 1
        for slot in old where slot.key >= 0 {
            var index = Self.home(of: slot.key, mask: mask)
            while slots[index].key != Self.empty { index = (index + 1) & mask }
            slots[index] = slot
        }
    }

    /// Fibonacci hashing: the top bits of the ID times 2^64 / φ (`mask` is the slot count less
    /// one, at least 15).
    private static func home(of streamID: Int64, mask: Int) -> Int {
        let product = UInt64(bitPattern: streamID) &* 0x9E37_79B9_7F4A_7C15
        return Int(truncatingIfNeeded: product >> UInt64(64 - mask.nonzeroBitCount))
    }
}

/// A table of Sendable values (flow credit gathered under a lock) crosses threads.
extension HTTP3StreamTable: Sendable where Value: Sendable {}
extension HTTP3StreamTable.Slot: Sendable where Value: Sendable {}
