#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import CQuicShims
import HTTPTypes
import Logging
import NIOConcurrencyHelpers
import NIOCore
import QuicTransport
import Synchronization

/// A received final response head (RFC 9114 §4.3.2), read from its field section as it came:
/// the status when the response arrives, the whole `HTTPResponse` only when asked for.
/// Building its `HTTPFields` is a large part of a small response's cost, which a caller that
/// reads only the status (a load generator, a health check) never needs.
///
/// The head, once built, is kept under a lock: callers may read it from any thread.
final class HTTP3ResponseHeadSource: Sendable {
    let status: HTTPResponse.Status
    /// The field section in wire order, `:status` included (`HTTPFields(_:)` leaves the
    /// pseudo-header fields out).
    private let fields: HTTP3ReceivedFields
    private let builtHead = Mutex<HTTPResponse?>(nil)

    init(status: HTTPResponse.Status, fields: HTTP3ReceivedFields) {
        self.status = status
        self.fields = fields
    }

    var head: HTTPResponse {
        builtHead.withLock { head in
            if let head { return head }
            let made = HTTPResponse(status: status, headerFields: HTTPFields(fields))
            head = made
            return made
        }
    }

    /// The values of the fields named `name` (lowercase, as HTTP/3 sends names, RFC 9114
    /// §4.2), joined by ", " as `HTTPFields` joins them; nil when there is none. Reads the
    /// field section without building the head.
    func value(ofFieldNamed name: String) -> String? {
        let lines = fields.lines(named: name)
        guard !lines.isEmpty else { return nil }
        return lines.map { fields.value(of: $0) }.joined(separator: ", ")
    }
}
