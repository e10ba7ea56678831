
/// Why an `Alt-Svc` value did not parse, and at which byte.
public struct AltServiceParseError: Error, Hashable, Sendable, CustomStringConvertible {
    /// What was wrong, in words.
    public let reason: String
    /// The byte offset into the UTF-8 field value at which parsing stopped.
    public let offset: Int
    public var description: String { "invalid Alt-Svc value at byte \(offset): \(reason)" }
}
