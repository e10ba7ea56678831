import CQuicShims

/// A field section in the form nghttp3 submits it: an `nghttp3_nv` array of lower-case names
/// and values (RFC 9114 §4.2). nghttp3 copies the section during the submit call, so the array
/// only has to live that long.
package protocol HTTP3FieldArraySource: Collection<(name: String, value: String)> {
    /// Runs `body` with the fields as an `nghttp3_nv` array valid for the duration of the call.
    func withFieldArray<R>(_ body: (UnsafePointer<nghttp3_nv>, Int) -> R) -> R
}

extension HTTP3FieldArraySource {
    package func withFieldArray<R>(_ body: (UnsafePointer<nghttp3_nv>, Int) -> R) -> R { withCopiedFieldArray(body) }

    /// Builds the array over one contiguous copy of the names and values: two temporary
    /// allocations however many fields there are.
    package func withCopiedFieldArray<R>(_ body: (UnsafePointer<nghttp3_nv>, Int) -> R) -> R {
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: Swift.max(HTTP3FieldArray.byteCount(of: self), 1)) { bytes in
            withUnsafeTemporaryAllocation(of: nghttp3_nv.self, capacity: Swift.max(count, 1)) { array in
                body(array.baseAddress!, HTTP3FieldArray.fill(array.baseAddress!, bytes: bytes.baseAddress!, from: self))
            }
        }
    }
}

extension Array: HTTP3FieldArraySource where Element == (name: String, value: String) {}

/// A field section encoded once into an `nghttp3_nv` array it owns, for a section submitted
/// many times (the head of a file that many requests fetch): submitting it copies no field
/// and reads no string.
///
/// Sendable invariant: immutable after `init`. The memory it points at is written only
/// there, and freed only in `deinit`.
final class HTTP3FieldArray: @unchecked Sendable {
    /// The `nghttp3_nv` entries, then the names' and values' bytes they point into.
    private let storage: UnsafeMutableRawPointer
    private let count: Int

    init(_ fields: some Collection<(name: String, value: String)>) {
        let byteCount = Self.byteCount(of: fields)
        let arraySize = MemoryLayout<nghttp3_nv>.stride * fields.count
        storage = .allocate(byteCount: max(arraySize + byteCount, 1), alignment: MemoryLayout<nghttp3_nv>.alignment)
        let array = storage.bindMemory(to: nghttp3_nv.self, capacity: fields.count)
        let bytes = (storage + arraySize).bindMemory(to: UInt8.self, capacity: byteCount)
        count = Self.fill(array, bytes: bytes, from: fields)
    }

    deinit { storage.deallocate() }

    func withFieldArray<R>(_ body: (UnsafePointer<nghttp3_nv>, Int) -> R) -> R {
        body(UnsafePointer(storage.assumingMemoryBound(to: nghttp3_nv.self)), count)
    }

    /// The bytes `fill` copies: every name and value, back to back.
    static func byteCount(of fields: some Collection<(name: String, value: String)>) -> Int {
        fields.reduce(0) { $0 + $1.name.utf8.count + $1.value.utf8.count }
    }

    /// Copies each field's name and value to `bytes`, back to back, and points an entry of
    /// `array` at them; both have room for all of `fields`. Returns the number of entries.
    static func fill(
        _ array: UnsafeMutablePointer<nghttp3_nv>,
        bytes: UnsafeMutablePointer<UInt8>,
        from fields: some Collection<(name: String, value: String)>
    ) -> Int {
        var next = bytes
        var count = 0
        for field in fields {
            let name = next
            let nameLength = copyUTF8(of: field.name, to: name)
            let value = name + nameLength
            let valueLength = copyUTF8(of: field.value, to: value)
            next = value + valueLength
            (array + count).initialize(to: nghttp3_nv(
                name: name, value: value, namelen: nameLength, valuelen: valueLength, flags: UInt8(NGHTTP3_NV_FLAG_NONE)
            ))
            count += 1
        }
        return count
    }

    /// Copies a string's UTF-8 to `destination`, which has room for it; one memcpy for a
    /// native string, byte by byte otherwise. Returns the byte count.
    private static func copyUTF8(of string: String, to destination: UnsafeMutablePointer<UInt8>) -> Int {
        let copied = string.utf8.withContiguousStorageIfAvailable { source -> Int in
            if let base = source.baseAddress { destination.initialize(from: base, count: source.count) }
            return source.count
        }
        return copied ?? UnsafeMutableBufferPointer(start: destination, count: string.utf8.count).initialize(from: string.utf8).1
    }
}
