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
    private let directory: HTTP3RootDirectory

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

/// The served directory, held open so every request is resolved beneath it by the kernel.
///
/// `openat2(2)` with `RESOLVE_BENEATH` refuses any path that would leave the directory, through
/// `..` or through a symlink, in one system call and without a window between check and open.
/// Where the kernel or a seccomp filter refuses openat2 itself, `realpath(3)` and a prefix check
/// stand in for it.
///
/// What a path opened to is kept for a short while and handed to later requests for the same
/// path (nginx's `open_file_cache`; ngtcp2's example server keeps its files forever). Served
/// files are read with `pread`, so one open file serves any number of requests at once; one of
/// at most 16 KiB is read whole when opened and sent from memory (`HTTP3FileReader`). A large
/// file truncated in place still fails the stream that finds it short; one replaced by a
/// rename, or a small one changed in place, is served in its old version until the entry
/// expires.
final class HTTP3RootDirectory: Sendable {
    enum Entry: Sendable {
        case file(HTTP3ServedFile)
        case directory
    }

    /// How files are described and found, as the handler was made (`HTTP3FileHandler.init`).
    struct Options: Sendable {
        var cacheControl: String?
        var listsDirectories = false
        var servesPrecompressed = false
    }

    /// The precompressed siblings looked for, in the order preferred, with their content
    /// codings (RFC 9110 §8.4.1): Brotli (RFC 7932) compresses better than gzip.
    static let precompressedSiblings = [(suffix: ".br", coding: "br"), (suffix: ".gz", coding: "gzip")]

    let options: Options
    var cacheControl: String? { options.cacheControl }
    var listsDirectories: Bool { options.listsDirectories }
    var servesPrecompressed: Bool { options.servesPrecompressed }

    /// The directory, standardized and with symlinks resolved.
    let root: URL
    private let descriptor: Int32
    /// The canonical path with a trailing slash, for the fallback's prefix check.
    private let canonicalPath: String
    private let kernelResolves: Bool
    /// Built into every file's fields when it is opened.
    var additionalFields: HTTPFields { recent.withLockedValue { $0.additionalFields } }

    /// The recent lookups by request path, each trusted until a monotonic time in nanoseconds.
    /// Expired ones are swept out (a file closes once no response reads it either) at most once
    /// per reuse time and only when a lookup misses, so an idle server keeps at most
    /// `recentLimit` descriptors open.
    private struct RecentFiles: Sendable {
        var byPath = HTTP3RecentPaths<HTTP3ServedFile>(capacity: HTTP3RootDirectory.recentLimit)
        var nextSweep: UInt64 = 0
        /// Kept with the files, which are built with them, so that a lookup and a change of
        /// fields are ordered by the one lock.
        var additionalFields: HTTPFields
        /// Counts changes of `additionalFields`: a file opened before the latest change is
        /// served, but not kept.
        var fieldsGeneration = 0
    }

    /// How long a file is reused, in nanoseconds; zero turns reuse off.
    private let reuse: UInt64
    private let recent: NIOLockedValueBox<RecentFiles>
    /// The most entries (and so open descriptors) kept. A new path takes a free place in its
    /// set of four, or the place of the one that expires first.
    static let recentLimit = 256

    init(root: URL, reuse: Duration, additionalFields: HTTPFields, options: Options = Options()) {
        self.root = root
        self.options = options
        let path = root.path
        self.reuse = HTTP3Server.nanoseconds(reuse)
        recent = NIOLockedValueBox(RecentFiles(additionalFields: additionalFields))
        descriptor = Glibc.open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        canonicalPath = path.hasSuffix("/") ? path : path + "/"
        var probe: Int32 = -1
        if descriptor >= 0 { probe = cqs_openat2(descriptor, ".", UInt64(O_RDONLY | O_DIRECTORY | O_CLOEXEC), UInt64(RESOLVE_BENEATH)) }
        kernelResolves = probe >= 0
        if probe >= 0 { close(probe) }
    }

    deinit { if descriptor >= 0 { close(descriptor) } }

