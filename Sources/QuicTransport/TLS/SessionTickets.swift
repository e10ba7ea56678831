#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import CQuicShims
import Synchronization
#if canImport(Glibc)
import Glibc
#endif
import NIOConcurrencyHelpers

/// The client side of TLS 1.3 session resumption (RFC 8446 §2.2, RFC 9001 §4.5): the tickets
/// servers sent, per server, with the transport parameters 0-RTT must respect (RFC 9000 §7.4.1),
/// in memory or also in a file so a later process can resume.
///
/// File format, one line per server: `KEY TICKET PARAMETERS CHECK`, KEY being `host:port`,
/// TICKET GnuTLS's session data in base64, PARAMETERS the remembered transport parameters as
/// comma-separated numbers (`-` when unknown) and CHECK the SHA-256 of the ticket's bytes in hex.
/// The file is replaced atomically after each new ticket; unreadable lines are skipped.
///
/// CHECK is there because GnuTLS 3.7.9 trusts session data: `gnutls_session_set_data` on a
/// damaged ticket can abort the process on an assertion or leave a session that crashes when
/// freed (both found by the session-ticket fuzz target). So only bytes GnuTLS itself gave us
/// reach it; a line whose ticket does not match its CHECK, or that has none (older files), is
/// skipped and costs one full handshake. It protects against damage, not against someone who
/// can write the file: keep it private, as a ticket lets its holder resume.
public final class QUICSessionTicketStore: Sendable {
    /// A ticket and what the server allowed when it was issued.
    public struct Entry: Sendable, Equatable {
        /// The session to resume with, as GnuTLS's session data (the ticket and what goes with it).
        public var ticket: [UInt8]
        /// The server's transport parameters that bound 0-RTT (RFC 9000 §7.4.1); nil when unknown,
        /// and then the client resumes without 0-RTT.
        public var transportParameters: QUICRememberedTransportParameters?
    }

    private let entries = NIOLockedValueBox([String: Entry]())
    /// The file tickets are loaded from and saved to; nil keeps them in memory only.
    public let path: String?

    /// A store in memory and, with `path`, in that file too: its tickets are loaded now, and a
    /// missing or unreadable file starts the store empty.
    public init(path: String? = nil) {
        self.path = path
        guard let path, let text = try? String(contentsOfFile: path, encoding: .utf8) else { return }
        let loaded = Self.entries(parsing: text)
        entries.withLockedValue { $0 = loaded }
    }

    /// The entries of a ticket file's text, by server; unreadable lines, and tickets that do not
    /// match their check, are skipped.
    package static func entries(parsing text: String) -> [String: Entry] {
        var loaded: [String: Entry] = [:]
        for line in text.split(separator: "\n") {
            let parts = line.split(separator: " ")
            guard parts.count == 4, let data = Data(base64Encoded: String(parts[1])), !data.isEmpty,
                Hex.decode(parts[3]) == (try? SHA256.hash(Array(data)))
            else { continue }
            loaded[String(parts[0])] = Entry(ticket: Array(data), transportParameters: QUICRememberedTransportParameters(text: String(parts[2])))
        }
        return loaded
    }

    /// One line of the file for `entry`.
    static func line(for entry: Entry, key: String) -> String {
        let check = (try? SHA256.hash(entry.ticket)).map { Hex.encode($0) } ?? "-"
        return "\(key) \(Data(entry.ticket).base64EncodedString()) \(entry.transportParameters?.text ?? "-") \(check)\n"
    }

    /// What was saved for `server` (`host:port`), if anything.
    public func entry(for server: String) -> Entry? {
        entries.withLockedValue { $0[server] }
    }

    /// Keeps `entry` as the one to resume `server` with, and saves the file.
    public func store(_ entry: Entry, for server: String) {
        save(entries.withLockedValue { entries in
            entries[server] = entry
            return entries
        })
    }

    /// Forgets `server`'s ticket, in the file too.
    public func remove(for server: String) {
        save(entries.withLockedValue { entries in
            entries[server] = nil
            return entries
        })
    }

    /// Replaces the file, if there is one, with `snapshot`.
    private func save(_ snapshot: [String: Entry]) {
        guard let path else { return }
        let text = snapshot.sorted { $0.key < $1.key }.map { key, entry in Self.line(for: entry, key: key) }.joined()
        try? Data(text.utf8).write(to: URL(fileURLWithPath: path), options: [.atomic])
        chmod(path, 0o600)
    }
}

/// The server's transport parameters that bound 0-RTT data on a resumed connection
/// (RFC 9000 §7.4.1), as `ngtcp2_conn_set_early_remote_transport_params` needs them.
public struct QUICRememberedTransportParameters: Sendable, Equatable {
    /// The server's `initial_max_streams_bidi` (RFC 9000 §18.2).
    public var initialMaxStreamsBidirectional: UInt64
    /// The server's `initial_max_streams_uni` (RFC 9000 §18.2).
    public var initialMaxStreamsUnidirectional: UInt64
    /// The server's `initial_max_stream_data_bidi_local` (RFC 9000 §18.2): bytes per stream it
    /// opens.
    public var initialMaxStreamDataBidirectionalLocal: UInt64
    /// The server's `initial_max_stream_data_bidi_remote` (RFC 9000 §18.2): bytes per
    /// bidirectional stream the client opens.
    public var initialMaxStreamDataBidirectionalRemote: UInt64
    /// The server's `initial_max_stream_data_uni` (RFC 9000 §18.2): bytes per unidirectional
    /// stream.
    public var initialMaxStreamDataUnidirectional: UInt64
    /// The server's `initial_max_data` (RFC 9000 §18.2): bytes on the whole connection.
    public var initialMaxData: UInt64
    /// The server's `active_connection_id_limit` (RFC 9000 §18.2).
    public var activeConnectionIDLimit: UInt64
    /// The server's `max_datagram_frame_size` (RFC 9221 §3); 0 when it offered no datagrams.
    public var maxDatagramFrameSize: UInt64

