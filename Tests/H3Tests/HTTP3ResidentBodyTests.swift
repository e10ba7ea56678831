import CQuicShims
import Foundation
@testable import H3
import HTTPTypes
import QuicTestSupport
import QuicTransport
import Testing

/// A region of a small file goes out from its reader's memory, with no queued body of its own
/// (`StreamBody.resident`): the codec holds the reader until the stream closes, and no longer.
@Suite("Resident file bodies")
struct HTTP3ResidentBodyTests {
    /// A reader holding `bytes` in memory, as the file handler opens a small file.
    static func residentReader(_ bytes: [UInt8]) throws -> HTTP3FileReader {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("resident-\(UUID())").path
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        defer { unlink(path) }
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        try #require(descriptor >= 0)
        let reader = HTTP3FileReader(descriptor: descriptor, size: bytes.count)
        try #require(reader.contents != nil, "a file of \(bytes.count) bytes is read into memory")
        return reader
    }

    /// The region the server answers with; set to nil once every response is submitted.
    // @unchecked Sendable: read and written only by the thread that steps the pair, whose
    // server callbacks run inside its steps.
    final class Served: @unchecked Sendable {
        var region: HTTP3FileRegion?
        var closed = Set<Int64>()
        var submitted = 0
        /// The head to answer with, when the test gives one.
        var head: HTTP3PreparedHead?
    }

    static func makePair(serving served: Served) throws -> (InMemoryPair, HTTP3Codec, HTTP3CodecTests.ServerBox) {
        try HTTP3CodecTests.makePair(seed: 5) { server, event in
            switch event {
            case .headers(let stream, _, false):
                guard let region = served.region else { return }
                try? server.submitResponse(
                    streamID: stream,
                    headers: [(":status", "200"), ("content-length", "\(region.range.count)")],
                    body: nil,
                    file: region
                )
                served.submitted += 1
            case .closed(let stream, _):
                served.closed.insert(stream)
            default:
                break
            }
        }
    }

    /// The whole file, and a range of it (a 206's body).
    @Test(arguments: [0..<10_000, 1_234..<8_765])
    func concurrentResponsesArriveWholeAndTheReaderIsLetGoWhenTheyClose(range: Range<Int>) throws {
        let file = (0..<10_000).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) }
        let bytes = Array(file[range])
        let served = Served()
        weak var released: HTTP3FileReader?
        do {
            let reader = try Self.residentReader(file)
            released = reader
            served.region = HTTP3FileRegion(reader: reader, range: range)
        }
        let (pair, client, _) = try Self.makePair(serving: served)
        try pair.run(until: { pair.client.isHandshakeCompleted })
        var streams: [Int64] = []
        for index in 0..<30 {
            streams.append(try #require(try client.submitRequest(headers: HTTP3CodecTests.request("/r\(index)"), body: nil)))
        }
        var bodies: [Int64: [UInt8]] = [:]
        var ended = Set<Int64>()
        try pair.run(until: {
            if served.submitted == streams.count { served.region = nil }
            for event in client.takeEvents() {
                if case .data(let stream, let chunk) = event { bodies[stream, default: []] += chunk }
                if case .end(let stream) = event { ended.insert(stream) }
            }
            return ended.count == streams.count && served.closed.isSuperset(of: streams)
        })
        for stream in streams { #expect(bodies[stream] == bytes, "stream \(stream): \(bodies[stream]?.count ?? 0) bytes") }
        #expect(released == nil, "the codec still holds the reader after every stream closed")
    }

    /// A connection that goes away with responses unacknowledged takes its hold on the reader
    /// with it.
    @Test func aCodecThatGoesAwayLetsTheReaderGo() throws {
        let served = Served()
        weak var released: HTTP3FileReader?
        do {
            let reader = try Self.residentReader(Array(repeating: 0x61, count: 4_000))
            released = reader
            served.region = HTTP3FileRegion(reader: reader, range: 0..<4_000)
        }
        do {
            let (pair, client, box) = try Self.makePair(serving: served)
            try pair.run(until: { pair.client.isHandshakeCompleted })
            _ = try #require(try client.submitRequest(headers: HTTP3CodecTests.request("/a"), body: nil))
            try pair.run(until: { served.submitted == 1 })
            served.region = nil
            #expect(released != nil, "the codec holds the reader while the response is in flight")
            pair.afterStep = nil
            box.codec = nil
        }
        #expect(released == nil, "the reader outlived the connection that was sending it")
    }

    /// A served file's whole-file head goes to nghttp3 uncopied, to be read when the HEADERS
    /// frame is encoded at a later write: the file's reader keeps it, and the resident body
    /// holds the reader until the stream closes, however soon everything else lets go.
    @Test func aWholeFileHeadLivesWithItsReaderUntilTheStreamCloses() throws {
        let served = Served()
        weak var heldFields: HTTP3FieldArray?
        weak var released: HTTP3FileReader?
        do {
            let reader = try Self.residentReader(Array(repeating: 0x62, count: 3_000))
            released = reader
            let file = HTTP3ServedFile(reader: reader, contentType: "application/x-held")
            heldFields = file.wholeFile.encoded
            served.head = file.wholeFile
            served.region = HTTP3FileRegion(reader: reader, range: 0..<3_000)
        }
        let (pair, client, _) = try HTTP3CodecTests.makePair(seed: 7) { server, event in
            switch event {
            case .headers(let stream, _, false):
                guard let head = served.head, let region = served.region else { return }
                try? server.submitResponse(streamID: stream, headers: HTTP3ResponseFieldSection(.prepared(head)), body: nil, file: region)
                served.submitted += 1
            case .closed(let stream, _):
                served.closed.insert(stream)
            default:
                break
            }
        }
        try pair.run(until: { pair.client.isHandshakeCompleted })
        let stream = try #require(try client.submitRequest(headers: HTTP3CodecTests.request("/held"), body: nil))
        var contentType: String?
        var body: [UInt8] = []
        var heldInFlight: Bool?
        try pair.run(until: {
            if served.submitted == 1, heldInFlight == nil {
                // Submitted, and possibly not yet encoded: from now on only the codec holds on.
                served.head = nil
                served.region = nil
                heldInFlight = heldFields != nil
            }
            for event in client.takeEvents() {
                if case .headers(stream, let fields, false) = event {
                    contentType = fields.pairs.first { $0.name == "content-type" }?.value
                }
                if case .data(stream, let chunk) = event { body += chunk }
            }
            return served.closed.contains(stream)
        })
        #expect(contentType == "application/x-held")
        #expect(body == Array(repeating: 0x62, count: 3_000))
        #expect(heldInFlight == true, "the response's head was let go while its stream was open")
        #expect(heldFields == nil && released == nil, "the head and its reader outlived the stream")
    }
}
