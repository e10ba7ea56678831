#if canImport(Glibc)
import Glibc
#endif

/// The qlog events a connection writes beside ngtcp2's own (qlog QUIC events, draft 0.3): the
/// records ngtcp2 0.12 leaves out, and those of layers above it (HTTP/3). Each is built only
/// while a trace is written, and stamped on ngtcp2's clock: milliseconds since `referenceTime`,
/// its `initial_ts`.
package struct QLogTrace {
    /// Where the records go; nil when the connection writes no trace.
    let writer: QLogWriter?
    /// The `initial_ts` ngtcp2's qlog times are relative to.
    let referenceTime: UInt64

    var isEnabled: Bool { writer != nil }
    var path: String? { writer?.path }

    /// Passes one of ngtcp2's own records on to the file.
    func write(_ record: UnsafeRawBufferPointer, final: Bool) { writer?.write(record, final: final) }
    func flush() { writer?.flush() }
    func close() { writer?.close() }

    /// Appends one event at `time` on the caller's clock. `data` is a JSON object, built only
    /// while a trace is written.
    func append(name: String, data: @autoclosure () -> String, at time: UInt64) {
        guard let writer else { return }
        // Whole milliseconds, truncated as ngtcp2 0.12 writes them, so the file stays in time order.
        let milliseconds = (time &- referenceTime) / 1_000_000
        let record = "\u{1E}{\"time\":\(milliseconds),\"name\":\"\(name)\",\"data\":\(data())}\n"
        let bytes = Array(record.utf8)
        bytes.withUnsafeBytes { writer.write($0, final: false) }
    }

    /// `connectivity:connection_started` (qlog QUIC events §3.2): the addresses ngtcp2 0.12 leaves out.
    func connectionStarted(path: QUICPath, isClient: Bool, at time: UInt64) {
        guard isEnabled else { return }
        let local = path.local
        let remote = path.remote
        let ipVersion = remote.family == AF_INET6 ? "ipv6" : "ipv4"
        let (src, dst) = isClient ? (local, remote) : (remote, local)
        append(
            name: "connectivity:connection_started",
            data: "{\"ip_version\":\"\(ipVersion)\",\"src_ip\":\"\(src.host)\",\"dst_ip\":\"\(dst.host)\",\"src_port\":\(src.port),\"dst_port\":\(dst.port)}",
            at: time
        )
    }

    /// `connectivity:path_updated` (qlog QUIC events §3.5): the connection moved to a new path
    /// (RFC 9000 §9). `old` and `new` are the address that changed: the peer's after NAT
    /// rebinding or the client's migration, our own after we migrated.
    func pathUpdated(from previous: QUICPath, to path: QUICPath, at time: UInt64) {
        guard isEnabled else { return }
        let (old, new) = previous.remote != path.remote ? (previous.remote, path.remote) : (previous.local, path.local)
        append(
            name: "connectivity:path_updated",
            data: "{\"old\":{\"ip\":\"\(old.host)\",\"port\":\(old.port)},\"new\":{\"ip\":\"\(new.host)\",\"port\":\(new.port)}}",
            at: time
        )
    }

    /// `security:key_updated` (qlog QUIC events §5.2). `owner` is whose secret it is: receiving
    /// keys are the peer's, sending keys ours.
    func keyUpdated(owner: String, level: String, generation: Int?, trigger: String, at time: UInt64) {
        guard isEnabled else { return }
        let generationField = generation.map { ",\"generation\":\($0)" } ?? ""
        append(
            name: "security:key_updated",
            data: "{\"key_type\":\"\(owner)_\(level)_secret\"\(generationField),\"trigger\":\"\(trigger)\"}",
            at: time
        )
    }

    /// `transport:alpn_information` once TLS has settled on a protocol.
    func alpnInformation(offered: [String], chosen: String?, isClient: Bool, at time: UInt64) {
        guard isEnabled else { return }
        let offeredList = offered.map { "{\"string_value\":\"\($0)\"}" }.joined(separator: ",")
        let chosenField = chosen.map { ",\"chosen_alpn\":{\"string_value\":\"\($0)\"}" } ?? ""
        let side = isClient ? "client_alpns" : "server_alpns"
        append(name: "transport:alpn_information", data: "{\"\(side)\":[\(offeredList)]\(chosenField)}", at: time)
    }

    /// `connectivity:connection_closed` (qlog QUIC events §3.4): owner, codes, reason and trigger.
    func connectionClosed(_ reason: QUICCloseReason, at time: UInt64) {
        guard isEnabled else { return }
        var fields: [String] = []
        switch reason {
        case .localApplicationClose(let code, let text):
            fields = ["\"owner\":\"local\"", "\"application_code\":\(code)", "\"reason\":\(Self.json(text))", "\"trigger\":\"clean\""]
        case .peerApplicationClose(let code, let text):
            fields = ["\"owner\":\"remote\"", "\"application_code\":\(code)", "\"reason\":\(Self.json(text))", "\"trigger\":\"clean\""]
        case .peerTransportClose(let code, let text):
            fields = ["\"owner\":\"remote\"", "\"connection_code\":\(code)", "\"reason\":\(Self.json(text))", "\"trigger\":\"error\""]
        case .localTransportError(let code, let text):
            fields = ["\"owner\":\"local\"", "\"connection_code\":\(code)", "\"reason\":\(Self.json(text))", "\"trigger\":\"error\""]
        case .handshakeFailed(let alert, let text, _):
            fields = ["\"owner\":\"local\"", "\"connection_code\":\(0x100 + UInt64(alert))", "\"reason\":\(Self.json(text))", "\"trigger\":\"error\""]
        case .idleTimeout, .handshakeTimeout:
            fields = ["\"owner\":\"local\"", "\"trigger\":\"idle_timeout\""]
        case .statelessReset:
            fields = ["\"owner\":\"remote\"", "\"trigger\":\"stateless_reset\""]
        case .versionNegotiationFailed:
            fields = ["\"owner\":\"local\"", "\"trigger\":\"version_mismatch\""]
        }
        append(name: "connectivity:connection_closed", data: "{" + fields.joined(separator: ",") + "}", at: time)
        // Readable now, although ngtcp2 adds its last record only when the connection is freed.
        flush()
    }

    /// A JSON string literal with the escapes RFC 8259 §7 requires, for qlog records.
    package static func json(_ text: String) -> String {
        var out = "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case _ where scalar.value < 0x20: out += "\\u" + String(repeating: "0", count: 4 - String(scalar.value, radix: 16).count) + String(scalar.value, radix: 16)
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out + "\""
    }
}