    /// Builds `fields` into the files opened from now on, and forgets the files kept so far.
    func replaceAdditionalFields(with fields: HTTPFields) {
        recent.withLockedValue { recent in
            recent.additionalFields = fields
            recent.fieldsGeneration += 1
            recent.byPath = HTTP3RecentPaths(capacity: Self.recentLimit)
        }
    }

    /// The file a request for `path` (its UTF-8 bytes) got less than the reuse time ago;
    /// otherwise what `lookUp` finds now, kept for the next request (a miss is not kept).
    func recentFile(requestedAs pathBytes: UnsafeBufferPointer<UInt8>, orLookUp lookUp: () -> HTTP3ServedFile?) -> HTTP3ServedFile? {
        guard reuse > 0 else { return lookUp() }
        let now = NIODeadline.now().uptimeNanoseconds
        let (hit, generation) = recent.withLockedValue { ($0.byPath.value(forUTF8: pathBytes, now: now), $0.fieldsGeneration) }
        if let hit { return hit }
        let file = lookUp()
        let path = String(decoding: pathBytes, as: UTF8.self)
        recent.withLockedValue { recent in
            if now >= recent.nextSweep {
                recent.byPath.removeExpired(now: now)
                recent.nextSweep = now + reuse
            }
            // A file opened with the fields from before a change is served, not kept.
            guard recent.fieldsGeneration == generation else { return }
            if let file {
                recent.byPath.set(file, for: path, expires: now + reuse)
            } else {
                recent.byPath.removeValue(for: path)
            }
        }
        return file
    }

    /// Asks the kernel what `relativePath` is beneath the root, opening it if it is a file,
    /// with its precompressed siblings when the handler serves them.
    func lookUp(_ relativePath: String) -> Entry? {
        guard let (opened, info) = openBeneath(relativePath, flags: O_RDONLY) else { return nil }
        switch info.st_mode & S_IFMT {
        case S_IFREG:
            let contentType = HTTP3FileHandler.contentType(for: HTTP3FileHandler.pathExtension(of: relativePath))
            let fields = additionalFields
            var variants: [HTTP3ServedFile] = []
            if options.servesPrecompressed {
                for sibling in Self.precompressedSiblings {
                    guard let (descriptor, siblingInfo) = openBeneath(relativePath + sibling.suffix, flags: O_RDONLY) else { continue }
                    guard siblingInfo.st_mode & S_IFMT == S_IFREG else {
                        close(descriptor)
                        continue
                    }
                    let reader = HTTP3FileReader(descriptor: descriptor, size: Int(siblingInfo.st_size))
                    let description = HTTP3ServedFile.Description(
                        modified: Int(siblingInfo.st_mtim.tv_sec), cacheControl: options.cacheControl, encoding: sibling.coding,
                        variesByEncoding: true
                    )
                    variants.append(HTTP3ServedFile(reader: reader, contentType: contentType, additionalFields: fields, description: description))
                }
            }
            let reader = HTTP3FileReader(descriptor: opened, size: Int(info.st_size))
            let description = HTTP3ServedFile.Description(
                modified: Int(info.st_mtim.tv_sec), cacheControl: options.cacheControl, encoding: nil,
                variesByEncoding: options.servesPrecompressed
            )
            let file = HTTP3ServedFile(
                reader: reader, contentType: contentType, additionalFields: fields, description: description, encodedVariants: variants
            )
            return .file(file)
        case S_IFDIR:
            close(opened)
            return .directory
        default:
            close(opened)
            return nil
        }
    }

    /// `O_PATH` (open(2): a descriptor for fstat only, which opens nothing for reading), which
    /// Glibc's module does not import; 010000000 in asm-generic, so on x86-64 and arm64.
    private static let pathOnly: Int32 = 0o10000000

    /// Whether `relativePath` is a regular file beneath the root (a directory's `index.html`).
    func hasRegularFile(_ relativePath: String) -> Bool {
        guard let (opened, info) = openBeneath(relativePath, flags: Self.pathOnly) else { return false }
        close(opened)
        return info.st_mode & S_IFMT == S_IFREG
    }

