@_spi(StreamTable) @testable import QuicTransport
import QuicTestSupport
import Testing

/// The stream-ID table must answer exactly as a Dictionary does, however its slots fill,
/// wrap, empty and fill again.
@Suite("Stream table")
struct QUICStreamTableTests {
    /// Random inserts, replacements, removals and lookups against a Dictionary, on keys shaped
    /// like request streams (multiples of 4, a window moving up) and on scattered ones.
    @Test(arguments: [4, 1_000_003])
    func answersAsADictionaryDoes(stride: Int64) {
        var generator = SeededGenerator(seed: 0x5EED ^ UInt64(stride))
        var table = QUICStreamTable<Int>()
        var reference: [Int64: Int] = [:]
        var oldest: Int64 = 0
        for step in 0..<200_000 {
            // A window of about 100 open streams that slides forward, as a busy connection's does.
            let key = (oldest + Int64(generator.next() % 128)) * stride
            switch generator.next() % 4 {
            case 0, 1:
                table[key] = step
                reference[key] = step
            case 2:
                #expect(table.removeValue(forKey: key) == reference.removeValue(forKey: key))
            default:
                #expect(table[key] == reference[key])
            }
            if generator.next() % 64 == 0 {
                for gone in oldest..<(oldest + 8) {
                    table[gone * stride] = nil
                    reference[gone * stride] = nil
                }
                oldest += 8
            }
            #expect(table.count == reference.count)
            if table.count != reference.count { return }
        }
        for (key, value) in reference { #expect(table[key] == value) }
        let entries = table.entries
        #expect(entries.count == reference.count)
        #expect(Dictionary(entries.map { ($0.streamID, $0.value) }, uniquingKeysWith: { first, _ in first }) == reference)
        table.removeAll()
        #expect(table.isEmpty && table[reference.keys.first ?? 0] == nil)
    }

    /// One request at a time, as a quiet connection makes them: the table neither grows nor
    /// fills with removal marks.
    @Test func oneAtATimeNeverGrows() {
        var table = QUICStreamTable<Void>()
        for streamID in stride(from: Int64(0), to: 400_000, by: 4) {
            table[streamID] = ()
            #expect(table[streamID] != nil)
            table.removeValue(forKey: streamID)
            #expect(table.isEmpty)
        }
        #expect(table.capacity == 16)
    }

    /// `withValue(for:_:)` changes a value where it lies: an array in it keeps its buffer, where
    /// a copy out and back would make the change copy the whole buffer first.
    @Test func withValueChangesTheValueInPlace() {
        var table = QUICStreamTable<[UInt8]>()
        var bytes = [UInt8](repeating: 7, count: 4)
        bytes.reserveCapacity(64)
        table[8] = bytes
        bytes = []
        let before = table.withValue(for: 8) { $0.withUnsafeBufferPointer { $0.baseAddress } }
        let after = table.withValue(for: 8) { value -> UnsafePointer<UInt8>? in
            value.append(9)
            return value.withUnsafeBufferPointer { $0.baseAddress }
        }
        #expect(before != nil && before == after)
        #expect(table[8] == [7, 7, 7, 7, 9])
        #expect(table.withValue(for: 12) { $0.append(1) } == nil)
        #expect(table[12] == nil && table.count == 1)
    }
}
