import RawStructuredFieldValues

/// An HTTP priority (RFC 9218): urgency 0 (most urgent) to 7, and whether the response can be
/// used incrementally. The default, as in URLSession, is `u=3` and not incremental.
public struct HTTPPriority: Hashable, Sendable, CustomStringConvertible {
    /// Urgency 3, not incremental: what a request without a `priority` field gets (RFC 9218 §4).
    public static let `default` = HTTPPriority()
    /// The valid urgencies, 0 through 7 (RFC 9218 §4.1).
    public static let urgencyRange = 0...7

    /// 0 (most urgent) to 7 (least).
    public var urgency: Int
    /// Whether a response with this priority can be processed piece by piece and so shares
    /// bandwidth with others of the same urgency (RFC 9218 §4.2).
    public var incremental: Bool

    /// Values outside 0...7 are clamped.
    public init(urgency: Int = 3, incremental: Bool = false) {
        self.urgency = min(max(urgency, Self.urgencyRange.lowerBound), Self.urgencyRange.upperBound)
        self.incremental = incremental
    }

    /// Parses a `priority` field value, a structured dictionary (RFC 9218 §4). Members that are
    /// unknown, of the wrong type or out of range are ignored, as the RFC requires; a value that
    /// does not parse at all gives the default.
    public init(fieldValue: String) {
        self.init()
        var parser = StructuredFieldValueParser(Array(fieldValue.utf8))
        guard let dictionary = try? parser.parseDictionaryFieldValue() else { return }
        for (key, member) in dictionary {
            guard case .item(let item) = member else { continue }
            switch (key, item.rfc9651BareItem) {
            case ("u", .integer(let value)) where Self.urgencyRange.contains(Int(value)):
                urgency = Int(value)
            case ("i", .bool(let value)):
                incremental = value
            default:
                continue
            }
        }
    }

    /// The `priority` field value: `u=N`, plus `, i` when incremental.
    public var fieldValue: String { incremental ? "u=\(urgency), i" : "u=\(urgency)" }

    public var description: String { fieldValue }
}
