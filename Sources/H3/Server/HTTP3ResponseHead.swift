import CQuicShims
import HTTPTypes

/// A response's head: one given (or changed) by a handler, or one made ahead of time.
enum HTTP3ResponseHead: Sendable {
    case given(HTTPResponse)
    /// Made and encoded once, shared by reference: copying the response then retains one
    /// object for its head, not the head's every part.
    case prepared(HTTP3PreparedHead)

    var response: HTTPResponse {
        switch self {
        case .given(let response): response
        case .prepared(let prepared): prepared.response
        }
    }
}
