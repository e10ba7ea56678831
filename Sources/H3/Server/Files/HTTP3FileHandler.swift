#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif
import CQuicShims
import HTTPTypes
import NIOConcurrencyHelpers
import NIOCore
import QuicTransport

/// Serves the files under one directory (RFC 9110 semantics over HTTP/3, and over HTTP/2 and
/// HTTP/1.1 through `HTTPTCPServer`): GET and HEAD with `content-length` and `content-type`,
/// validators and conditional requests (RFC 9110 §8.8, §13), a single byte range (§14), 404 for
/// what is not there, 405 for other methods, and nothing outside the root, whatever `..` or
/// symlinks say.
///
/// As a browser expects of a static server (Caddy's `file_server`, nginx): a directory is
/// served as its `index.html`, or listed when ``listsDirectories`` is on, and a directory
/// asked for without its trailing slash is redirected to it (301), so that relative links in
/// its page resolve beneath it. With ``servesPrecompressed``, `FILE.br` or `FILE.gz` beside
/// `FILE` is sent to clients that accept that coding.
public struct HTTP3FileHandler: Sendable {
    /// The served directory, standardized and with symlinks resolved.
    public var root: URL { directory.root }
    /// Fields every response carries, such as `alt-svc` (RFC 7838 §3).
    ///
    /// Shared by every copy of the handler, and safe to set while it serves: a server that
    /// learns its port only once it listens sets `alt-svc` then. Files opened before are opened
    /// again at their next request, so every later response carries the new fields.
    public var additionalFields: HTTPFields {
        get { directory.additionalFields }
        nonmutating set { directory.replaceAdditionalFields(with: newValue) }
    }
    /// The `cache-control` value every file response carries (RFC 9111 §5.2), such as
    /// `max-age=3600`; nil sends none.
    public var cacheControl: String? { directory.cacheControl }
    /// Whether a directory without `index.html` is answered with a listing of its entries (an
    /// HTML page, or JSON for `Accept: application/json`) rather than 404.
    public var listsDirectories: Bool { directory.listsDirectories }
    /// Whether a precompressed sibling (`FILE.br`, then `FILE.gz`) is served in place of `FILE`
    /// to a client whose `accept-encoding` allows it (RFC 9110 §8.4, §12.5.3). Every file
    /// response then carries `vary: accept-encoding`, whether or not the file has a sibling,
    /// so that no cache hands one client's coding to another, even once a sibling appears.
    public var servesPrecompressed: Bool { directory.servesPrecompressed }
    /// All the handler holds, so a copy of it costs one reference count.
    let directory: HTTP3RootDirectory

    /// A handler that serves the files beneath `root`, and nothing outside it.
    ///
    /// - Parameters:
    ///   - root: the directory to serve.
    ///   - openFileReuse: how long an opened file is reused for later requests of the same path
    ///     before it is looked up again, as nginx's `open_file_cache_valid`. A hit costs no
    ///     system call but the read; a file replaced on disk is seen at most this late. `.zero`
    ///     opens the file for every request.
    ///   - additionalFields: fields every response carries, such as `alt-svc`. They are built
    ///     into each opened file's fields once, so a response copies nothing to carry them.
    ///   - cacheControl: the `cache-control` value of every file response (RFC 9111 §5.2).
    ///   - listsDirectories: list a directory that has no `index.html` (``listsDirectories``).
    ///   - servesPrecompressed: serve `FILE.br` and `FILE.gz` siblings (``servesPrecompressed``).
    public init(
        root: String, openFileReuse: Duration = .seconds(1), additionalFields: HTTPFields = [:], cacheControl: String? = nil,
        listsDirectories: Bool = false, servesPrecompressed: Bool = false
    ) {
        let root = URL(fileURLWithPath: root).standardizedFileURL.resolvingSymlinksInPath()
        let options = HTTP3RootDirectory.Options(
            cacheControl: cacheControl, listsDirectories: listsDirectories, servesPrecompressed: servesPrecompressed
        )
        self.directory = HTTP3RootDirectory(root: root, reuse: openFileReuse, additionalFields: additionalFields, options: options)
    }

