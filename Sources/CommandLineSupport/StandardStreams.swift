#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Writes `text` to standard error at once, whole, with no buffering: the tools' messages
/// outside logging (startup failures, access lines). `FileHandle` would pull in Foundation.
public func writeToStandardError(_ text: String) {
    writeWhole(text, to: STDERR_FILENO)
}

/// Writes `text` to standard output at once, whole, with no buffering: scripts wait for the
/// lines a server prints when it is ready.
public func writeToStandardOutput(_ text: String) {
    writeWhole(text, to: STDOUT_FILENO)
}

/// Writes `bytes` to standard output at once, whole (a body kept to keep URLs in order).
public func writeToStandardOutput(_ bytes: [UInt8]) {
    bytes.withUnsafeBytes { _ = writeWhole($0, to: STDOUT_FILENO) }
}

func writeWhole(_ text: String, to descriptor: Int32) {
    var text = text
    // A closed or full pipe: the message is lost, as a failed FileHandle write would lose it.
    text.withUTF8 { _ = writeWhole(UnsafeRawBufferPointer($0), to: descriptor) }
}

/// Writes all of `bytes`, retrying what a signal interrupted; the `errno` of a failed write, or
/// nil.
private func writeWhole(_ bytes: UnsafeRawBufferPointer, to descriptor: Int32) -> Int32? {
    var offset = 0
    while offset < bytes.count {
        let written = write(descriptor, bytes.baseAddress! + offset, bytes.count - offset)
        if written < 0 && errno == EINTR { continue }
        guard written > 0 else { return written < 0 ? errno : EIO }
        offset += written
    }
    return nil
}

/// Where a tool writes a body: a file it created or truncated (curl's `-o`), which it owns and
/// closes, or standard output, which it leaves open.
public final class OutputFile {
    /// The name used in error messages: the path, or "stdout".
    public let name: String
    public let isStandardOutput: Bool
    private var descriptor: Int32

    /// Standard output.
    public init() {
        name = "stdout"
        isStandardOutput = true
        descriptor = STDOUT_FILENO
    }

    /// Opens `path` for writing, created (mode 0644 less the umask) or truncated. `open(2)` with
    /// `O_TRUNC`, not a replace-by-rename: `-o /dev/null` must stay a device.
    public init(creatingOrTruncating path: String) throws(OutputFileError) {
        let descriptor = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard descriptor >= 0 else { throw OutputFileError(name: path, code: errno) }
        name = path
        isStandardOutput = false
        self.descriptor = descriptor
    }

    /// Writes all of `bytes`.
    public func write(_ bytes: [UInt8]) throws(OutputFileError) {
        guard descriptor >= 0 else { throw OutputFileError(name: name, code: EBADF) }
        if let code = bytes.withUnsafeBytes({ writeWhole($0, to: descriptor) }) {
            throw OutputFileError(name: name, code: code)
        }
    }

    /// Closes a file this opened (standard output stays open); a failure here can be a write
    /// the kernel deferred, such as on NFS, so it is reported.
    public func close() throws(OutputFileError) {
        guard !isStandardOutput, descriptor >= 0 else { return }
        let descriptor = self.descriptor
        self.descriptor = -1
        guard closeDescriptor(descriptor) == 0 else { throw OutputFileError(name: name, code: errno) }
    }

    deinit {
        if !isStandardOutput && descriptor >= 0 { _ = closeDescriptor(descriptor) }
    }
}

/// close(2), named apart from ``OutputFile/close()``.
private func closeDescriptor(_ descriptor: Int32) -> Int32 { close(descriptor) }

/// A failed open, write or close of an ``OutputFile``: curl's "Failure writing output" (exit 23).
public struct OutputFileError: Error, CustomStringConvertible {
    public let name: String
    public let code: Int32

    public var description: String { "cannot write \(name): \(String(cString: strerror(code)))" }
}

/// `text` padded on the left with spaces to `width` characters, as printf's `%*s` prints it.
public func rightAligned(_ text: String, width: Int) -> String {
    String(repeating: " ", count: max(0, width - text.count)) + text
}

/// `value` with `digits` digits after the point, as C's `%.*f` prints it (`String(format:)`
/// lives in Foundation, outside FoundationEssentials).
public func fixedPoint(_ value: Double, digits: Int) -> String {
    withUnsafeTemporaryAllocation(of: CChar.self, capacity: 64) { buffer in
        let written = withVaList([Int32(digits), value]) { vsnprintf(buffer.baseAddress, buffer.count, "%.*f", $0) }
        guard written >= 0, Int(written) < buffer.count else { return "\(value)" }
        return String(decoding: UnsafeRawBufferPointer(start: buffer.baseAddress, count: Int(written)), as: UTF8.self)
    }
}
