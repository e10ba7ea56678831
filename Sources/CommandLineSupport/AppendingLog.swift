#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A log that lines are appended to from any thread: a file opened with `O_APPEND` (so that
/// logrotate's copytruncate and other writers keep their place), standard output or standard
/// error. Each line is one `write(2)`, so lines from several threads do not interleave.
public final class AppendingLog: Sendable {
    /// The name used in messages: the path, `stdout` or `stderr`.
    public let name: String
    private let descriptor: Int32
    private let ownsDescriptor: Bool

    /// `-` is standard output, as in curl and nginx; any other value is a file, created (mode
    /// 0644 less the umask) if need be, and emptied first when `truncating` (curl's `-D`).
    /// Throws, with the path and the reason, when it cannot be opened for writing.
    public init(path: String, truncating: Bool = false) throws(OutputFileError) {
        if path == "-" {
            (name, descriptor, ownsDescriptor) = ("stdout", STDOUT_FILENO, false)
            return
        }
        let opened = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | (truncating ? O_TRUNC : 0), 0o644)
        guard opened >= 0 else { throw OutputFileError(name: path, code: errno) }
        (name, descriptor, ownsDescriptor) = (path, opened, true)
    }

    /// Standard error.
    public static let standardError = AppendingLog(name: "stderr", descriptor: STDERR_FILENO)

    private init(name: String, descriptor: Int32) {
        (self.name, self.descriptor, ownsDescriptor) = (name, descriptor, false)
    }

    deinit {
        if ownsDescriptor { close(descriptor) }
    }

    /// Appends `line`, which ends in its newline. A failed write loses the line, as a full disk
    /// loses nginx's.
    public func append(_ line: String) {
        writeWhole(line, to: descriptor)
    }
}
