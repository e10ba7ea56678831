import H3
import HTTPTypes
import Hummingbird

extension Request {
    /// The priority the client asked for in its `priority` field (RFC 9218 §4), or the
    /// default (urgency 3, not incremental). Over HTTP/3 and over TCP alike.
    public var priority: HTTPPriority {
        headers[.priority].map(HTTPPriority.init(fieldValue:)) ?? .default
    }
}

extension Response {
    /// Sets the priority the server gives this response (RFC 9218 §8), sent as the `priority`
    /// field (§5). Over HTTP/3 the server schedules the response by it instead of by the
    /// client's; over TCP it only informs the client and intermediaries.
    public mutating func setPriority(_ priority: HTTPPriority) {
        headers[.priority] = priority.fieldValue
    }
}
