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

private func writeWhole(_ text: String, to descriptor: Int32) {
    var text = text
    text.withUTF8 { bytes in
        var offset = 0
        while offset < bytes.count {
            let written = write(descriptor, bytes.baseAddress! + offset, bytes.count - offset)
            if written < 0 && errno == EINTR { continue }
            // A closed or full pipe: the message is lost, as a failed FileHandle write would lose it.
            guard written > 0 else { return }
            offset += written
        }
    }
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
