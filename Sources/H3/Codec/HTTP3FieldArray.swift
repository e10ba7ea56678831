import CQuicShims

/// A field section in the form nghttp3 submits it: an `nghttp3_nv` array of lower-case names
/// and values (RFC 9114 §4.2). nghttp3 copies the section during the submit call, so the array
/// only has to live that long.
package protocol HTTP3FieldArraySource: Collection<(name: String, value: String)> {
    /// Runs `body` with the fields as an `nghttp3_nv` array valid for the duration of the call.
    func withFieldArray<R>(_ body: (UnsafePointer<nghttp3_nv>, Int) -> R) -> R

    /// The section encoded once and kept by reference, when it is: a submitter that holds it
    /// until the stream closes lets nghttp3 read it in place instead of copying it.
    var sharedFieldArray: HTTP3FieldArray? { get }
}

extension HTTP3FieldArraySource {
    package func withFieldArray<R>(_ body: (UnsafePointer<nghttp3_nv>, Int) -> R) -> R { withCopiedFieldArray(body) }

    package var sharedFieldArray: HTTP3FieldArray? { nil }

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
/// It holds the entries twice over the same bytes: once for nghttp3 to copy during the
/// submit call, and once flagged `NGHTTP3_NV_FLAG_NO_COPY_NAME | NO_COPY_VALUE`, which
/// nghttp3 reads in place when it encodes the HEADERS frame, later; that saves it a copy and
/// a lower-casing pass per field.
///
/// Sendable invariant: immutable after `init`. The memory it points at is written only
/// there, and freed only in `deinit`.
package final class HTTP3FieldArray: @unchecked Sendable {
    /// The copied entries, the uncopied ones, then the names' and values' bytes they point into.
    private let storage: UnsafeMutableRawPointer
    private let count: Int

    init(_ fields: some Collection<(name: String, value: String)>) {
        let byteCount = Self.byteCount(of: fields)
        let arraySize = MemoryLayout<nghttp3_nv>.stride * fields.count
        storage = .allocate(byteCount: max(2 * arraySize + byteCount, 1), alignment: MemoryLayout<nghttp3_nv>.alignment)
        let copied = storage.bindMemory(to: nghttp3_nv.self, capacity: 2 * fields.count)
        let bytes = (storage + 2 * arraySize).bindMemory(to: UInt8.self, capacity: byteCount)
        count = Self.fill(copied, bytes: bytes, from: fields)
        let uncopied = copied + count
        uncopied.initialize(from: copied, count: count)
        for index in 0..<count { uncopied[index].flags = UInt8(NGHTTP3_NV_FLAG_NO_COPY_NAME | NGHTTP3_NV_FLAG_NO_COPY_VALUE) }
    }

    deinit { storage.deallocate() }

    /// The entries for nghttp3 to copy: valid for the duration of the call.
    func withFieldArray<R>(_ body: (UnsafePointer<nghttp3_nv>, Int) -> R) -> R {
        body(UnsafePointer(storage.assumingMemoryBound(to: nghttp3_nv.self)), count)
    }

    /// The entries nghttp3 reads in place: the caller keeps this array until the stream they
    /// are submitted on closes (nghttp3 encodes the frame at some later write call).
    func withUncopiedFieldArray<R>(_ body: (UnsafePointer<nghttp3_nv>, Int) -> R) -> R {
        body(UnsafePointer(storage.assumingMemoryBound(to: nghttp3_nv.self) + count), count)
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