    /// The regular files and directories in the directory `relativePath`, each resolved
    /// beneath the root as a request for it would be: a symlink that leads outside the root,
    /// or nowhere, is left out, as are devices, sockets and pipes. Nil when it is no directory.
    func entries(of relativePath: String) -> [HTTP3DirectoryListing.Entry]? {
        guard let (opened, _) = openBeneath(relativePath, flags: O_RDONLY | O_DIRECTORY) else { return nil }
        guard let stream = fdopendir(opened) else {
            close(opened)
            return nil
        }
        defer { closedir(stream) }
        let prefix = relativePath == "." ? "" : relativePath.hasSuffix("/") ? relativePath : relativePath + "/"
        var entries: [HTTP3DirectoryListing.Entry] = []
        while let entry = readdir(stream) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            guard name != ".", name != ".." else { continue }
            // O_PATH: nothing is opened for reading, so a pipe cannot block the listing.
            guard let (child, info) = openBeneath(prefix + name, flags: Self.pathOnly) else { continue }
            close(child)
            let type = info.st_mode & S_IFMT
            guard type == S_IFREG || type == S_IFDIR else { continue }
            entries.append(
                HTTP3DirectoryListing.Entry(
                    name: name, size: Int(info.st_size), modified: Int(info.st_mtim.tv_sec), isDirectory: type == S_IFDIR
                )
            )
        }
        return entries
    }

    /// Opens `relativePath` beneath the root with `flags` (and O_CLOEXEC, and O_NONBLOCK so
    /// that a named pipe does not block the loop; reads use pread, which it does not change;
    /// openat2 refuses it with O_PATH, which opens nothing anyway), and returns the descriptor
    /// with what fstat says of it; nil when it does not exist or would leave the root.
    private func openBeneath(_ relativePath: String, flags: Int32) -> (Int32, stat)? {
        guard descriptor >= 0 else { return nil }
        let flags = flags & Self.pathOnly != 0 ? flags | O_CLOEXEC : flags | O_CLOEXEC | O_NONBLOCK
        let opened: Int32
        if kernelResolves {
            opened = cqs_openat2(descriptor, relativePath, UInt64(flags), UInt64(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS))
        } else {
            guard let resolved = realpath(canonicalPath + relativePath, nil) else { return nil }
            defer { free(resolved) }
            let path = String(cString: resolved)
            guard path.hasPrefix(canonicalPath) || path + "/" == canonicalPath else { return nil }
            opened = Glibc.open(path, flags)
        }
        guard opened >= 0 else { return nil }
        var info = stat()
        guard fstat(opened, &info) == 0 else {
            close(opened)
            return nil
        }
        return (opened, info)
    }
}

/// An opened file with the response fields that describe it, made once per lookup and shared,
/// with one reference count, by every response that serves it.
final class HTTP3ServedFile: Sendable {
    /// What describes the file beyond its type and length: its change time, the handler's
    /// caching policy, and its content coding when it is a precompressed sibling.
    struct Description: Sendable {
        /// Seconds since 1970 of the file's last change.
        var modified = 0
        var cacheControl: String?
        /// `br` or `gzip` for a precompressed sibling (RFC 9110 §8.4.1); nil for the file itself.
        var encoding: String?
        /// Whether responses carry `vary: accept-encoding` (RFC 9110 §12.5.5).
        var variesByEncoding = false
    }

    let reader: HTTP3FileReader
    /// `content-type`, from the name the file was opened under.
    let contentType: HTTPField
    /// The fields every response carries (`alt-svc`, for one).
    let additionalFields: HTTPFields
    /// `ETag` and `Last-Modified`, made when the file was opened (RFC 9110 §8.8).
    let validators: HTTP3FileValidators
    /// The content coding of a precompressed sibling; nil for the file itself.
    let encoding: String?
    /// The precompressed siblings, in the order preferred (`br`, then `gzip`).
    let encodedVariants: [HTTP3ServedFile]
    /// `content-encoding`, `etag`, `last-modified`, `cache-control` and `vary`, as every
    /// response for the file carries them.
    private let describingFields: HTTPFields
    /// The head of a 304 (and 412): the validators and caching fields a 200 would carry
    /// (RFC 9110 §15.4.5), then the handler's additional fields.
    let notModifiedFields: HTTPFields
    /// The whole file's response head, made once and shared: 200 with `content-type`,
    /// `accept-ranges` and `content-length` (RFC 9110 §8.3, §14.3, §8.6), the describing
    /// fields, then the handler's additional fields.
    let wholeFile: HTTP3PreparedHead
    /// The answers to a GET and to a HEAD of the whole file, made once: a request for it is
    /// answered by counting one reference.
    let wholeFileResponse: HTTP3ServerResponse
    let wholeFileHeadResponse: HTTP3ServerResponse

