import NIOConcurrencyHelpers

extension NWProtocolQUIC {
    /// A QUIC application error code and reason (RFC 9000 §20.2), as Network.framework carries it:
    /// the code a stream is reset with, or the code and reason of a connection close.
    ///
    /// An integer literal is an error with that code and no reason, so
    /// `metadata.applicationError = 0x100` compiles as it does on Apple platforms.
    public struct ApplicationError: Sendable, Hashable, ExpressibleByIntegerLiteral, CustomStringConvertible {
        /// The application error code.
        public let code: UInt64
        /// The reason phrase; connection closes carry it (RFC 9000 §19.19), stream resets do not.
        public let reason: String?

        /// An application error with this code and, for connection closes, a reason phrase;
        /// matching Apple's `init(code:reason:)`.
        public init(code: UInt64, reason: String? = nil) {
            self.code = code
            self.reason = reason
        }

        public init(integerLiteral value: UInt64) {
            self.init(code: value)
        }

        public var description: String { reason.map { "\(code) (\($0))" } ?? "\(code)" }
    }

    /// What a tunnel and its streams report through QUIC metadata, and the settings made through it.
    ///
    /// Apple uses one `Metadata` class for a tunnel and for each of its streams; here every
    /// metadata object of a tunnel shares one instance of this, and a stream's object adds its
    /// stream identifier and reset code. The group copies the connection's figures in on its
    /// event loop (at the handshake, when stream credit moves and after a change made here), so
    /// reading them never blocks; they are a snapshot.
    // @unchecked Sendable: every stored property is guarded by `lock`.
    final class TunnelMetadata: @unchecked Sendable {
        /// A change made through metadata that the tunnel's connection has to carry out.
        enum Change: Sendable {
            case keepAlive(Metadata.KeepAliveBehavior)
            case localMaxStreams(bidirectional: Bool, UInt64)
        }

        private let lock = NIOLock()
        private var figures = QUICTunnelFigures()
        /// Stream limits asked for through metadata; shown at once, carried out on the loop.
        private var requestedLocalMaxStreams = (bidirectional: UInt64(0), unidirectional: UInt64(0))
        private var _keepAlive: Metadata.KeepAliveBehavior = .off
        private var _applicationError: ApplicationError?
        private var _securityMetadata: sec_protocol_metadata_t?
        private var apply: (@Sendable (Change) -> Void)?

        var current: QUICTunnelFigures { lock.withLock { figures } }

        /// The peer's cumulative stream limit of a kind: the connection's, or a raise asked for
        /// and not carried out yet (MAX_STREAMS never lowers a limit, RFC 9000 §4.6).
        func localMaxStreams(bidirectional: Bool) -> UInt64 {
            lock.withLock {
                bidirectional
                    ? max(figures.localMaxStreamsBidirectional, requestedLocalMaxStreams.bidirectional)
                    : max(figures.localMaxStreamsUnidirectional, requestedLocalMaxStreams.unidirectional)
            }
        }

        /// The raises asked for so far, for the group to carry out when it connects.
        var requestedLocalMaxStreamLimits: (bidirectional: UInt64, unidirectional: UInt64) {
            lock.withLock { requestedLocalMaxStreams }
        }

        /// Called on the tunnel's loop with fresh figures from the core, and once with the
        /// handshake's TLS metadata.
        func refresh(_ new: QUICTunnelFigures, security: sec_protocol_metadata_t?) {
            lock.withLock {
                figures = new
                if let security { _securityMetadata = security }
            }
        }

        /// Where changes go once the tunnel has a connection; changes made before that are kept and
        /// read back by the group when it connects (`keepAlive`, the raised limits).
        func setApplier(_ applier: (@Sendable (Change) -> Void)?) { lock.withLock { apply = applier } }

        var keepAlive: Metadata.KeepAliveBehavior {
            get { lock.withLock { _keepAlive } }
            set {
                let applier = lock.withLock { () -> (@Sendable (Change) -> Void)? in
                    _keepAlive = newValue
                    return apply
                }
                applier?(.keepAlive(newValue))
            }
        }

        func raiseLocalMaxStreams(bidirectional: Bool, to limit: UInt64) {
            let applier = lock.withLock { () -> (@Sendable (Change) -> Void)? in
                if bidirectional {
                    requestedLocalMaxStreams.bidirectional = max(requestedLocalMaxStreams.bidirectional, limit)
                } else {
                    requestedLocalMaxStreams.unidirectional = max(requestedLocalMaxStreams.unidirectional, limit)
                }
                return apply
            }
            applier?(.localMaxStreams(bidirectional: bidirectional, limit))
        }

        /// The error to close with, once set; or the peer's, once it closed with one.
        var applicationError: ApplicationError? {
            get { lock.withLock { _applicationError } }
            set { lock.withLock { _applicationError = newValue } }
        }

        var securityMetadata: sec_protocol_metadata_t? { lock.withLock { _securityMetadata } }
    }

    /// QUIC metadata of a tunnel (from `NWConnectionGroup.metadata(definition:)`) or of one of its
    /// streams (from `NWConnection.metadata(definition:)` or a received content context).
    ///
    /// Tunnel figures read the same through either. Stream limits follow RFC 9000 §4.6: they are
    /// cumulative counts of streams, as the MAX_STREAMS frame carries them.
    // @unchecked Sendable: the stream's fields sit behind `lock`; the tunnel's state guards its own.
    public final class Metadata: NWProtocolMetadata, @unchecked Sendable {
        /// Whether the tunnel sends PINGs while idle so that neither side's idle timeout ends it
        /// (RFC 9000 §10.1.2).
        public enum KeepAliveBehavior: Sendable, Hashable {
            /// PINGs after half the idle timeout without traffic (the lower of both sides').
            case on
            /// No keep-alive PINGs; the default.
            case off
            /// PINGs after this many seconds without traffic.
            case seconds(Int)
        }

