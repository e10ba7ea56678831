#if canImport(Glibc)
import Glibc
#endif
import HTTPTypes
import QuicTransport

/// One request as an access log line: the Combined Log Format of Apache and nginx, then two
/// fields of our own, so that any log analyser reads the line and a reader of this server also
/// sees its time and priority:
///
///     127.0.0.1 - - [10/Oct/2000:13:55:36 +0000] "GET /a.html HTTP/3" 200 2326 "-" "curl/8.5" rt=0.000123 priority="u=0, i"
///
/// - The client's address, `-` for identity and user, the time (UTC), the request line with the
///   version that carried it (`HTTP/3`, `HTTP/2.0`, `HTTP/1.1`), the status, and the body bytes
///   the response sends (0 for HEAD and 304; `-` for a streamed body of unknown length).
/// - `"referer"` and `"user-agent"`, `-` when absent.
/// - `rt=`: the seconds the handler took to produce the response (as nginx's `$request_time`
///   with microseconds; the sending of the body is not counted).
/// - `priority=`: the request's `priority` field (RFC 9218 §5) as the client sent it, quoted,
///   or `-` when it sent none (the default, `u=3`, applies).
///
/// Quotes, backslashes and control bytes in the quoted fields are written `\x22`-style, as
/// nginx escapes them, so a request cannot forge a line or a field.
package enum HTTPAccessLogLine {
    /// The line for `request` and its `response`, produced in `elapsed`, logged at `time`
    /// (seconds since 1970), with its newline.
    package static func make(
        request: HTTP3ServerRequest, response: HTTP3ServerResponse, elapsed: Duration, time: Int
    ) -> String {
        let path = request.path ?? "/"
        let quoted = { (value: String?) in value.map { "\"" + escaped($0) + "\"" } ?? "\"-\"" }
        let requestLine = "\(request.method.rawValue) \(path) \(request.protocolVersion)"
        let priority = request.headerField(.priority).map { "\"" + escaped($0) + "\"" } ?? "-"
        return (request.remoteAddress ?? "-") + " - - [" + HTTPDate.commonLogFormat(time) + "] \"" + escaped(requestLine) + "\" "
            + String(response.head.status.code) + " " + bodyBytes(request: request, response: response) + " "
            + quoted(request.headerField(.referer)) + " " + quoted(request.headerField(.userAgent))
            + " rt=" + seconds(elapsed) + " priority=" + priority + "\n"
    }

    /// The body bytes the response sends: its `content-length` for a file or a stream (HTTP/3
    /// sends files without reading them through the handler), else the bytes it holds.
    static func bodyBytes(request: HTTP3ServerRequest, response: HTTP3ServerResponse) -> String {
        let status = response.head.status
        if request.method == .head || status == .notModified || status == .noContent { return "0" }
        if response.file != nil || response.bodyStream != nil { return response.head.headerFields[.contentLength] ?? "-" }
        return String(response.bodyByteCount)
    }

    /// `duration` in seconds with six decimals.
    static func seconds(_ duration: Duration) -> String {
        let (whole, attoseconds) = duration.components
        let micro = String(attoseconds / 1_000_000_000_000)
        return String(whole) + "." + String(repeating: "0", count: max(0, 6 - micro.count)) + micro
    }

    /// `text` with `"`, `\` and bytes outside printable ASCII as `\xHH` (nginx's log escaping).
    static func escaped(_ text: String) -> String {
        guard text.utf8.contains(where: { $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\\") || $0 < 0x20 || $0 > 0x7e })
        else { return text }
        var out = ""
        for byte in text.utf8 {
            if byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") || byte < 0x20 || byte > 0x7e {
                let hex = String(byte, radix: 16)
                out += "\\x" + (hex.count < 2 ? "0" + hex : hex)
            } else {
                out.unicodeScalars.append(Unicode.Scalar(byte))
            }
        }
        return out
    }
}