    /// Answers one request: the file or the one byte range asked for (206, or 416 when it cannot
    /// be satisfied, RFC 9110 §14), only the head for HEAD, 304 or 412 as its conditional fields
    /// ask (§13.2.2), 404 when there is no such file and 405 for any other method. A directory is
    /// served as its `index.html` or listed; without its trailing slash it is redirected.
    public func respond(to request: HTTP3ServerRequest) -> HTTP3ServerResponse {
        // Read from the request's field section: a file is served without building its head.
        let method = request.method
        guard method == .get || method == .head else {
            var fields = additionalFields
            fields[.allow] = "GET, HEAD"
            return HTTP3ServerResponse(status: .methodNotAllowed, headerFields: fields, body: Array("method not allowed\n".utf8))
        }
        // Opened from the `:path` bytes as they came; a request without one asks for the root.
        let found: HTTP3ServedFile?
        if let opened = request.source.withPathBytes(open(pathBytes:)) { found = opened } else { found = open("/") }
        guard var file = found else { return directoryResponse(to: request) }
        // Only a file with a precompressed sibling reads the client's codings.
        if !file.encodedVariants.isEmpty, let accepted = request.headerField(.acceptEncoding) {
            file = file.variant(accepting: accepted)
        }
        let size = file.reader.size
        let rangeField = request.headerField(.range)
        let outcome = file.validators.evaluate(
            ifMatch: request.headerField(.ifMatch), ifUnmodifiedSince: request.headerField(.ifUnmodifiedSince),
            ifNoneMatch: request.headerField(.ifNoneMatch), ifModifiedSince: request.headerField(.ifModifiedSince),
            ifRange: rangeField == nil ? nil : request.headerField(.ifRange)
        )
        var honoursRange = true
        switch outcome {
        case .notModified:
            return HTTP3ServerResponse(status: .notModified, headerFields: file.notModifiedFields)
        case .preconditionFailed:
            return HTTP3ServerResponse(status: .preconditionFailed, headerFields: file.notModifiedFields)
        case .proceed(let honours):
            honoursRange = honours
        }
        var partial: (range: Range<Int>, fields: HTTPFields)?
        if honoursRange, let rangeText = rangeField {
            switch Self.byteRange(rangeText, length: size) {
            case .satisfiable(let requested):
                let contentRange = "bytes \(requested.lowerBound)-\(requested.upperBound - 1)/\(size)"
                partial = (requested, file.fields(contentRange: contentRange, length: requested.count))
            case .unsatisfiable:
                let fields = file.fields(contentRange: "bytes */\(size)", length: nil)
                return HTTP3ServerResponse(status: .rangeNotSatisfiable, headerFields: fields)
            case .ignored:
                break
            }
        }
        // The body is read by the connection as the client takes it, straight into the memory
        // it sends from.
        if let partial {
            let region = method == .get ? HTTP3FileRegion(reader: file.reader, range: partial.range) : nil
            return HTTP3ServerResponse(head: HTTPResponse(status: .partialContent, headerFields: partial.fields), file: region)
        }
        // The whole file's answers were made, and their head encoded, when it was opened: most
        // requests build nothing at all.
        return method == .get ? file.wholeFileResponse : file.wholeFileHeadResponse
    }

    /// Opens the regular file a request path names (a directory's `index.html`); nil when it is
    /// missing, not a regular file, or would leave the root.
    /// A path asked for less than the reuse time ago gets what that lookup found, found by the
    /// path as it came (its query left out), so a repeated request decodes nothing.
    func open(_ path: String) -> HTTP3ServedFile? {
        var path = path
        return path.withUTF8(open(pathBytes:))
    }

    /// Opens the file a request's `:path` names, from its UTF-8 bytes: a path asked for
    /// recently is found without a string made of it.
    func open(pathBytes: UnsafeBufferPointer<UInt8>) -> HTTP3ServedFile? {
        // The path without its query (RFC 3986 §3.4): the same file whatever the query says.
        let question = pathBytes.firstIndex(of: UInt8(ascii: "?")) ?? pathBytes.endIndex
        return directory.recentFile(requestedAs: UnsafeBufferPointer(rebasing: pathBytes[..<question])) {
            let path = String(decoding: pathBytes, as: UTF8.self)
            guard let name = Self.relativeName(of: path) else { return nil }
            guard let entry = directory.lookUp(name.isEmpty ? "." : name) else { return nil }
            switch entry {
            case .file(let file):
                return file
            case .directory:
                // Without its trailing slash, a directory is redirected (`directoryResponse`).
                guard name.isEmpty || name.utf8.last == UInt8(ascii: "/") else { return nil }
                guard case .file(let file) = directory.lookUp(name + "index.html") else { return nil }
                return file
            }
        }
    }