    init(
        reader: HTTP3FileReader, contentType: String, additionalFields: HTTPFields = [:], description: Description = Description(),
        encodedVariants: [HTTP3ServedFile] = []
    ) {
        self.reader = reader
        self.contentType = HTTPField(name: .contentType, value: contentType)
        self.additionalFields = additionalFields
        self.encoding = description.encoding
        self.encodedVariants = encodedVariants
        validators = HTTP3FileValidators(modified: description.modified, size: reader.size, encoding: description.encoding)
        var describing = HTTPFields()
        if let encoding = description.encoding { describing.append(HTTPField(name: .contentEncoding, value: encoding)) }
        describing.append(HTTPField(name: .eTag, value: validators.entityTag))
        describing.append(HTTPField(name: .lastModified, value: validators.lastModified))
        if let cacheControl = description.cacheControl { describing.append(HTTPField(name: .cacheControl, value: cacheControl)) }
        if description.variesByEncoding { describing.append(Self.varyByEncoding) }
        describingFields = describing
        var notModified = describing
        // A 304 describes the selected representation, not its encoding (RFC 9110 §15.4.5).
        notModified[.contentEncoding] = nil
        notModified.append(contentsOf: additionalFields)
        notModifiedFields = notModified
        var fields = HTTPFields()
        fields.reserveCapacity(3 + describing.count + additionalFields.count)
        fields.append(self.contentType)
        fields.append(Self.acceptRanges)
        fields.append(HTTPField(name: .contentLength, value: String(reader.size)))
        fields.append(contentsOf: describing)
        fields.append(contentsOf: additionalFields)
        wholeFile = HTTP3PreparedHead(HTTPResponse(status: .ok, headerFields: fields))
        reader.keepWholeFileFields(wholeFile.encoded)
        wholeFileResponse = HTTP3ServerResponse(prepared: wholeFile, file: HTTP3FileRegion(reader: reader, range: 0..<reader.size))
        wholeFileHeadResponse = HTTP3ServerResponse(prepared: wholeFile, file: nil)
    }

    private static let acceptRanges = HTTPField(name: .acceptRanges, value: "bytes")
    private static let varyByEncoding = HTTPField(name: .vary, value: "accept-encoding")

    /// The fields of a byte-range answer (206 or 416, RFC 9110 §14.4): `content-length` only
    /// when a range is sent.
    func fields(contentRange: String, length: Int?) -> HTTPFields {
        var fields = HTTPFields()
        fields.reserveCapacity(4 + describingFields.count + additionalFields.count)
        fields.append(contentType)
        fields.append(Self.acceptRanges)
        fields.append(HTTPField(name: .contentRange, value: contentRange))
        if let length { fields.append(HTTPField(name: .contentLength, value: String(length))) }
        fields.append(contentsOf: describingFields)
        fields.append(contentsOf: additionalFields)
        return fields
    }

    /// The representation to send a client whose `accept-encoding` is `accepted`: the first
    /// sibling whose coding it accepts with the highest weight (RFC 9110 §12.5.3), else this file.
    func variant(accepting accepted: String) -> HTTP3ServedFile {
        var best: (file: HTTP3ServedFile, weight: Double)?
        for variant in encodedVariants {
            guard let coding = variant.encoding else { continue }
            let weight = HTTP3FileHandler.acceptedWeight(of: coding, in: accepted)
            if weight > 0, weight > best?.weight ?? 0 { best = (variant, weight) }
        }
        return best?.file ?? self
    }
}

