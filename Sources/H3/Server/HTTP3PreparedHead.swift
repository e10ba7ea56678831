import CQuicShims
import HTTPTypes

/// A response head made once and encoded once for HTTP/3, shared by every response that
/// carries it (a served file's 200, `HTTP3ServedFile`).
final class HTTP3PreparedHead: Sendable {
    let response: HTTPResponse
    let encoded: HTTP3FieldArray

    init(_ response: HTTPResponse) {
        self.response = response
        encoded = HTTP3FieldArray(HTTP3ResponseFieldSection(.given(response)))
    }
}
