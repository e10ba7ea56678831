
/// An `Alt-Svc` field value: a list of alternatives, or `clear` (RFC 7838 §3).
public enum AltServiceFieldValue: Hashable, Sendable {
    /// Forget every alternative cached for the origin.
    case clear
    /// The alternatives the origin offers, in the order the field lists them.
    case alternatives([AltService])

    /// Parses an `Alt-Svc` field value. Unknown parameters are ignored; anything malformed is
    /// an `AltServiceParseError` that says where and why, never a crash.
    public init(parsing text: String) throws {
        var parser = AltServiceParser(Array(text.utf8))
        self = try parser.parseFieldValue()
    }
}
