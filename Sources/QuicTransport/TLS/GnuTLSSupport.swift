// @preconcurrency lets Swift 6 mode call through the imported C global `gnutls_free` in Swift 6 mode.
@preconcurrency import CQuicShims
import NIOCore

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Frees memory that GnuTLS allocated for the caller (the `gnutls_free` function pointer).
func gnutlsFree(_ pointer: UnsafeMutableRawPointer?) {
    gnutls_free(pointer)
}

/// Allocates memory that GnuTLS will free (the `gnutls_malloc` function pointer), for data a
/// callback hands to it.
func gnutlsMalloc(_ count: Int) -> UnsafeMutableRawPointer? {
    gnutls_malloc(count)
}

/// Throws `TLSError.gnutls` when a GnuTLS return code is negative.
func checkGnuTLS(_ rc: Int32, _ function: String) throws {
    if rc < 0 { throw TLSError.gnutlsFailure(function: function, code: rc) }
}

/// Reads a whole file, mapping a missing or unreadable file to a `TLSError` that names the path.
func readTLSFile(_ path: String) throws -> [UInt8] {
    let fd = open(path, O_RDONLY | O_CLOEXEC)
    guard fd >= 0 else {
        let err = errno
        if err == ENOENT { throw TLSError.missingFile(path: path) }
        throw TLSError.unreadableFile(path: path, reason: String(cString: strerror(err)))
    }
    defer { close(fd) }
    do {
        return try readToEnd(fd)
    } catch {
        throw TLSError.unreadableFile(path: path, reason: String(cString: strerror((error as? IOError)?.errnoCode ?? EIO)))
    }
}

/// Everything `descriptor` yields until its end (a file, a pipe, standard input), retrying
/// interrupted reads; a failed read throws NIO's `IOError` with its errno.
package func readToEnd(_ descriptor: Int32) throws -> [UInt8] {
    var contents: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 64 * 1024)
    while true {
        let count = chunk.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
        if count == 0 { return contents }
        if count < 0 {
            let err = errno
            if err == EINTR { continue }
            throw IOError(errnoCode: err, reason: "read")
        }
        contents.append(contentsOf: chunk[..<count])
    }
}

/// Calls `body` with a GnuTLS datum viewing a copy of `bytes` (valid only during the call).
func withDatum<R>(_ bytes: [UInt8], _ body: (inout gnutls_datum_t) throws -> R) rethrows -> R {
    var copy = bytes
    return try copy.withUnsafeMutableBufferPointer { buffer in
        var datum = gnutls_datum_t(data: buffer.baseAddress, size: UInt32(buffer.count))
        return try body(&datum)
    }
}
