import QuicTransport
import Testing

/// The trimming the stack uses instead of Foundation's `trimmingCharacters(in:)`.
@Suite("ASCII trimming")
struct ASCIITrimmingTests {
    @Test(arguments: [
        ("", ""), ("   ", ""), ("a", "a"), (" \t a b \t ", "a b"), ("\r\nvalue\r\n", "value"), ("\u{0B}\u{0C}x", "x"),
        // Not ASCII whitespace: a no-break space stays, as HTTP's OWS is only SP and HTAB.
        ("\u{A0}x\u{A0}", "\u{A0}x\u{A0}"), (" caf\u{e9} ", "caf\u{e9}"),
    ])
    func whitespaceAtTheEndsGoes(text: String, trimmed: String) {
        #expect(String(text.trimmingASCIIWhitespace()) == trimmed, "\(text.debugDescription)")
        #expect(String(Substring(text).trimmingASCIIWhitespace()) == trimmed, "\(text.debugDescription) as a Substring")
    }

    @Test func bracketsAroundAHostGo() {
        let isBracket: (Character) -> Bool = { $0 == "[" || $0 == "]" }
        #expect("[::1]".trimming(while: isBracket) == "::1")
        #expect("example.com".trimming(while: isBracket) == "example.com")
        #expect("[]".trimming(while: isBracket) == "")
    }
}
