/// Trimming that needs no Foundation. The stack imports FoundationEssentials only, which keeps
/// libFoundation and ICU (about 6 MiB of resident code) out of a server's memory, and
/// `trimmingCharacters(in:)` and `CharacterSet` live in Foundation.
extension StringProtocol {
    /// Without the leading and trailing characters that `isTrimmed` picks.
    package func trimming(while isTrimmed: (Character) -> Bool) -> SubSequence {
        guard let first = firstIndex(where: { !isTrimmed($0) }), let last = lastIndex(where: { !isTrimmed($0) }) else {
            return self[endIndex...]
        }
        return self[first...last]
    }

    /// Without leading and trailing ASCII whitespace: HTTP's optional whitespace (SP and HTAB,
    /// RFC 9110 §5.6.3), and the CR, LF, VT and FF of text files and pasted values.
    package func trimmingASCIIWhitespace() -> SubSequence {
        trimming { $0.isASCII && $0.isWhitespace }
    }
}
