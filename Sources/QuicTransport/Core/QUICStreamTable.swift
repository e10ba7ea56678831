/// Values by stream ID, for the tables touched on every stream and every request: open
/// addressing with linear probing over a power-of-two array, and Fibonacci hashing, so a lookup
/// costs a multiply and a compare or two.
///
/// `Dictionary<Int64, _>` hashes every key with seeded SipHash, many times this cost with the
/// lookup around it; a raw echo stream went through such tables about 60 times, an HTTP/3
/// request through several. SipHash's seed defends against keys chosen to collide; stream IDs
/// cannot be chosen that way. A peer opens its streams in order, within the limit the endpoint
/// grants (RFC 9000 §4.6, §2.1), so the keys in a table are a dense run of IDs, which the
/// multiplication spreads over the slots.
///
/// Inlinable, so that each module that keeps one (QuicTransport's connection core and stream
/// group, H3's codec and client) gets it specialized for its values. SPI rather than `package`:
/// Swift 6.3 does not make the body of an `@inlinable package` declaration available to other
/// modules, and H3's tables then ran the unspecialized generic code, looking up the slots'
/// type metadata on every call.
@_spi(StreamTable)
public struct QUICStreamTable<Value> {
    /// A stream ID (never negative, RFC 9000 §2.1), `empty` or `removed`, and its value.
    @usableFromInline
    struct Slot {
        @usableFromInline var key: Int64
        @usableFromInline var value: Value?

        @inlinable
        init(key: Int64, value: Value?) {
            self.key = key
            self.value = value
        }
    }

    @usableFromInline var slots: [Slot] = []
    /// Stream IDs held.
    @usableFromInline var held = 0
    /// Slots not empty: the IDs held and the `removed` marks left where probing must go on.
    @usableFromInline var occupied = 0

    @inlinable static var empty: Int64 { -1 }
    @inlinable static var removed: Int64 { -2 }

    @inlinable
    public init() {}

    /// Stream IDs held.
    @inlinable
    public var count: Int { held }

    @inlinable
    public var isEmpty: Bool { held == 0 }

    /// Slots allocated (a power of two, at least 16, once anything was inserted).
    @inlinable
    public var capacity: Int { slots.count }

    /// The value for `streamID`. Setting nil removes it. A value is not changed in place
    /// through the subscript (`table[id]?.field = …` copies it out and back, and a
    /// copy-on-write buffer in it with it): use `withValue(for:_:)`.
    @inlinable
    public subscript(streamID: Int64) -> Value? {
        get { slot(of: streamID).flatMap { slots[$0].value } }
        set {
            if let newValue {
                insert(newValue, for: streamID)
            } else {
                removeValue(forKey: streamID)
            }
        }
    }

    /// Runs `body` on the value for `streamID` where it lies; nil when there is none.
    ///
    /// In place: a copy would share its buffers with the table's while `body` changes them, so
    /// each change would first copy the buffer it touches. Nor a `_modify` accessor: its
    /// coroutine frame, which held the value moved out, was allocated on the heap for a value
    /// as large as a stream's state (seven `malloc`s per raw stream). `body` must not touch
    /// the table.
    @inlinable
    public mutating func withValue<R>(for streamID: Int64, _ body: (inout Value) throws -> R) rethrows -> R? {
        guard let slot = slot(of: streamID) else { return nil }
        return try slots.withUnsafeMutableBufferPointer { slots in try body(&slots[slot].value!) }
    }

    /// Whether `streamID` is in the table.
    @inlinable
    public func contains(_ streamID: Int64) -> Bool { slot(of: streamID) != nil }

    /// Removes and returns the value for `streamID`, if there is one.
    @inlinable
    @discardableResult
    public mutating func removeValue(forKey streamID: Int64) -> Value? {
        guard let slot = slot(of: streamID) else { return nil }
        let value = slots[slot].value.take()
        remove(at: slot)
        return value
    }

    /// Empties a slot whose value has been taken.
    @inlinable
    mutating func remove(at slot: Int) {
        held -= 1
        slots.withUnsafeMutableBufferPointer { slots in
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
        }
    }

    /// The stream IDs held and their values, in no particular order: a copy, so the table may
    /// change while a caller goes through it.
    @inlinable
    public var entries: [(streamID: Int64, value: Value)] {
        var entries: [(streamID: Int64, value: Value)] = []
        entries.reserveCapacity(count)
        for slot in slots where slot.key >= 0 {
            if let value = slot.value { entries.append((slot.key, value)) }
        }
        return entries
    }

    /// The stream IDs held, in no particular order.
    @inlinable
    public var streamIDs: [Int64] {
        var streamIDs: [Int64] = []
        streamIDs.reserveCapacity(count)
        for slot in slots where slot.key >= 0 { streamIDs.append(slot.key) }
        return streamIDs
    }

    @inlinable
    public mutating func removeAll() {
        slots = []
        held = 0
        occupied = 0
    }

    /// The slot that holds `streamID`.
    @inlinable
    func slot(of streamID: Int64) -> Int? {
        guard held > 0 else { return nil }
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

    @inlinable
    mutating func insert(_ value: Value, for streamID: Int64) {
        precondition(streamID >= 0, "stream IDs are never negative (RFC 9000 §2.1)")
        if let slot = slot(of: streamID) {
            slots[slot].value = value
            return
        }
        // At most half the slots occupied, so probes stay short and one always ends.
        if 2 * (occupied + 1) > slots.count { rebuild(capacity: Swift.max(16, 4 * (count + 1))) }
        held += 1
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
    @inlinable
    mutating func rebuild(capacity: Int) {
        let size = 1 << (Int.bitWidth - (capacity - 1).leadingZeroBitCount)
        let old = slots
        slots = [Slot](repeating: Slot(key: Self.empty, value: nil), count: size)
        occupied = held
        let mask = size - 1
        for slot in old where slot.key >= 0 {
            var index = Self.home(of: slot.key, mask: mask)
            while slots[index].key != Self.empty { index = (index + 1) & mask }
            slots[index] = slot
        }
    }

    /// Fibonacci hashing: the top bits of the ID times 2^64 / φ (`mask` is the slot count less
    /// one, at least 15).
    @inlinable
    static func home(of streamID: Int64, mask: Int) -> Int {
        let product = UInt64(bitPattern: streamID) &* 0x9E37_79B9_7F4A_7C15
        return Int(truncatingIfNeeded: product >> UInt64(64 - mask.nonzeroBitCount))
    }
}

/// A table of Sendable values (flow credit gathered under a lock) crosses threads.
@_spi(StreamTable)
extension QUICStreamTable: Sendable where Value: Sendable {}
extension QUICStreamTable.Slot: Sendable where Value: Sendable {}
