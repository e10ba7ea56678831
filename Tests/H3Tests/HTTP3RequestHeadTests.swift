import Foundation
@testable import H3
import HTTPTypes
import Testing

/// A received request keeps its field section and builds its `HTTPRequest` only when asked:
/// what the file handler reads from the section must be what the built head says.
@Suite("HTTP3 request head from the field section")
struct HTTP3RequestHeadTests {
    static let section: [(name: String, value: String)] = [
        (":method", "GET"), (":scheme", "https"), (":authority", "example.com:4433"), (":path", "/a/b.txt?x=1"),
        ("user-agent", "test/1"), ("range", "bytes=0-1"), ("accept", "text/plain"), ("range", "bytes=4-5"),
        ("priority", "u=1, i"),
    ]

    @Test func theSectionReadsAsTheHeadItBuilds() throws {
        let source = try #require(HTTP3RequestHeadSource(fields: HTTP3ReceivedFields(Self.section)))
        let head = source.head
        #expect(head.method == .get && source.method == .get)
        #expect(head.scheme == "https" && head.authority == "example.com:4433")
        #expect(source.path == head.path && source.path == "/a/b.txt?x=1")
        #expect(head.headerFields.map(\.name.canonicalName) == ["user-agent", "range", "accept", "range", "priority"])
        // Repeated fields are joined as HTTPFields joins them.
        #expect(source[.range] == head.headerFields[.range] && source[.range] == "bytes=0-1, bytes=4-5")
        #expect(source[.userAgent] == "test/1" && source[.cookie] == nil)
        #expect(source.head == head, "a second read gives the same head")
        let request = HTTP3ServerRequest(source: source, body: .empty, streamID: 4)
        #expect(request.priority == HTTPPriority(urgency: 1, incremental: true))
        #expect(request.method == .get && request.path == head.path)
        #expect(request.headerField(.range) == "bytes=0-1, bytes=4-5" && request.headerField(.cookie) == nil)
        #expect(request.authority == head.authority)
        #expect(Self.fieldsVisited(request) == head.headerFields.map { "\($0.name.canonicalName): \($0.value)" })
        #expect(request.head == head)
    }

    /// What `forEachHeaderField` hands over, in order, as `name: value` lines.
    static func fieldsVisited(_ request: HTTP3ServerRequest) -> [String] {
        var visited: [String] = []
        request.forEachHeaderField { name, value in visited.append("\(name): \(value)") }
        return visited
    }

    @Test func aHeadTheCallerBuiltAnswersTheSame() throws {
        let fromSection = try #require(HTTP3RequestHeadSource(fields: HTTP3ReceivedFields(Self.section)))
        let built = HTTP3RequestHeadSource(fromSection.head)
        #expect(built.method == fromSection.method && built.path == fromSection.path)
        #expect(built[.range] == fromSection[.range] && built.head == fromSection.head)
        #expect(built.authority == fromSection.authority && built.authority == "example.com:4433")
        let requests = [fromSection, built].map { HTTP3ServerRequest(source: $0, body: .empty, streamID: 0) }
        #expect(Self.fieldsVisited(requests[0]) == Self.fieldsVisited(requests[1]) && Self.fieldsVisited(requests[1]).count == 5)
    }

    @Test(arguments: [
        [(":scheme", "https"), (":path", "/")],  // no :method (RFC 9114 §4.3.1)
        [(":method", "G E T"), (":path", "/")],  // not a method token
    ] as [[(String, String)]])
    func aSectionWithoutAValidMethodIsMalformed(fields: [(String, String)]) {
        #expect(HTTP3RequestHeadSource(fields: HTTP3ReceivedFields(fields.map { (name: $0.0, value: $0.1) })) == nil)
    }

    @Test func aFileIsServedFromTheSectionAsFromABuiltHead() throws {
        let handler = HTTP3FileHandler(root: try HTTP3FileHandlerTests.makeRoot().root.path)
        let section: [(name: String, value: String)] = [(":method", "GET"), (":scheme", "https"), (":path", "/ten.txt"), ("range", "bytes=2-4")]
        let fromSection = handler.respond(
            to: HTTP3ServerRequest(source: try #require(HTTP3RequestHeadSource(fields: HTTP3ReceivedFields(section))), body: .empty, streamID: 0)
        )
        let fromHead = HTTP3FileHandlerTests.get(handler, "/ten.txt", range: "bytes=2-4")
        #expect(fromSection.head == fromHead.head && fromSection.head.status == .partialContent)
        #expect(try HTTP3FileHandlerTests.bodyBytes(fromSection) == Array("234".utf8))
    }

    /// The file handler looks a received path up by its bytes, with no string made of it: with
    /// or without a query, on the first lookup and on one that finds it kept, it serves what a
    /// built head's path gets; a section without `:path` has no bytes to look up.
    @Test func aReceivedPathIsLookedUpByItsBytes() throws {
        let handler = HTTP3FileHandler(root: try HTTP3FileHandlerTests.makeRoot().root.path, openFileReuse: .seconds(3600))
        func serve(_ path: String) throws -> HTTP3ServerResponse {
            let section: [(name: String, value: String)] = [(":method", "GET"), (":scheme", "https"), (":path", path)]
            let source = try #require(HTTP3RequestHeadSource(fields: HTTP3ReceivedFields(section)))
            #expect(source.withPathBytes { String(decoding: $0, as: UTF8.self) } == path)
            return handler.respond(to: HTTP3ServerRequest(source: source, body: .empty, streamID: 0))
        }
        for path in ["/ten.txt", "/ten.txt?v=2", "/ten.txt", "/docs/", "/docs/?q=1"] {
            let received = try serve(path)
            let built = HTTP3FileHandlerTests.get(handler, path)
            #expect(received.head == built.head, "\(path)")
            #expect(try HTTP3FileHandlerTests.bodyBytes(received) == HTTP3FileHandlerTests.bodyBytes(built), "\(path)")
        }
        #expect(try serve("/missing.txt").head.status == .notFound)
        let noPath = try #require(HTTP3RequestHeadSource(fields: HTTP3ReceivedFields([(":method", "GET"), (":scheme", "https")])))
        #expect(noPath.withPathBytes { $0.count } == nil && noPath.path == nil)
    }
}
