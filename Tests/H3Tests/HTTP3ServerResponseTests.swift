@testable import H3
import HTTPTypes
import Testing

/// A response keeps its rarely set parts (body stream, priority, trailers) in one shared box
/// that each change replaces: it must still behave as a value, each part set on its own.
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
}
