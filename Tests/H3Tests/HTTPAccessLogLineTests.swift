@testable import H3
import HTTPTypes
import NIOCore
import NIOEmbedded
import Testing

@Suite("HTTPAccessLogLine")
struct HTTPAccessLogLineTests {
    @Test func aRequestIsOneCombinedLogFormatLineWithTimeAndPriority() throws {
        var head = HTTPRequest(method: .get, scheme: "https", authority: "h", path: "/a.html?q=1")
        head.headerFields[.userAgent] = "curl/8.5 \"quoted\""
        head.headerFields[.priority] = "u=0, i"
        let request = HTTP3ServerRequest(
            head: head, body: [], trailers: nil, origin: HTTPServerRequestOrigin(
                protocolVersion: "HTTP/2.0", remote: try SocketAddress(ipAddress: "::1", port: 50_000), local: nil,
                eventLoop: EmbeddedEventLoop()
            )
        )
        let response = HTTP3ServerResponse(status: .ok, body: Array("hello".utf8))
        let line = HTTPAccessLogLine.make(request: request, response: response, elapsed: .microseconds(123), time: 784_111_777)
        #expect(line == "::1 - - [06/Nov/1994:08:49:37 +0000] \"GET /a.html?q=1 HTTP/2.0\" 200 5 \"-\" \"curl/8.5 \\x22quoted\\x22\" rt=0.000123 priority=\"u=0, i\"\n")
    }

    @Test func unknownPartsAreDashesAndHeadSendsNoBody() {
        let request = HTTP3ServerRequest(head: HTTPRequest(method: .head, scheme: "https", authority: "h", path: "/a\"b"))
        let response = HTTP3ServerResponse(status: .ok, body: Array("hello".utf8))
        let line = HTTPAccessLogLine.make(request: request, response: response, elapsed: .seconds(2), time: 0)
        #expect(line == "- - - [01/Jan/1970:00:00:00 +0000] \"HEAD /a\\x22b HTTP/3\" 200 0 \"-\" \"-\" rt=2.000000 priority=-\n")
    }
}
