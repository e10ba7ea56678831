import Foundation
import HTTPTypes

/// Serves the files under one directory (RFC 9110 semantics over HTTP/3): GET and HEAD with
/// `content-length` and `content-type`, a single byte range (RFC 9110 §14), 404 for what is not
/// there, 405 for other methods, and nothing outside the root, whatever `..` or symlinks say.
public struct HTTP3FileHandler: Sendable {
    public let root: URL

    public init(root: String) {
        self.root = URL(fileURLWithPath: root).standardizedFileURL.resolvingSymlinksInPath()
    }

    public func respond(to request: HTTP3ServerRequest) -> HTTP3ServerResponse {
        let method = request.head.method
        guard method == .get || method == .head else {
            var fields = HTTPFields()
            fields[.allow] = "GET, HEAD"
            return HTTP3ServerResponse(status: .methodNotAllowed, headerFields: fields, body: Array("method not allowed\n".utf8))
        }
        guard let file = resolve(request.head.path ?? "/") else {
            return HTTP3ServerResponse(status: .notFound, body: Array("not found\n".utf8))
        }
        guard let contents = FileManager.default.contents(atPath: file.path) else {
            return HTTP3ServerResponse(status: .notFound, body: Array("not found\n".utf8))
        }
        var fields = HTTPFields()
        fields[.contentType] = Self.contentType(for: file.pathExtension)
        fields[.acceptRanges] = "bytes"
        var status = HTTPResponse.Status.ok
        var body = contents
        if let rangeText = request.head.headerFields[.range] {
            switch Self.byteRange(rangeText, length: contents.count) {
            case .satisfiable(let range):
                status = .partialContent
                fields[.contentRange] = "bytes \(range.lowerBound)-\(range.upperBound - 1)/\(contents.count)"
                body = contents.subdata(in: range)
            case .unsatisfiable:
                fields[.contentRange] = "bytes */\(contents.count)"
                return HTTP3ServerResponse(status: .rangeNotSatisfiable, headerFields: fields)
            case .ignored:
                break
            }
        }
        fields[.contentLength] = "\(body.count)"
        return HTTP3ServerResponse(status: status, headerFields: fields, body: method == .head ? [] : Array(body))
    }

    /// The file a request path names, or nil when it would leave the root or is not a regular file.
    func resolve(_ path: String) -> URL? {
        let withoutQuery = path.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false).first.map(String.init) ?? "/"
        guard let decoded = withoutQuery.removingPercentEncoding, !decoded.contains("\0") else { return nil }
        var candidate = root.appendingPathComponent(decoded).standardizedFileURL
        var isDirectory: ObjCBool = false
        if FileManager.default.fileExists(atPath: candidate.path, isDirectory: &isDirectory), isDirectory.boolValue {
            candidate.appendPathComponent("index.html")
        }
        let resolved = candidate.resolvingSymlinksInPath()
        let rootPath = root.path.hasSuffix("/") ? root.path : root.path + "/"
        guard resolved.path.hasPrefix(rootPath) else { return nil }
        guard FileManager.default.fileExists(atPath: resolved.path, isDirectory: &isDirectory), !isDirectory.boolValue else { return nil }
        return resolved
    }

    enum RangeOutcome: Equatable {
        case satisfiable(Range<Int>)
        case unsatisfiable
        /// Not a single byte range we understand: serve the whole file (RFC 9110 §14.2 allows it).
        case ignored
    }

    /// Parses one `bytes=first-last`, `bytes=first-` or `bytes=-suffix` range.
    static func byteRange(_ text: String, length: Int) -> RangeOutcome {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        guard trimmed.lowercased().hasPrefix("bytes="), !trimmed.contains(",") else { return .ignored }
        let spec = trimmed.dropFirst("bytes=".count)
        let parts = spec.split(separator: "-", maxSplits: 1, omittingEmptySubsequences: false)
        guard parts.count == 2 else { return .ignored }
        let first = parts[0].trimmingCharacters(in: .whitespaces)
        let last = parts[1].trimmingCharacters(in: .whitespaces)
        if first.isEmpty {
            guard let suffix = Int(last), suffix > 0 else { return .ignored }
            guard length > 0 else { return .unsatisfiable }
            return .satisfiable(max(0, length - suffix)..<length)
        }
        guard let start = Int(first), start >= 0 else { return .ignored }
        guard start < length else { return .unsatisfiable }
        if last.isEmpty { return .satisfiable(start..<length) }
        guard let end = Int(last), end >= start else { return .ignored }
        return .satisfiable(start..<min(end + 1, length))
    }

    static func contentType(for pathExtension: String) -> String {
        switch pathExtension.lowercased() {
        case "html", "htm": return "text/html; charset=utf-8"
        case "txt": return "text/plain; charset=utf-8"
        case "css": return "text/css"
        case "js": return "text/javascript"
        case "json": return "application/json"
        case "png": return "image/png"
        case "jpg", "jpeg": return "image/jpeg"
        case "gif": return "image/gif"
        case "svg": return "image/svg+xml"
        case "wasm": return "application/wasm"
        default: return "application/octet-stream"
        }
    }
}
