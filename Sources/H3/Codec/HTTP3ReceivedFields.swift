import CQuicShims
import Glibc
import HTTPTypes

/// A field section as nghttp3's QPACK decoder hands it over (RFC 9114 §4.2), one field line at
/// a time, kept as bytes in one buffer: each line is a record of its name's token, the lengths
/// of its name and value, then the name and the value, back to back in wire order.
///
/// Strings are made only for what is read. A request the file handler serves reads its method,
/// its path and perhaps `range`; holding each line as a `(String, String)` pair cost a UTF-8
/// check and a string for every value, an array of pairs, and the teardown of all of it.
/// Sections are short, so lines are found by walking the records.
// @unchecked Sendable: `storage` is written only through `append`, while this section is its
// one owner (a copy that shares it is copied first); after that it is only read.
package struct HTTP3ReceivedFields: @unchecked Sendable {
    /// One field line: nghttp3's token for a well-known name (`nghttp3_qpack_token`, or -1),
    /// and where its name and value lie in the buffer.
    package struct Line: Sendable {
        let token: Int32
        let name: Range<Int>
        let value: Range<Int>
    }

    /// The records, in the first `used` bytes of the storage's `room`.
    ///
    /// Not optional: Swift 6.3 copies an optional class reference stored in a struct through
    /// the optional type's metadata (a call to its value witness)
    /// where a plain reference is one retain, and every request's section is copied into its
    /// event and its request. Nor is an empty one shared by every section: its reference count
    /// would be one cache line written by every request on every core. A codec makes each
    /// section's storage ahead (`HTTP3Codec.takeFieldSection`).
    private var storage: Storage
    private var room = 0
    private var used = 0
    /// A record's head: the token, then the name's and the value's lengths, each 4 bytes.
    private static let recordHead = 12
    package private(set) var count = 0
    /// The section's size as RFC 9114 §4.2.2 measures it (each field's name and value plus 32
    /// bytes), counting the lines that were not kept.
    package private(set) var size = 0
    /// One bit for each name kept, chosen by its length and first byte (`nameBit`): a name
    /// whose bit is clear is not in the section, so asking for a field that is absent (most
    /// requests have no `range`, for one) reads no record.
    private var namesSeen: UInt64 = 0

    /// The bytes, in one allocation. Its header is unused: the section keeps the room it
    /// made, and reading a class's stored property would cost an exclusivity check.
    private final class Storage: ManagedBuffer<Void, UInt8> {
        static func make(room: Int) -> Storage {
            unsafeDowncast(create(minimumCapacity: room) { _ in }, to: Storage.self)
        }
    }

    /// A section without lines, with a storage of its own (one small allocation).
    package init() {
        self.init(room: 0)
    }

    /// A section without lines, with room for `room` bytes of records before it grows.
    init(room: Int) {
        storage = Storage.make(room: room)
        self.room = room
    }

    /// Room enough for a usual request head (its records, each 12 bytes and the name and value).
    static let requestHeadRoom = 256

    /// A section from name and value pairs (tests), with the tokens nghttp3 would give their
    /// names.
    package init(_ pairs: [(name: String, value: String)]) {
        self.init()
        for (name, value) in pairs {
            let token = QPACKToken.token(of: name)
            var name = name, value = value
            name.withUTF8 { name in
                value.withUTF8 { value in append(name: name, value: value, token: token) }
            }
        }
    }

    package var isEmpty: Bool { count == 0 }

    /// Counts a field line towards `size`, and keeps it while `size` stays within `limit`: past
    /// it the lines are dropped, so an endless section costs no memory.
    mutating func append(name: UnsafeBufferPointer<UInt8>, value: UnsafeBufferPointer<UInt8>, token: Int32, keepingWithin limit: Int = .max) {
        size += name.count + value.count + 32
        guard size <= limit else { return }
        let start = used
        let end = start + Self.recordHead + name.count + value.count
        if end > room || !isKnownUniquelyReferenced(&storage) {
            // A request head usually fits in the first 256 bytes: one allocation per section.
            moveToNewStorage(room: end > room ? Swift.max(end, 2 * room, Self.requestHeadRoom) : room)
        }
        storage.withUnsafeMutablePointerToElements { bytes in
            let raw = UnsafeMutableRawPointer(bytes + start)
            raw.storeBytes(of: token, as: Int32.self)
            (raw + 4).storeBytes(of: Int32(truncatingIfNeeded: name.count), as: Int32.self)
            (raw + 8).storeBytes(of: Int32(truncatingIfNeeded: value.count), as: Int32.self)
            if let base = name.baseAddress { memcpy(raw + Self.recordHead, base, name.count) }
            if let base = value.baseAddress { memcpy(raw + Self.recordHead + name.count, base, value.count) }
        }
        used = end
        count += 1
        namesSeen |= Self.nameBit(name)
    }

    @inline(__always)
    private static func nameBit(_ name: UnsafeBufferPointer<UInt8>) -> UInt64 {
        nameBit(count: name.count, first: name.first ?? 0)
    }

    @inline(__always)
    private static func nameBit(count: Int, first: UInt8) -> UInt64 {
        1 << UInt64((count &* 7 &+ Int(first)) & 63)
    }

    private mutating func moveToNewStorage(room: Int) {
        let new = Storage.make(room: room)
        if used > 0 {
            let used = self.used
            new.withUnsafeMutablePointerToElements { target in
                storage.withUnsafeMutablePointerToElements { target.update(from: $0, count: used) }
            }
        }
        storage = new
        self.room = room
    }

    /// The lines in wire order.
    package var lines: [Line] {
        var lines: [Line] = []
        lines.reserveCapacity(count)
        _ = firstLine { line, _ in
            lines.append(line)
            return false
        }
        return lines
    }

    /// The first line, in wire order, that `isWanted` takes: it sees each line with the bytes.
    private func firstLine(where isWanted: (Line, UnsafeRawBufferPointer) -> Bool) -> Line? {
        withBytes { raw in
            var offset = 0
            while offset < raw.count {
                let line = Self.line(at: offset, in: raw)
                offset = line.value.upperBound
                if isWanted(line, raw) { return line }
            }
            return nil
        }
    }

    /// The line whose record starts at `offset`.
    private static func line(at offset: Int, in raw: UnsafeRawBufferPointer) -> Line {
        let nameCount = Int(raw.loadUnaligned(fromByteOffset: offset + 4, as: Int32.self))
        let valueCount = Int(raw.loadUnaligned(fromByteOffset: offset + 8, as: Int32.self))
        let nameStart = offset + recordHead
        let valueStart = nameStart + nameCount
        return Line(
            token: raw.loadUnaligned(fromByteOffset: offset, as: Int32.self),
            name: nameStart..<valueStart,
            value: valueStart..<(valueStart + valueCount)
        )
    }

    /// The records written so far.
    private func withBytes<R>(_ body: (UnsafeRawBufferPointer) -> R) -> R {
        return storage.withUnsafeMutablePointerToElements { body(UnsafeRawBufferPointer(start: $0, count: used)) }
    }

    /// A line's name: a string constant for a well-known name, decoded otherwise.
    package func name(of line: Line) -> String {
        QPACKToken.name(of: line.token) ?? string(line.name)
    }

    package func value(of line: Line) -> String { string(line.value) }

    /// False when no line is named `name` (lowercase, as HTTP/3 sends names, RFC 9114 §4.2);
    /// true when one may be. Reads no record, and only the name's length and first byte.
    func mayContain(_ name: String) -> Bool {
        let utf8 = name.utf8
        return namesSeen & Self.nameBit(count: utf8.count, first: utf8.first ?? 0) != 0
    }

    /// The lines named `name`, in wire order.
    func lines(named name: String) -> [Line] {
        var name = name
        return name.withUTF8 { name in
            guard namesSeen & Self.nameBit(name) != 0 else { return [] }
            return withBytes { raw in
                // A plain loop that reads a record's name length before anything else: this runs
                // for every request that asks for a header field.
                var named: [Line] = []
                var offset = 0
                while offset < raw.count {
                    let nameCount = Int(raw.loadUnaligned(fromByteOffset: offset + 4, as: Int32.self))
                    if Self.bytes(offset + Self.recordHead..<offset + Self.recordHead + nameCount, in: raw).equals(name) {
                        named.append(Self.line(at: offset, in: raw))
                    }
                    offset += Self.recordHead + nameCount + Int(raw.loadUnaligned(fromByteOffset: offset + 8, as: Int32.self))
                }
                return named
            }
        }
    }

    /// Whether a line is a pseudo-header field (RFC 9114 §4.3).
    func isPseudoHeader(_ line: Line) -> Bool {
        withBytes { Self.isPseudoHeader(line, in: $0) }
    }

    /// The first line of the pseudo-header field nghttp3 gives `token` (every pseudo-header
    /// field has one). The pseudo-header fields come first (RFC 9114 §4.3), so the search stops
    /// at the first regular field; of a repeated one, the first counts. Names are not compared:
    /// each request looks for two of these.
    func firstPseudoHeader(_ token: nghttp3_qpack_token) -> Line? {
        withBytes { raw in
            var offset = 0
            while offset < raw.count {
                let line = Self.line(at: offset, in: raw)
                offset = line.value.upperBound
                guard Self.isPseudoHeader(line, in: raw) else { return nil }
                if line.token == Int32(bitPattern: token.rawValue) { return line }
            }
            return nil
        }
    }

    /// Each regular line (not a pseudo-header field, RFC 9114 §4.3) in wire order, with its
    /// name's and value's bytes, valid for the length of the call.
    func forEachRegularLine(_ body: (Line, UnsafeBufferPointer<UInt8>, UnsafeBufferPointer<UInt8>) -> Void) {
        _ = firstLine { line, raw in
            if !Self.isPseudoHeader(line, in: raw) { body(line, Self.bytes(line.name, in: raw), Self.bytes(line.value, in: raw)) }
            return false
        }
    }

    /// A line's value as bytes, for the length of `body`.
    func withValueBytes<R>(of line: Line, _ body: (UnsafeBufferPointer<UInt8>) -> R) -> R {
        withBytes { body(Self.bytes(line.value, in: $0)) }
    }

    /// The lines as name and value strings, in wire order.
    package var pairs: [(name: String, value: String)] {
        var pairs: [(name: String, value: String)] = []
        pairs.reserveCapacity(count)
        for line in lines { pairs.append((name(of: line), value(of: line))) }
        return pairs
    }

    /// A name starting with ':' (RFC 9114 §4.3).
    private static func isPseudoHeader(_ line: Line, in raw: UnsafeRawBufferPointer) -> Bool {
        !line.name.isEmpty && raw[line.name.lowerBound] == UInt8(ascii: ":")
    }

    private static func bytes(_ range: Range<Int>, in raw: UnsafeRawBufferPointer) -> UnsafeBufferPointer<UInt8> {
        UnsafeRawBufferPointer(rebasing: raw[range]).assumingMemoryBound(to: UInt8.self)
    }

    private func string(_ range: Range<Int>) -> String {
        withBytes { String(decoding: Self.bytes(range, in: $0), as: UTF8.self) }
    }
}

extension UnsafeBufferPointer<UInt8> {
    /// Whether these bytes are exactly `other`'s, compared with `memcmp`.
    func equals(_ other: UnsafeBufferPointer<UInt8>) -> Bool {
        count == other.count && (count == 0 || memcmp(baseAddress!, other.baseAddress!, count) == 0)
    }

    /// Whether these bytes are exactly `text`'s.
    func equals(_ text: StaticString) -> Bool {
        text.withUTF8Buffer { equals($0) }
    }
}
