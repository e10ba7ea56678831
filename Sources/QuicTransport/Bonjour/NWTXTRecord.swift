#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// A DNS-SD TXT record as a dictionary of keys and values, matching Network.framework's
/// `NWTXTRecord`: set one in a listener's `NWListener.Service` to advertise it, read one from
/// a browse result's `.bonjour` metadata.
///
/// On the wire it is a sequence of length-prefixed strings, `key=value`, `key=` or `key`
/// (RFC 6763 §6.3–6.4). Keys are printable ASCII without `=` and compare case-insensitively
/// (RFC 6763 §6.4); an invalid key is refused, as Apple's methods refuse it. Entries keep the
/// order they were set in, and a key set again keeps its place.
public struct NWTXTRecord: Hashable, Sendable, Collection, CustomDebugStringConvertible {
    /// What a key maps to, matching Apple's `NWTXTRecord.Entry` (RFC 6763 §6.4).
    public enum Entry: Hashable, Sendable, CustomDebugStringConvertible {
        /// The key is present with no `=`: a boolean attribute that is true.
        case none
        /// The key is present as `key=`, with an empty value.
        case empty
        /// The key maps to a UTF-8 string.
        case string(String)
        /// The key maps to bytes that are not UTF-8 text.
        case data(Data)

        /// An entry from bytes, matching Apple's `init(_:)`: nil bytes are `.none`, no bytes
        /// `.empty`, UTF-8 text `.string`, anything else `.data`.
        public init(_ data: Data?) {
            guard let data else {
                self = .none
                return
            }
            if data.isEmpty {
                self = .empty
            } else if let text = String(validating: data, as: UTF8.self) {
                self = .string(text)
            } else {
                self = .data(data)
            }
        }

        /// The value's bytes: nil for `.none`, empty for `.empty`, matching Apple's `data`.
        public var data: Data? {
            switch self {
            case .none: return nil
            case .empty: return Data()
            case .string(let text): return Data(text.utf8)
            case .data(let bytes): return bytes
            }
        }

        public var debugDescription: String {
            switch self {
            case .none: return "none"
            case .empty: return "empty"
            case .string(let text): return "\"\(text)\""
            case .data(let bytes): return "\(bytes.count) bytes"
            }
        }
    }

    /// A position in the record, in the order entries were set.
    public struct Index: Comparable, Hashable, Sendable {
        let offset: Int
        public static func < (lhs: Index, rhs: Index) -> Bool { lhs.offset < rhs.offset }
    }

    private var storage: [(key: String, value: Entry)] = []

    /// A record holding `dictionary`'s keys and string values, matching Apple's `init(_:)`;
    /// invalid keys are left out.
    public init(_ dictionary: [String: String] = [:]) {
        for (key, value) in dictionary.sorted(by: { $0.key < $1.key }) {
            setEntry(value.isEmpty ? .empty : .string(value), for: key)
        }
    }

    /// A record holding `entryDictionary`'s entries, matching Apple's `init(_:)` of iOS 26.4;
    /// invalid keys are left out.
    public init(_ entryDictionary: [String: Entry]) {
        for (key, value) in entryDictionary.sorted(by: { $0.key < $1.key }) { setEntry(value, for: key) }
    }

    /// A record from its wire form (RFC 6763 §6); malformed strings are skipped, and for a key
    /// given twice the first wins (RFC 6763 §6.4).
    init(wireBytes: [UInt8]) {
        var offset = 0
        while offset < wireBytes.count {
            let length = Int(wireBytes[offset])
            let end = Swift.min(wireBytes.count, offset + 1 + length)
            let string = wireBytes[(offset + 1)..<end]
            offset = end
            guard !string.isEmpty else { continue }
            let key: String
            let entry: Entry
            if let equals = string.firstIndex(of: UInt8(ascii: "=")) {
                key = String(decoding: string[..<equals], as: UTF8.self)
                entry = Entry(Data(string[(equals + 1)...]))
            } else {
                key = String(decoding: string, as: UTF8.self)
                entry = .none
            }
            if getEntry(for: key) == nil { setEntry(entry, for: key) }
        }
    }

