@testable import H3
import HTTPTypes
import Testing

/// A response keeps its parts behind one reference that copies share until one of them
/// changes: it must still behave as a value, each part set on its own.
@Suite("HTTP3ServerResponse")
struct HTTP3ServerResponseTests {
    @Test func partsSetOneAtATimeKeepTheOthersAndCopiesStayApart() async throws {
        var response = HTTP3ServerResponse(status: .ok, body: Array("head".utf8))
        #expect(response.priority == nil && response.trailers == nil && response.bodyStream == nil && !response.hasBodyStream)

        let (stream, continuation) = AsyncThrowingStream.makeStream(of: [UInt8].self)
        continuation.yield(Array("tail".utf8))
        continuation.finish()
        response.bodyStream = stream
        response.priority = HTTPPriority(urgency: 1, incremental: true)
        let checksum = HTTPField.Name("x-checksum")!
        var trailers = HTTPFields()
        trailers[checksum] = "abc"
        response.trailers = trailers
        let copy = response

        response.priority = HTTPPriority(urgency: 6, incremental: false)
        response.trailers?[checksum] = "def"
        #expect(response.priority == HTTPPriority(urgency: 6, incremental: false))
        #expect(response.trailers?[checksum] == "def" && response.hasBodyStream)
        // The copy kept what the response had when it was taken.
        #expect(copy.priority == HTTPPriority(urgency: 1, incremental: true))
        #expect(copy.trailers?[checksum] == "abc" && copy.hasBodyStream)
        var pieces: [[UInt8]] = []
        for try await piece in try #require(copy.bodyStream) { pieces.append(piece) }
        #expect(pieces == [Array("tail".utf8)])

        response.bodyStream = nil
        #expect(!response.hasBodyStream && response.bodyStream == nil && response.priority?.urgency == 6)
        #expect(response.body == Array("head".utf8))
    }

    /// A body built piece by piece grows where it is, as a stored array would: a copy per
    /// append would make building one quadratic.
    @Test func appendingToTheBodyDoesNotCopyIt() {
        var response = HTTP3ServerResponse(status: .ok)
        response.body.reserveCapacity(64)
        let base = response.body.withUnsafeBufferPointer { $0.baseAddress }
        // Checked after every append: a copy's buffer may take a freed one's address again.
        var moves = 0
        for byte in 0..<32 {
            response.body.append(UInt8(byte))
            if response.body.withUnsafeBufferPointer({ $0.baseAddress }) != base { moves += 1 }
        }
        #expect(moves == 0)
        #expect(response.body == (0..<32).map(UInt8.init))
    }

    @Test func headAndBodyChangedOnACopyLeaveTheOriginal() {
        let original = HTTP3ServerResponse(status: .ok, headerFields: [.contentType: "text/plain"], body: Array("one".utf8))
        var copy = original
        copy.body.append(contentsOf: Array(" two".utf8))
        copy.head.status = .created
        copy.head.headerFields[.contentType] = "text/html"
        #expect(copy.body == Array("one two".utf8) && copy.head.status == .created)
        #expect(copy.head.headerFields[.contentType] == "text/html")
        #expect(original.body == Array("one".utf8) && original.head.status == .ok)
        #expect(original.head.headerFields[.contentType] == "text/plain")
    }
}
