#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif
import CQuicLinux
import HTTPTypes
import NIOConcurrencyHelpers
import NIOCore
import QuicTransport

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

    /// Lets `duration` pass for the files kept, with no wait on the clock (tests).
    func age(by duration: Duration) {
        let nanoseconds = HTTP3Server.nanoseconds(duration)
        recent.withLockedValue { recent in
            recent.byPath.age(by: nanoseconds)
            recent.nextSweep -= min(nanoseconds, recent.nextSweep)
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