    /// The record's wire form (RFC 6763 §6); an empty record is one empty string, as RFC 6763
    /// §6.1 requires. Each string holds at most 255 bytes; longer values are cut.
    var wireBytes: [UInt8] {
        var bytes: [UInt8] = []
        for (key, value) in storage {
            var string = Array(key.utf8)
            if let data = value.data { string += [UInt8(ascii: "=")] + Array(data) }
            string = Array(string.prefix(255))
            bytes.append(UInt8(string.count))
            bytes += string
        }
        return bytes.isEmpty ? [0] : bytes
    }

    private static func isValid(_ key: String) -> Bool {
        !key.isEmpty && key.utf8.allSatisfy { $0 >= 0x20 && $0 <= 0x7E && $0 != UInt8(ascii: "=") }
    }

    private func position(of key: String) -> Int? {
        let lowered = key.lowercased()
        return storage.firstIndex { $0.key.lowercased() == lowered }
    }

    /// The record as strings, matching Apple's `dictionary`: `.none` and `.empty` are "", and
    /// bytes that are not UTF-8 are decoded with replacement characters.
    public var dictionary: [String: String] {
        var result: [String: String] = [:]
        for (key, value) in storage { result[key] = value.data.map { String(decoding: $0, as: UTF8.self) } ?? "" }
        return result
    }

    /// Every entry, keys as they were written, matching Apple's `entries`.
    public var entries: [String: Entry] {
        Dictionary(storage.map { ($0.key, $0.value) }, uniquingKeysWith: { first, _ in first })
    }

    /// Every value as bytes, matching Apple's `dataDictionary`: `.none` is empty.
    public var dataDictionary: [String: Data] {
        Dictionary(storage.map { ($0.key, $0.value.data ?? Data()) }, uniquingKeysWith: { first, _ in first })
    }

    /// The value for `key` as a string, matching Apple's subscript: nil when the key is absent;
    /// setting nil removes it.
    public subscript(key: String) -> String? {
        get { getEntry(for: key).map { $0.data.map { String(decoding: $0, as: UTF8.self) } ?? "" } }
        set {
            if let newValue {
                setEntry(newValue.isEmpty ? .empty : .string(newValue), for: key)
            } else {
                removeEntry(key: key)
            }
        }
    }

    /// The entry for `key`, matching Apple's `getEntry(for:)`; nil when the key is absent.
    public func getEntry(for key: String) -> Entry? { position(of: key).map { storage[$0].value } }

    /// Sets the entry for `key`, matching Apple's `setEntry(_:for:)`; false for an invalid key.
    @discardableResult
    public mutating func setEntry(_ entry: Entry, for key: String) -> Bool {
        guard Self.isValid(key) else { return false }
        if let index = position(of: key) { storage[index].value = entry } else { storage.append((key, entry)) }
        return true
    }

    /// Removes `key`, matching Apple's `removeEntry(key:)`; false when it was not there or is invalid.
    @discardableResult
    public mutating func removeEntry(key: String) -> Bool {
        guard let index = position(of: key) else { return false }
        storage.remove(at: index)
        return true
    }

    /// The first entry's position.
    public var startIndex: Index { Index(offset: 0) }
    /// The position past the last entry.
    public var endIndex: Index { Index(offset: storage.count) }
    /// The position after `i`.
    public func index(after i: Index) -> Index { Index(offset: i.offset + 1) }
    /// The key and entry at `position`.
    public subscript(position: Index) -> (key: String, value: Entry) { storage[position.offset] }

    public static func == (lhs: NWTXTRecord, rhs: NWTXTRecord) -> Bool {
        lhs.storage.count == rhs.storage.count
            && zip(lhs.storage, rhs.storage).allSatisfy { $0.key == $1.key && $0.value == $1.value }
    }

    public func hash(into hasher: inout Hasher) {
        for (key, value) in storage {
            hasher.combine(key)
            hasher.combine(value)
        }
    }

    public var debugDescription: String {
        "[" + storage.map { "\($0.key): \($0.value.debugDescription)" }.joined(separator: ", ") + "]"
    }
}