    /// The answer when no file serves the path: a redirect to a directory's URL with its
    /// trailing slash (301, as nginx and Python's http.server send), a directory's listing, or
    /// 404. Requests for files never come here.
    private func directoryResponse(to request: HTTP3ServerRequest) -> HTTP3ServerResponse {
        // No content in an answer to HEAD (RFC 9110 §9.3.2): nghttp3 refuses a HEAD response
        // with a body as malformed, and so closes the connection.
        let isHead = request.method == .head
        let notFound = HTTP3ServerResponse(status: .notFound, headerFields: additionalFields, body: isHead ? [] : Array("not found\n".utf8))
        let target = request.path ?? "/"
        let question = target.firstIndex(of: "?")
        let path = target[..<(question ?? target.endIndex)]
        guard let name = Self.relativeName(of: target), case .directory? = directory.lookUp(name.isEmpty ? "." : name) else {
            return notFound
        }
        guard path.hasSuffix("/") else {
            guard listsDirectories || directory.hasRegularFile(name + "/index.html") else { return notFound }
            // One leading slash: `//host/dir` would otherwise send the client to another host.
            let query = question.map { String(target[$0...]) } ?? ""
            var fields = additionalFields
            fields[.location] = "/" + String(path.drop { $0 == "/" }) + "/" + query
            return HTTP3ServerResponse(status: .movedPermanently, headerFields: fields, body: isHead ? [] : Array("moved permanently\n".utf8))
        }
        guard listsDirectories, let entries = directory.entries(of: name.isEmpty ? "." : name) else { return notFound }
        let listing = HTTP3DirectoryListing(path: "/" + name, entries: entries)
        let asJSON = HTTP3DirectoryListing.prefersJSON(accept: request.headerField(.accept))
        let body = Array((asJSON ? listing.json : listing.html).utf8)
        var fields = HTTPFields()
        fields[.contentType] = asJSON ? "application/json" : "text/html; charset=utf-8"
        fields[.contentLength] = String(body.count)
        fields[.vary] = "accept"
        if let cacheControl { fields[.cacheControl] = cacheControl }
        fields.append(contentsOf: additionalFields)
        return HTTP3ServerResponse(status: .ok, headerFields: fields, body: isHead ? [] : body)
    }

    /// The path below the root that a request path names: without its query and its leading
    /// slashes, percent-decoded (RFC 3986 §2.1). Nil when it holds a NUL or bad escapes.
    ///
    /// One pass over the UTF-8 bytes finds all that a plain path needs (the delimiters are
    /// ASCII; walking Characters would run grapheme breaking over every path).
    static func relativeName(of path: String) -> String? {
        var path = path
        path.makeContiguousUTF8()
        switch path.utf8.withContiguousStorageIfAvailable(scanPath) ?? .escaped {
        case .plain(let name): return name
        case .invalid: return nil
        case .escaped: break
        }
        // Escapes can hide slashes and NULs, so the decoded path is scanned again.
        let utf8 = path.utf8
        let end = utf8.firstIndex(of: UInt8(ascii: "?")) ?? utf8.endIndex
        guard let decoded = percentDecoded(path[..<end]), !decoded.utf8.contains(0) else { return nil }
        return String(decoded[(decoded.utf8.firstIndex { $0 != UInt8(ascii: "/") } ?? decoded.endIndex)...])
    }

    /// `text` with its percent escapes decoded (RFC 3986 §2.1); nil when a `%` is not followed
    /// by two hex digits or the bytes decoded are not UTF-8. A `+` stays a `+`.
    static func percentDecoded(_ text: Substring) -> String? {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(text.utf8.count)
        var iterator = text.utf8.makeIterator()
        while let byte = iterator.next() {
            guard byte == UInt8(ascii: "%") else {
                bytes.append(byte)
                continue
            }
            guard let high = iterator.next().flatMap(Hex.nibble), let low = iterator.next().flatMap(Hex.nibble) else { return nil }
            bytes.append(high << 4 | low)
        }
        return String(validating: bytes, as: UTF8.self)
    }

    private enum PathScan {
        /// No escapes: the name, found in the one pass.
        case plain(String)
        /// Percent escapes, to decode first.
        case escaped
        /// A NUL before the query.
        case invalid
    }

    private static func scanPath(_ bytes: UnsafeBufferPointer<UInt8>) -> PathScan {
        var start: Int?
        var end = bytes.count
        scan: for index in bytes.indices {
            switch bytes[index] {
            case UInt8(ascii: "?"): end = index; break scan
            case UInt8(ascii: "%"): return .escaped
            case 0: return .invalid
            case UInt8(ascii: "/"): continue
            default: break
            }
            if start == nil { start = index }
        }
        // The bounds are ASCII bytes, so the slice is whole UTF-8.
        return .plain(String(decoding: UnsafeBufferPointer(rebasing: bytes[(start ?? end)..<end]), as: UTF8.self))
    }

