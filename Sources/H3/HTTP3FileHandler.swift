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

/// Serves the files under one directory (RFC 9110 semantics over HTTP/3): GET and HEAD with
/// `content-length` and `content-type`, a single byte range (RFC 9110 §14), 404 for what is not
/// there, 405 for other methods, and nothing outside the root, whatever `..` or symlinks say.
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
    public init(root: String, openFileReuse: Duration = .seconds(1), additionalFields: HTTPFields = [:]) {
        let root = URL(fileURLWithPath: root).standardizedFileURL.resolvingSymlinksInPath()
        self.directory = HTTP3RootDirectory(root: root, reuse: openFileReuse, additionalFields: additionalFields)
    }

    /// Answers one request: the file or the one byte range asked for (206, or 416 when it cannot
    /// be satisfied, RFC 9110 §14), only the head for HEAD, 404 when there is no such file and 405
    /// for any other method. A directory is served as its `index.html`.
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
        guard let file = found else {
            return HTTP3ServerResponse(status: .notFound, headerFields: additionalFields, body: Array("not found\n".utf8))
        }
        let size = file.reader.size
        var partial: (range: Range<Int>, fields: HTTPFields)?
        if let rangeText = request.headerField(.range) {
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
                let index = name.isEmpty || name.utf8.last == UInt8(ascii: "/") ? name + "index.html" : name + "/index.html"
                guard case .file(let file) = directory.lookUp(index) else { return nil }
                return file
            }
        }
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

    init(root: URL, reuse: Duration, additionalFields: HTTPFields) {
        self.root = root
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

    /// Asks the kernel what `relativePath` is beneath the root, opening it if it is a file.
    func lookUp(_ relativePath: String) -> Entry? {
        guard descriptor >= 0 else { return nil }
        let opened: Int32
        if kernelResolves {
            opened = cqs_openat2(descriptor, relativePath, UInt64(O_RDONLY | O_CLOEXEC), UInt64(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS))
        } else {
            guard let resolved = realpath(canonicalPath + relativePath, nil) else { return nil }
            defer { free(resolved) }
            let path = String(cString: resolved)
            guard path.hasPrefix(canonicalPath) || path + "/" == canonicalPath else { return nil }
            opened = Glibc.open(path, O_RDONLY | O_CLOEXEC)
        }
        guard opened >= 0 else { return nil }
        var info = stat()
        guard fstat(opened, &info) == 0 else {
            close(opened)
            return nil
        }
        switch info.st_mode & S_IFMT {
        case S_IFREG:
            let reader = HTTP3FileReader(descriptor: opened, size: Int(info.st_size))
            let contentType = HTTP3FileHandler.contentType(for: HTTP3FileHandler.pathExtension(of: relativePath))
            return .file(HTTP3ServedFile(reader: reader, contentType: contentType, additionalFields: additionalFields))
        case S_IFDIR:
            close(opened)
            return .directory
        default:
            close(opened)
            return nil
        }
    }
}

/// An opened file with the response fields that describe it, made once per lookup and shared,
/// with one reference count, by every response that serves it.
final class HTTP3ServedFile: Sendable {
    let reader: HTTP3FileReader
    /// `content-type`, from the name the file was opened under.
    let contentType: HTTPField
    /// The fields every response carries (`alt-svc`, for one).
    let additionalFields: HTTPFields
    /// The whole file's response head, made once and shared: 200 with `content-type`,
    /// `accept-ranges` and `content-length` (RFC 9110 §8.3, §14.3, §8.6), then the handler's
    /// additional fields.
    let wholeFile: HTTP3PreparedHead
    /// The answers to a GET and to a HEAD of the whole file, made once: a request for it is
    /// answered by counting one reference.
    let wholeFileResponse: HTTP3ServerResponse
    let wholeFileHeadResponse: HTTP3ServerResponse

    init(reader: HTTP3FileReader, contentType: String, additionalFields: HTTPFields = [:]) {
        self.reader = reader
        self.contentType = HTTPField(name: .contentType, value: contentType)
        self.additionalFields = additionalFields
        var fields = HTTPFields()
        fields.reserveCapacity(3 + additionalFields.count)
        fields.append(self.contentType)
        fields.append(Self.acceptRanges)
        fields.append(HTTPField(name: .contentLength, value: String(reader.size)))
        fields.append(contentsOf: additionalFields)
        wholeFile = HTTP3PreparedHead(HTTPResponse(status: .ok, headerFields: fields))
        reader.keepWholeFileFields(wholeFile.encoded)
        wholeFileResponse = HTTP3ServerResponse(prepared: wholeFile, file: HTTP3FileRegion(reader: reader, range: 0..<reader.size))
        wholeFileHeadResponse = HTTP3ServerResponse(prepared: wholeFile, file: nil)
    }

    private static let acceptRanges = HTTPField(name: .acceptRanges, value: "bytes")

    /// The fields of a byte-range answer (206 or 416, RFC 9110 §14.4): `content-length` only
    /// when a range is sent.
    func fields(contentRange: String, length: Int?) -> HTTPFields {
        var fields = HTTPFields()
        fields.reserveCapacity(4 + additionalFields.count)
        fields.append(contentType)
        fields.append(Self.acceptRanges)
        fields.append(HTTPField(name: .contentRange, value: contentRange))
        if let length { fields.append(HTTPField(name: .contentLength, value: String(length))) }
        fields.append(contentsOf: additionalFields)
        return fields
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