        let tunnel: TunnelMetadata
        private let lock = NIOLock()
        private var _streamIdentifier: UInt64 = 0
        private var _streamApplicationError: UInt64?
        /// Whether a stream, and of which kind; nil for the tunnel's metadata.
        private let streamKind: StreamType?

        init(tunnel: TunnelMetadata, streamType: StreamType?) {
            self.tunnel = tunnel
            self.streamKind = streamType
        }

        override public var definition: NWProtocolDefinition { NWProtocolQUIC.definition }

        /// The kind of stream, or `.bidirectional` for the tunnel's metadata. Our addition;
        /// Apple apps read the second bit of `streamIdentifier` (RFC 9000 §2.1).
        public var streamType: StreamType { streamKind ?? .bidirectional }

        /// The QUIC stream ID (RFC 9000 §2.1): 0, 4, 8… client bidirectional, 2, 6… client
        /// unidirectional, 1, 5… server bidirectional, 3, 7… server unidirectional. 0 for the tunnel.
        public var streamIdentifier: UInt64 {
            get { lock.withLock { _streamIdentifier } }
            set { lock.withLock { _streamIdentifier = newValue } }
        }

        /// For a stream: the code to reset it with on `cancel()` (RESET_STREAM and STOP_SENDING,
        /// RFC 9000 §19.4–§19.5), or the peer's code once it reset the stream. For the tunnel:
        /// the code and reason `cancel()` closes with (CONNECTION_CLOSE, RFC 9000 §19.19), or the
        /// peer's once it closed with one. Code 0 and no reason until either happens.
        public var applicationError: ApplicationError {
            get { applicationErrorIfSet ?? ApplicationError(code: 0) }
            set { applicationErrorIfSet = newValue }
        }

        /// `applicationError`, nil while nobody has set it.
        var applicationErrorIfSet: ApplicationError? {
            get {
                if streamKind == nil { return tunnel.applicationError }
                return lock.withLock { _streamApplicationError.map { ApplicationError(code: $0) } }
            }
            set {
                if streamKind == nil {
                    tunnel.applicationError = newValue
                } else {
                    lock.withLock { _streamApplicationError = newValue?.code }
                }
            }
        }

        /// The ALPN protocol both sides agreed on (RFC 9001 §8.1); nil before the handshake.
        public var negotiatedALPN: String? {
            tunnel.securityMetadata?.negotiatedProtocol.map { String(cString: $0) }
        }

        /// The peer's `max_idle_timeout` transport parameter in milliseconds (RFC 9000 §10.1);
        /// 0 when the peer has none or before the handshake.
        public var remoteIdleTimeout: Int { Int(clamping: tunnel.current.remoteIdleTimeoutMilliseconds) }

        /// How many bidirectional streams the peer lets this side open in all (RFC 9000 §4.6).
        public var remoteMaxStreamsBidirectional: Int { Int(clamping: tunnel.current.remoteMaxStreamsBidirectional) }

        /// How many unidirectional streams the peer lets this side open in all (RFC 9000 §4.6).
        public var remoteMaxStreamsUnidirectional: Int { Int(clamping: tunnel.current.remoteMaxStreamsUnidirectional) }

        /// How many bidirectional streams this side lets the peer open in all (RFC 9000 §4.6).
        /// The limit rises by itself as the peer's streams finish; setting a higher value sends
        /// MAX_STREAMS at once. A lower value changes nothing, since limits never go down.
        public var localMaxStreamsBidirectional: Int {
            get { Int(clamping: tunnel.localMaxStreams(bidirectional: true)) }
            set { tunnel.raiseLocalMaxStreams(bidirectional: true, to: UInt64(max(0, newValue))) }
        }

        /// How many unidirectional streams this side lets the peer open in all; as
        /// `localMaxStreamsBidirectional`.
        public var localMaxStreamsUnidirectional: Int {
            get { Int(clamping: tunnel.localMaxStreams(bidirectional: false)) }
            set { tunnel.raiseLocalMaxStreams(bidirectional: false, to: UInt64(max(0, newValue))) }
        }

        /// The largest datagram payload `send(content:)` on the group can carry (RFC 9221 §3):
        /// bounded by the peer's `max_datagram_frame_size` and by a packet on the path, as of the
        /// last snapshot. 0 until the handshake completes, and when either side has datagrams off.
        public var usableDatagramFrameSize: Int { tunnel.current.usableDatagramFrameSize }

        /// Keep-alive PINGs for the tunnel; setting it on any of the tunnel's metadata applies to
        /// the tunnel, at once or when it connects.
        public var keepAlive: KeepAliveBehavior {
            get { tunnel.keepAlive }
            set { tunnel.keepAlive = newValue }
        }

        /// The TLS side of the tunnel: the negotiated protocol and, on clients, the server name.
        /// Before the handshake it reports nothing.
        public var securityProtocolMetadata: sec_protocol_metadata_t {
            tunnel.securityMetadata ?? sec_protocol_metadata_t(negotiated: nil)
        }
    }
}