    enum RangeOutcome: Equatable {
        case satisfiable(Range<Int>)
        case unsatisfiable
        /// Not a single byte range we understand: serve the whole file (RFC 9110 §14.2 allows it).
        case ignored
    }

    /// Parses one `bytes=first-last`, `bytes=first-` or `bytes=-suffix` range.
    static func byteRange(_ text: String, length: Int) -> RangeOutcome {
        let trimmed = text.trimmingASCIIWhitespace()
        guard trimmed.lowercased().hasPrefix("bytes="), !trimmed.contains(",") else { return .ignored }
        let spec = trimmed.dropFirst("bytes=".count)
        let parts = spec.split(separator: "-", maxSplits: 1, omittingEmptySubsequences: false)
        guard parts.count == 2 else { return .ignored }
        let first = parts[0].trimmingASCIIWhitespace()
        let last = parts[1].trimmingASCIIWhitespace()
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

    /// The text after the last dot of the last path component, "" when there is none.
    static func pathExtension(of path: String) -> Substring {
        let utf8 = path.utf8
        let componentStart = utf8.lastIndex(of: UInt8(ascii: "/")).map(utf8.index(after:)) ?? utf8.startIndex
        guard let dot = utf8[componentStart...].lastIndex(of: UInt8(ascii: ".")), dot != componentStart else { return "" }
        return path[utf8.index(after: dot)...]
    }

    /// Whether `value` is a `cache-control` field value (RFC 9111 §5.2): one or more
    /// directives separated by commas, each a token, optionally `=` and a token or a quoted
    /// string (`max-age=3600`, `no-cache="set-cookie"`, `public`).
    package static func isCacheControlValue(_ value: String) -> Bool {
        let tokenCharacters = Set("!#$%&'*+-.^_`|~".utf8)
        func isToken(_ text: Substring) -> Bool {
            !text.isEmpty && text.utf8.allSatisfy { $0 < 0x80 && (tokenCharacters.contains($0) || Character(Unicode.Scalar($0)).isLetter || Character(Unicode.Scalar($0)).isNumber) }
        }
        func isQuoted(_ text: Substring) -> Bool {
            text.count >= 2 && text.first == "\"" && text.last == "\""
                && !text.dropFirst().dropLast().utf8.contains { $0 < 0x20 && $0 != 0x09 || $0 == 0x7f || $0 == UInt8(ascii: "\"") }
        }
        let directives = value.split(separator: ",", omittingEmptySubsequences: false)
        return directives.allSatisfy { directive in
            let parts = directive.trimmingASCIIWhitespace().split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            guard isToken(parts[0]) else { return false }
            return parts.count == 1 || isToken(parts[1]) || isQuoted(parts[1])
        }
    }

    /// The weight `accept-encoding` gives `coding` (RFC 9110 §12.5.3): its own `q`, else that
    /// of `*`, else 0. `x-gzip` counts as `gzip` (§8.4.1.3).
    static func acceptedWeight(of coding: String, in accepted: String) -> Double {
        var wildcard = 0.0
        for member in weightedMembers(of: accepted) {
            if member.name == coding || member.name == "x-gzip" && coding == "gzip" { return member.weight }
            if member.name == "*" { wildcard = member.weight }
        }
        return wildcard
    }

    /// The members of an `accept` or `accept-encoding` value, lowercased, each with its weight
    /// (RFC 9110 §12.4.2): its `q` parameter, or 1 when it has none or one that does not parse.
    static func weightedMembers(of fieldValue: String) -> [(name: String, weight: Double)] {
        fieldValue.split(separator: ",").compactMap { member in
            let parts = member.split(separator: ";").map { $0.trimmingASCIIWhitespace().lowercased() }
            guard let name = parts.first, !name.isEmpty else { return nil }
            let weight = parts.dropFirst().first { $0.hasPrefix("q=") }.flatMap { Double($0.dropFirst(2)) } ?? 1
            return (name, weight)
        }
    }

    static func contentType(for pathExtension: Substring) -> String {
        let isLowercase = !pathExtension.utf8.contains { $0 >= UInt8(ascii: "A") && $0 <= UInt8(ascii: "Z") }
        switch isLowercase ? String(pathExtension) : pathExtension.lowercased() {
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
