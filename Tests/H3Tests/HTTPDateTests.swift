@testable import H3
import Testing

@Suite("HTTPDate")
struct HTTPDateTests {
    /// RFC 9110 §5.6.7's own example, in each of the forms it names.
    @Test func formatsAndReadsTheRFCExample() {
        let seconds = 784_111_777  // Sun, 06 Nov 1994 08:49:37 GMT
        #expect(HTTPDate.imfFixdate(seconds) == "Sun, 06 Nov 1994 08:49:37 GMT")
        #expect(HTTPDate.rfc3339(seconds) == "1994-11-06T08:49:37Z")
        #expect(HTTPDate.commonLogFormat(seconds) == "06/Nov/1994:08:49:37 +0000")
        #expect(HTTPDate.seconds(parsing: "Sun, 06 Nov 1994 08:49:37 GMT") == seconds)
        #expect(HTTPDate.seconds(parsing: "Sunday, 06-Nov-94 08:49:37 GMT") == seconds)
        #expect(HTTPDate.seconds(parsing: "Sun Nov  6 08:49:37 1994") == seconds)
    }

    @Test(arguments: ["", "yesterday", "Sun, 31 Feb 1994 08:49:37 GMT", "Sun, 06 Nov 1994 25:49:37 GMT", "Sun, 06 Foo 1994 08:49:37 GMT", "Sun, 06 Nov 1994 08:49 GMT"])
    func refusesWhatIsNoDate(text: String) {
        #expect(HTTPDate.seconds(parsing: Substring(text)) == nil)
    }
}
