import QuicTransport
import Testing

/// The endpoint's connection IDs: QUIC-LB's first octet (draft-ietf-quic-load-balancers-21 §3),
/// the tag that tells issued IDs from garbage, and the masked worker byte that steers packets.
@Suite("QUICConnectionIDFactory")
struct QUICConnectionIDFactoryTests {
    @Test func unconfiguredIDsAreUnroutableAndSelfEncodeTheirLength() {
        let factory = QUICConnectionIDFactory()
        let id = factory.makeConnectionID()
        #expect(id.count == factory.idLength)
        #expect(id.bytes[0] >> 5 == 0b111, "no configuration: the unroutable codepoint (§3.2)")
        #expect(Int(id.bytes[0] & 0x1f) == factory.idLength - 1, "length self-description (§3.3)")
    }

    @Test func everyWorkerFindsItsOwnIDsAndOnlyIssuedIDsPassTheTag() {
        let first = QUICConnectionIDFactory()
        for worker in [0, 1, 7, 200] as [UInt8] {
            let factory = first.forWorker(worker)
            for _ in 0..<50 {
                let id = factory.makeConnectionID()
                #expect(id.withUnsafeBytes { first.worker(of: $0) } == worker)
                #expect(id.withUnsafeBytes { first.isIssuedHere($0) })
            }
        }
        let stranger = QUICConnectionIDFactory()
        let foreign = stranger.makeConnectionID()
        #expect(!foreign.withUnsafeBytes { first.isIssuedHere($0) }, "another secret's IDs are not ours to reset")
        let short = QUICConnectionID([1, 2, 3, 4])
        #expect(short.withUnsafeBytes { first.worker(of: $0) } == nil)
    }

    @Test func theWorkerByteOnTheWireDoesNotLinkAConnectionsIDs() {
        let factory = QUICConnectionIDFactory().forWorker(3)
        let wireBytes = Set((0..<200).map { _ in factory.makeConnectionID().bytes[factory.workerByteOffset] })
        #expect(wireBytes.count > 100, "one worker's IDs carry \(wireBytes.count) distinct masked bytes in 200")
    }
}