    init(_ params: ngtcp2_transport_params) {
        initialMaxStreamsBidirectional = params.initial_max_streams_bidi
        initialMaxStreamsUnidirectional = params.initial_max_streams_uni
        initialMaxStreamDataBidirectionalLocal = params.initial_max_stream_data_bidi_local
        initialMaxStreamDataBidirectionalRemote = params.initial_max_stream_data_bidi_remote
        initialMaxStreamDataUnidirectional = params.initial_max_stream_data_uni
        initialMaxData = params.initial_max_data
        activeConnectionIDLimit = params.active_connection_id_limit
        maxDatagramFrameSize = params.max_datagram_frame_size
    }

    var values: [UInt64] {
        [initialMaxStreamsBidirectional, initialMaxStreamsUnidirectional, initialMaxStreamDataBidirectionalLocal,
         initialMaxStreamDataBidirectionalRemote, initialMaxStreamDataUnidirectional, initialMaxData,
         activeConnectionIDLimit, maxDatagramFrameSize]
    }

    var text: String { values.map(String.init).joined(separator: ",") }

    init?(text: String) {
        let numbers = text.split(separator: ",").compactMap { UInt64($0) }
        guard numbers.count == 8 else { return nil }
        (initialMaxStreamsBidirectional, initialMaxStreamsUnidirectional) = (numbers[0], numbers[1])
        (initialMaxStreamDataBidirectionalLocal, initialMaxStreamDataBidirectionalRemote) = (numbers[2], numbers[3])
        (initialMaxStreamDataUnidirectional, initialMaxData) = (numbers[4], numbers[5])
        (activeConnectionIDLimit, maxDatagramFrameSize) = (numbers[6], numbers[7])
    }

    /// ngtcp2's form, defaults elsewhere.
    var ngtcp2: ngtcp2_transport_params {
        var params = ngtcp2_transport_params()
        cqs_ngtcp2_transport_params_default(&params)
        params.initial_max_streams_bidi = initialMaxStreamsBidirectional
        params.initial_max_streams_uni = initialMaxStreamsUnidirectional
        params.initial_max_stream_data_bidi_local = initialMaxStreamDataBidirectionalLocal
        params.initial_max_stream_data_bidi_remote = initialMaxStreamDataBidirectionalRemote
        params.initial_max_stream_data_uni = initialMaxStreamDataUnidirectional
        params.initial_max_data = initialMaxData
        params.active_connection_id_limit = activeConnectionIDLimit
        params.max_datagram_frame_size = maxDatagramFrameSize
        return params
    }
}

/// The single owner of a server's session-ticket encryption key (RFC 8446 §4.6.1), shared by all
/// connections of every worker of one address, so a ticket issued on one resumes on another.
package final class TLSSessionTicketKey: @unchecked Sendable {
    // @unchecked Sendable: `datum` is written once in init and only read afterwards.
    private(set) var datum = gnutls_datum_t()

    init() throws {
        let rv = gnutls_session_ticket_key_generate(&datum)
        if rv < 0 { throw TLSError.gnutlsFailure(function: "gnutls_session_ticket_key_generate", code: rv) }
    }

    deinit {
        if let data = datum.data {
            // The key is secret: clear it before handing the memory back.
            memset(data, 0, Int(datum.size))
            cqs_gnutls_free(data)
        }
    }
}

/// The single owner of a server's 0-RTT replay protection (RFC 8446 §8): GnuTLS checks each
/// ClientHello carrying early data against a time window and asks this cache whether it has
/// seen it; a repeat is refused early data (it still gets a full 1-RTT handshake).
///
/// The cache lives in memory, one per listening address, shared by its workers: a replay to
/// another server process, or after a restart, is not caught. That is why accepting early data
/// is the application's choice.
package final class TLSAntiReplay: Sendable {
    // `raw` is set once in init and only handed to GnuTLS after; GnuTLS calls `add` from
    // handshakes on every worker's loop, so `seen` is behind a mutex.
    nonisolated(unsafe) let raw: gnutls_anti_replay_t?
    private let seen = Mutex<[Data: time_t]>([:])

    init() throws {
        var made: gnutls_anti_replay_t?
        let rv = gnutls_anti_replay_init(&made)
        raw = made
        if rv < 0 { throw TLSError.gnutlsFailure(function: "gnutls_anti_replay_init", code: rv) }
        gnutls_anti_replay_set_ptr(raw, Unmanaged.passUnretained(self).toOpaque())
        gnutls_anti_replay_set_add_function(raw) { pointer, expiry, key, _ in
            guard let pointer, let key, let bytes = key.pointee.data else { return 0 }
            let cache = Unmanaged<TLSAntiReplay>.fromOpaque(pointer).takeUnretainedValue()
            return cache.add(Data(bytes: bytes, count: Int(key.pointee.size)), expiry: expiry)
        }
    }

    /// 0 when `key` is new; GNUTLS_E_DB_ENTRY_EXISTS when it is a replay.
    private func add(_ key: Data, expiry: time_t) -> Int32 {
        let now = time(nil)
        return seen.withLock { seen in
            if seen.count > 10_000 { seen = seen.filter { $0.value > now } }
            if let until = seen[key], until > now { return GNUTLS_E_DB_ENTRY_EXISTS }
            seen[key] = expiry
            return 0
        }
    }

    deinit { gnutls_anti_replay_deinit(raw) }
}
