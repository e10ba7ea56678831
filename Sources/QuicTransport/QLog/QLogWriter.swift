#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import Logging

/// Writes one connection's qlog trace, `<dir>/<odcid-hex>_<client|server>.sqlog`.
///
/// ngtcp2 0.12 produces the JSON-SEQ records (qlog 0.3: each record starts with the 0x1E record
/// separator, the first is the header). This sink only buffers them to the file: a 64 KiB stdio
/// buffer keeps a busy connection from doing one write(2) per packet. The file opens lazily on
/// the first record and closes after the record marked final (written inside `ngtcp2_conn_del`).
final class QLogWriter {
    enum VantagePoint: String { case client, server }

    let path: String
    /// The header's title (qlog main schema §3), which ngtcp2 0.12 does not write.
    private let title: String
    private var headerWritten = false
    private var file: UnsafeMutablePointer<FILE>?
    private var failed = false
    private let logger: Logger

    init(directory: String, originalDestinationConnectionID: QUICConnectionID, vantagePoint: VantagePoint, logger: Logger) {
        self.path = directory + "/" + originalDestinationConnectionID.hex + "_" + vantagePoint.rawValue + ".sqlog"
        self.title = "QuicTransport \(vantagePoint.rawValue) \(originalDestinationConnectionID.hex)"
        self.logger = logger
    }

    func write(_ bytes: UnsafeRawBufferPointer, final: Bool) {
        if file == nil && !failed { open() }
        guard let file else { return }
        if !headerWritten, bytes.count > 2, bytes[0] == 0x1E, bytes[1] == UInt8(ascii: "{") {
            // The first record is ngtcp2's header: give it a title after its opening brace.
            headerWritten = true
            let titleField = Array("\u{1E}{\"title\":\"\(title)\",".utf8)
            fwrite(titleField, 1, titleField.count, file)
            fwrite(bytes.baseAddress! + 2, 1, bytes.count - 2, file)
        } else if bytes.count > 0 {
            fwrite(bytes.baseAddress, 1, bytes.count, file)
        }
        if final { close() }
    }

    /// Pushes buffered records to the file, so a trace can be read as soon as its connection ends.
    func flush() {
        if let file { fflush(file) }
    }

    func close() {
        guard let file else { return }
        fclose(file)
        self.file = nil
    }

    private func open() {
        let directory = String(path[..<path.lastIndex(of: "/")!])
        mkdir(directory, 0o755)
        guard let handle = fopen(path, "w") else {
            failed = true
            logger.warning("cannot write qlog", metadata: ["path": "\(path)", "errno": "\(errno)"])
            return
        }
        setvbuf(handle, nil, _IOFBF, 64 * 1024)
        file = handle
    }

    deinit { close() }
}
