import H3
import HTTPTypes
import QuicTestSupport
import Testing

/// A HEAD response carries no content (RFC 9110 §9.3.2), whatever the handler returns: content
/// there is a malformed response (RFC 9114 §4.1.2), over which the client's nghttp3 closed the
/// whole connection and every request on it.
@Suite("HTTP/3 HEAD responses", .timeLimit(TestEnvironment.minutes(2)))
struct HTTP3HeadResponseTests {
    @Test(arguments: ["bytes", "stream"])
    func aHandlersContentIsLeftOutOfAHeadResponse(_ kind: String) async throws {
        let content = Array("content a HEAD response must not carry\n".utf8)
        let (server, port, identity) = try await HTTP3LoopbackTests.startServer { _ in
            var response = HTTP3ServerResponse(status: .ok, headerFields: [.contentLength: "\(content.count)"])
            if kind == "bytes" {
                response.body = content
            } else {
                response.bodyStream = AsyncThrowingStream { $0.yield(content); $0.finish() }
            }
            return response
        }
        defer { server.shutdown() }
        let client = HTTP3LoopbackTests.client(trusting: identity)
        defer { client.shutdown() }
        let head = try await client.execute(HTTPRequest(method: .head, scheme: "https", authority: "localhost:\(port)", path: "/"))
        #expect(head.head.status == .ok)
        #expect(head.head.headerFields[.contentLength] == "\(content.count)")
        #expect(try await head.body.collect().isEmpty)
        let get = try await client.execute(HTTPRequest(method: .get, scheme: "https", authority: "localhost:\(port)", path: "/"))
        #expect(try await get.body.collect() == content)
        let accepted = await server.workerStatistics().map(\.connectionsAccepted).reduce(0, +)
        #expect(accepted == 1, "HEAD and GET took \(accepted) connections")
    }
}
