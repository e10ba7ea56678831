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
        guard let file = resolve(request.head.path ?? "/"), let reader = HTTP3FileReader(path: file.path) else {
            return HTTP3ServerResponse(status: .notFound, body: Array("not found\n".utf8))
        }
        let size = reader.size
        var fields = HTTPFields()
        fields[.contentType] = Self.contentType(for: file.pathExtension)
        fields[.acceptRanges] = "bytes"
        var status = HTTPResponse.Status.ok
        var range = 0..<size
        if let rangeText = request.head.headerFields[.range] {
            switch Self.byteRange(rangeText, length: size) {
            case .satisfiable(let requested):
                status = .partialContent
                fields[.contentRange] = "bytes \(requested.lowerBound)-\(requested.upperBound - 1)/\(size)"
                range = requested
            case .unsatisfiable:
                fields[.contentRange] = "bytes */\(size)"
                return HTTP3ServerResponse(status: .rangeNotSatisfiable, headerFields: fields)
            case .ignored:
                break
            }
        }
        fields[.contentLength] = "\(range.count)"
        var response = HTTP3ServerResponse(status: status, headerFields: fields)
        guard method == .get else { return response }
        if range.count <= Self.inMemoryLimit {
            response.body = (try? reader.read(range)) ?? []
        } else {
            // Large files stream from disk, read only as fast as the client takes them.
            response.bodyStream = reader.chunks(of: range, size: Self.chunkSize)
        }
        return response
    }

    /// Files up to this size are read whole; larger ones stream.
    static let inMemoryLimit = 1 << 20
    static let chunkSize = 256 << 10

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

/// An open file read by position (`pread`), closed when the last reference goes.
// @unchecked Sendable: the descriptor is only read with pread, which is safe from any thread.
final class HTTP3FileReader: @unchecked Sendable {
    let descriptor: Int32
    let size: Int

    init?(path: String) {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return nil }
        var info = stat()
        guard fstat(descriptor, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG else {
            close(descriptor)
            return nil
        }
        self.descriptor = descriptor
        self.size = Int(info.st_size)
    }

    deinit { close(descriptor) }

    func read(_ range: Range<Int>) throws -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: range.count)
        var done = 0
        while done < range.count {
            let n = bytes.withUnsafeMutableBytes { buffer in
                pread(descriptor, buffer.baseAddress! + done, range.count - done, off_t(range.lowerBound + done))
            }
            guard n > 0 else { throw CocoaError(.fileReadUnknown) }
            done += n
        }
        return bytes
    }

    /// The range as a stream of chunks, each read when the consumer asks for it.
    func chunks(of range: Range<Int>, size chunkSize: Int) -> AsyncThrowingStream<[UInt8], any Error> {
        var offset = range.lowerBound
        return AsyncThrowingStream(unfolding: { [self] in
            guard offset < range.upperBound else { return nil }
            let end = min(offset + chunkSize, range.upperBound)
            let chunk = try self.read(offset..<end)
            offset = end
            return chunk
        })
    }
}
