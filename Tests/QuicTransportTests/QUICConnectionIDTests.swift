import QuicTransport
import Testing

/// Connection IDs are held inline and zero-padded, so their length must take part in equality
/// and hashing (RFC 9000 §5.1: IDs of different lengths are different IDs).
@Suite("QUICConnectionID")
struct QUICConnectionIDTests {
    @Test func zeroPaddingNeverMakesTwoLengthsEqual() {
        let four = QUICConnectionID([0, 0, 0, 0])
        let five = QUICConnectionID([0, 0, 0, 0, 0])
        #expect(four != five)
        #expect(Set([four, five, QUICConnectionID([0, 0, 0, 0])]).count == 2)
        #expect(QUICConnectionID([]) != QUICConnectionID([0]))
    }

    @Test func bytesSurviveEveryRepresentation() {
        let bytes = (1...20).map { UInt8($0 * 11) }
        let id = QUICConnectionID(bytes)
        #expect(id.bytes == bytes)
        #expect(id.count == 20)
        #expect(QUICConnectionID(id.ngtcp2) == id)
        #expect(bytes.withUnsafeBufferPointer { QUICConnectionID(pointer: $0.baseAddress!, length: 8) } == QUICConnectionID(Array(bytes.prefix(8))))
        #expect(id.hex == "0b16212c37424d58636e79848f9aa5b0bbc6d1dc")
    }
}
