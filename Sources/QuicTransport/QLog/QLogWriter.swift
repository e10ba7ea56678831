#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import CQuicLinux
import CQuicShims
import Glibc
import Logging

/// Writes one connection's qlog trace, `<dir>/<odcid-hex>_<client|server>.sqlog`.
///
/// ngtcp2 0.12 produces the JSON-SEQ records (qlog 0.3: each record starts with the 0x1E record
/// separator, the first is the header). This sink buffers whole records and hands them to
/// write(2) 64 KiB at a time, so a busy connection does not make one system call per packet and
/// the file always ends on a record boundary, even when the process dies. (stdio buffering was
/// not safe here: exit() flushes FILE buffers without their locks while the event loop may still
/// be writing, which interleaved records.) The file opens lazily on the first record and closes
/// after the record marked final (written inside `ngtcp2_conn_del`); nothing reopens it.
final class QLogWriter {
    enum VantagePoint: String { case client, server }

    let path: String
    /// The header's title (qlog main schema §3), which ngtcp2 0.12 does not write.
    private let title: String
    private var headerWritten = false
    private var descriptor: Int32 = -1
    private var buffer: [UInt8] = []
    /// Set once the file could not be opened or has been closed: later records are dropped.
    private var finished = false
    private let logger: Logger
    private static let flushThreshold = 64 * 1024

    init(directory: String, originalDestinationConnectionID: QUICConnectionID, vantagePoint: VantagePoint, logger: Logger) {
        self.path = directory + "/" + originalDestinationConnectionID.hex + "_" + vantagePoint.rawValue + ".sqlog"
        self.title = "QuicTransport \(vantagePoint.rawValue) \(originalDestinationConnectionID.hex)"
        self.logger = logger
        buffer.reserveCapacity(Self.flushThreshold + 4096)
    }

    func write(_ bytes: UnsafeRawBufferPointer, final: Bool) {
        if descriptor < 0 && !finished { open() }
        guard descriptor >= 0 else { return }
        if !headerWritten, bytes.count > 2, bytes[0] == 0x1E, bytes[1] == UInt8(ascii: "{") {
            // The first record is ngtcp2's header: give it a title after its opening brace, and
            // write it at once, so even a process that dies early leaves a trace viewers open.
            headerWritten = true
            buffer += Array("\u{1E}{\"title\":\"\(title)\",".utf8)
            buffer += bytes[2...]
            flush()
            return
        } else {
            buffer += bytes
        }
        if final {
            close()
        } else if buffer.count >= Self.flushThreshold || Self.monotonicSeconds() - lastFlush >= 1 {
            // At least once a second, so a trace of a process that dies loses one second at most.
            flush()
        }
    }

    /// Pushes buffered records to the file, so a trace can be read as soon as its connection ends.
    func flush() {
        guard descriptor >= 0, !buffer.isEmpty else { return }
        var offset = 0
        buffer.withUnsafeBytes { raw in
            while offset < raw.count {
                let written = Glibc.write(descriptor, raw.baseAddress! + offset, raw.count - offset)
                if written < 0 {
                    if errno == EINTR { continue }
                    logger.warning("cannot write qlog", metadata: ["path": "\(path)", "errno": "\(errno)"])
                    break
                }
                offset += written
            }
        }
        buffer.removeAll(keepingCapacity: true)
        lastFlush = Self.monotonicSeconds()
    }

    private var lastFlush = QLogWriter.monotonicSeconds()

    private static func monotonicSeconds() -> Double {
        var spec = timespec()
        clock_gettime(CLOCK_MONOTONIC_COARSE, &spec)
        return Double(spec.tv_sec) + Double(spec.tv_nsec) / 1e9
    }

    func close() {
        guard descriptor >= 0 else { return }
        flush()
        _ = Glibc.close(descriptor)
        descriptor = -1
        finished = true
    }

    private func open() {
        let directory = String(path[..<path.lastIndex(of: "/")!])
        try? FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        descriptor = Glibc.open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        if descriptor < 0 {
            finished = true
            logger.warning("cannot write qlog", metadata: ["path": "\(path)", "errno": "\(errno)"])
        }
    }

    deinit { close() }
}
