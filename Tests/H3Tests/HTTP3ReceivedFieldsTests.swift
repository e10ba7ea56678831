@testable import H3
import CQuicShims
import HTTPTypes
import Testing

/// A received field section keeps its lines as bytes and makes strings only when read: what it
/// reads back must be what came in, in order, however the buffer grew.
@Suite("HTTP3 received field sections")
struct HTTP3ReceivedFieldsTests {
    @Test func linesReadBackInWireOrderAcrossGrowth() {
        // Well past the first 256 bytes, with empty names and values on the way.
        var pairs: [(name: String, value: String)] = [(":method", "GET"), (":path", "/")]
        for index in 0..<40 { pairs.append(("x-field-\(index)", String(repeating: "v", count: index * 7))) }
        pairs.append(("empty", ""))
        pairs.append(("ünïcode-value", "naïve ✓"))
        let fields = HTTP3ReceivedFields(pairs)
        #expect(fields.count == pairs.count && !fields.isEmpty)
        #expect(fields.pairs.map { "\($0.name)=\($0.value)" } == pairs.map { "\($0.name)=\($0.value)" })
        #expect(fields.size == pairs.reduce(0) { $0 + $1.name.utf8.count + $1.value.utf8.count + 32 })
    }

    @Test func pseudoHeadersAreFoundOnlyBeforeTheFirstRegularField() {
        let fields = HTTP3ReceivedFields([
            (":method", "GET"), (":path", "/first"), (":path", "/second"), ("accept", "*/*"), (":scheme", "https"),
        ])
        #expect(fields.firstPseudoHeader(NGHTTP3_QPACK_TOKEN__PATH).map(fields.value(of:)) == "/first", "the first of a repeated one counts")
        #expect(fields.firstPseudoHeader(NGHTTP3_QPACK_TOKEN__SCHEME) == nil, "RFC 9114 §4.3: after a regular field it is not a pseudo-header field")
        #expect(fields.firstPseudoHeader(NGHTTP3_QPACK_TOKEN__AUTHORITY) == nil)
        #expect(fields.firstPseudoHeader(NGHTTP3_QPACK_TOKEN__METHOD).map(fields.value(of:)) == "GET")
        #expect(fields.lines.map(fields.isPseudoHeader) == [true, true, true, false, true])
    }

    @Test func linesNamedFindEveryRepeat() {
        let fields = HTTP3ReceivedFields([("range", "bytes=0-1"), ("accept", "a"), ("range", "bytes=4-5"), ("ranges", "no")])
        #expect(fields.lines(named: "range").map(fields.value(of:)) == ["bytes=0-1", "bytes=4-5"])
        #expect(fields.lines(named: "cookie").isEmpty)
        // Names read back as they came (nghttp3's tokens only spare making their strings).
        #expect(fields.lines.map(fields.name(of:)) == ["range", "accept", "range", "ranges"])
    }

    /// Names are screened by length and first byte before any record is read: a name that
    /// shares its screen with one present must still be compared, and every name present must
    /// still be found, however many share a screen.
    @Test func linesNamedAgreeWithAPlainSearchWhateverTheScreen() {
        var pairs: [(name: String, value: String)] = [(":method", "GET"), (":path", "/"), ("", "empty name")]
        for index in 0..<70 { pairs.append(("x-\(index)", "\(index)")) }
        let fields = HTTP3ReceivedFields(pairs)
        // Present names, absent ones of the same lengths and first bytes, and others.
        var asked = Set(pairs.map(\.name))
        for index in 70..<140 { asked.insert("x-\(index)") }
        asked.formUnion(["range", "cookie", ":authority", "y-1", "x-", ""])
        for name in asked {
            let expected = pairs.filter { $0.name == name }.map(\.value)
            #expect(fields.lines(named: name).map(fields.value(of:)) == expected, "\(name)")
        }
        #expect(HTTP3ReceivedFields().lines(named: "range").isEmpty)
    }

    /// The quick test never says a present name is absent, and rules out `range` for a usual
    /// request head (what a request's field lookup asks first).
    @Test func mayContainNeverMissesAPresentName() {
        let request = HTTP3ReceivedFields([
            (":method", "GET"), (":scheme", "https"), (":authority", "localhost"), (":path", "/"),
            ("user-agent", "h3load"), ("accept", "*/*"),
        ])
        #expect(!request.mayContain("range"))
        #expect(request.mayContain(":path") && request.mayContain("user-agent") && request.mayContain("accept"))
        let ranged = HTTP3ReceivedFields([(":method", "GET"), (":path", "/"), ("range", "bytes=0-1")])
        #expect(ranged.mayContain("range"))
        #expect(!HTTP3ReceivedFields().mayContain("range"))
    }

    /// A response's fields as the client hands them out: the regular lines in wire order,
    /// repeats and cookies kept apart, a name nghttp3 gave a token read as that token's name,
    /// and a line whose name is no valid field name dropped.
    @Test func regularLinesBecomeHTTPFieldsInWireOrder() {
        var fields = HTTP3ReceivedFields()
        func append(_ name: String, _ value: String, token: Int32 = -1) {
            var name = name, value = value
            name.withUTF8 { name in value.withUTF8 { fields.append(name: name, value: $0, token: token) } }
        }
        append(":status", "200", token: Int32(NGHTTP3_QPACK_TOKEN__STATUS.rawValue))
        append("set-cookie", "a=1", token: Int32(NGHTTP3_QPACK_TOKEN_SET_COOKIE.rawValue))
        append("x-trace", "one")
        append("cookie", "b=2; c=3", token: Int32(NGHTTP3_QPACK_TOKEN_COOKIE.rawValue))
        append("bad name", "dropped")
        append("set-cookie", "d=4", token: Int32(NGHTTP3_QPACK_TOKEN_SET_COOKIE.rawValue))
        // The token decides the name, as nghttp3's tokens stand for exactly these bytes.
        append("content-length", "7", token: Int32(NGHTTP3_QPACK_TOKEN_CONTENT_LENGTH.rawValue))
        append("x-trace", "two")
        let http = HTTPFields(fields)
        #expect(http.map { "\($0.name.canonicalName)=\($0.value)" } == [
            "set-cookie=a=1", "x-trace=one", "cookie=b=2; c=3", "set-cookie=d=4", "content-length=7", "x-trace=two",
        ])
        #expect(http[values: .setCookie] == ["a=1", "d=4"])
        #expect(http[.contentLength] == "7")
        #expect(HTTPFields(HTTP3ReceivedFields()).isEmpty)
    }

    @Test func linesPastTheLimitAreCountedButNotKept() {
        var fields = HTTP3ReceivedFields()
        let value = Array(repeating: UInt8(ascii: "a"), count: 100)
        for _ in 0..<5 {
            "x-big".utf8.withContiguousStorageIfAvailable { name in
                value.withUnsafeBufferPointer { fields.append(name: name, value: $0, token: -1, keepingWithin: 300) }
            }
        }
        #expect(fields.count == 2, "137 bytes a line: two fit within 300")
        #expect(fields.size == 5 * 137, "RFC 9114 §4.2.2 counts the whole section, kept or not")
    }
}