/// A byte range of an open file, sent as a response body without passing through the handler:
/// HTTP/3 reads it chunk by chunk as the client acknowledges, HTTP/1.1 and HTTP/2 stream it.
package struct HTTP3FileRegion: Sendable {
    let reader: HTTP3FileReader
    let range: Range<Int>

    /// The whole region (tests and small consumers; servers read it piece by piece).
    package func readAll() throws -> [UInt8] { try reader.read(range) }

    /// The region's bytes where they lie, when the reader holds its file in memory (valid for
    /// as long as the reader lives); nil when they must be read.
    var inMemoryBytes: UnsafeRawBufferPointer? {
        guard let contents = reader.contents, range.upperBound <= contents.count else { return nil }
        return UnsafeRawBufferPointer(rebasing: contents[range])
    }

    /// The region as chunks read on demand.
    func chunks(size: Int = 256 << 10) -> AsyncThrowingStream<[UInt8], any Error> { reader.chunks(of: range, size: size) }
}

/// An open file read by position (`pread`), closed when the last reference goes.
///
/// A small file is read whole when it is opened and served from memory: a response sends
/// straight from `contents`, with no read and no copy, for as long as the lookup is reused.
/// Like a file replaced by a rename, a change in place is then seen when the lookup expires.
// @unchecked Sendable: the descriptor is only read with pread, which is safe from any thread,
// `contents` is written once, in init, and `wholeFileFields` once, before the reader is shared.
final class HTTP3FileReader: @unchecked Sendable {
    let descriptor: Int32
    let size: Int
    /// The whole file, for one of at most `inMemoryLimit` bytes that read in full when opened.
    let contents: UnsafeRawBufferPointer?
    /// The whole file's response head as encoded for nghttp3 (`HTTP3ServedFile.wholeFile`),
    /// kept for as long as the reader: a response sending from the reader's memory holds the
    /// reader until its stream closes, so nghttp3 may read that head in place (`HTTP3Codec`).
    private(set) var wholeFileFields: HTTP3FieldArray?
    /// The largest file kept in memory: 16 KiB, so the 256 lookups kept at most
    /// (`HTTP3RootDirectory.recentLimit`) hold at most 4 MiB.
    static let inMemoryLimit = 16 << 10

    /// Takes ownership of `descriptor`, an open regular file of `size` bytes.
    init(descriptor: Int32, size: Int) {
        self.descriptor = descriptor
        self.size = size
        guard size > 0, size <= Self.inMemoryLimit else {
            contents = nil
            return
        }
        let whole = UnsafeMutableRawBufferPointer.allocate(byteCount: size, alignment: 1)
        if Self.read(descriptor, 0..<size, into: whole) {
            contents = UnsafeRawBufferPointer(whole)
        } else {
            whole.deallocate()
            contents = nil
        }
    }

    deinit {
        contents?.deallocate()
        close(descriptor)
    }

    /// Keeps the whole file's encoded head; called once, before the reader is shared.
    func keepWholeFileFields(_ fields: HTTP3FieldArray) {
        wholeFileFields = fields
    }

    func read(_ range: Range<Int>) throws -> [UInt8] {
        try [UInt8](unsafeUninitializedCapacity: range.count) { buffer, initialized in
            guard read(range, into: UnsafeMutableRawBufferPointer(buffer)) else { throw CocoaError(.fileReadUnknown) }
            initialized = range.count
        }
    }

    /// Reads `range` into the start of `destination`; false when the file ends early or fails.
    func read(_ range: Range<Int>, into destination: UnsafeMutableRawBufferPointer) -> Bool {
        if let contents {
            guard range.upperBound <= contents.count else { return false }
            destination.baseAddress!.copyMemory(from: contents.baseAddress! + range.lowerBound, byteCount: range.count)
            return true
        }
        return Self.read(descriptor, range, into: destination)
    }

    private static func read(_ descriptor: Int32, _ range: Range<Int>, into destination: UnsafeMutableRawBufferPointer) -> Bool {
        var done = 0
        while done < range.count {
            let n = pread(descriptor, destination.baseAddress! + done, range.count - done, off_t(range.lowerBound + done))
            guard n > 0 else { return false }
            done += n
        }
        return true
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
