#if canImport(Glibc)
import Glibc
#endif
import NIOCore

/// TCP beside QUIC: the options and metadata of Network.framework's `NWProtocolTCP`, for the
/// control channels apps open next to a tunnel (`NWParameters.tcp`, `NWParameters(tls:tcp:)`).
// @unchecked Sendable: a namespace with no stored instance state, as Apple's class is.
public final class NWProtocolTCP: @unchecked Sendable {
    /// TCP's definition, matching Apple's `NWProtocolTCP.definition`.
    public static let definition = NWProtocolDefinition(name: "tcp")

    /// TCP options, matching Apple's `NWProtocolTCP.Options`; set them before a connection or
    /// listener is made from the parameters, which reads them when it starts.
    ///
    /// Linux note: each member maps to the Linux socket option named in its documentation. Those
    /// Linux lacks (`noOptions`, `persistTimeout`, `retransmitFinDrop`, `disableAckStretching`,
    /// `disableECN`, `multipathForceVersion`) are stored and read back, and do nothing.
    // @unchecked Sendable: a configuration object filled in on one thread before use.
    public final class Options: NWProtocolOptions, @unchecked Sendable {
        /// Turns Nagle's algorithm off (`TCP_NODELAY`, RFC 896): small writes go out at once.
        public var noDelay = false
        /// Holds partial segments back until a full one or the end (BSD's `TCP_NOPUSH`; here
        /// Linux's `TCP_CORK`, which also sends what it holds after 200 ms).
        public var noPush = false
        /// BSD's `TCP_NOOPT` (no TCP options in the SYN). Linux has no such switch: stored only.
        public var noOptions = false
        /// Sends keep-alive probes on an idle connection (`SO_KEEPALIVE`, RFC 1122 §4.2.3.6).
        public var enableKeepalive = false
        /// Unanswered probes before the connection is dropped (`TCP_KEEPCNT`); 0 keeps the system's.
        public var keepaliveCount = 0
        /// Idle seconds before the first probe (`TCP_KEEPIDLE`); 0 keeps the system's.
        public var keepaliveIdle = 0
        /// Seconds between probes (`TCP_KEEPINTVL`); 0 keeps the system's.
        public var keepaliveInterval = 0
        /// The largest segment to send, in bytes (`TCP_MAXSEG`); 0 keeps the path's.
        public var maximumSegmentSize = 0
        /// Seconds a connection attempt may take before it fails with `ETIMEDOUT`; 0 for the
        /// system's limit (SYN retries).
        public var connectionTimeout = 0
        /// Seconds unacknowledged data may wait before the connection is dropped
        /// (`TCP_USER_TIMEOUT`, RFC 5482); 0 keeps the system's.
        public var connectionDropTime = 0
        /// Seconds of zero-window probing before the connection is dropped (BSD's
        /// `TCP_PERSIST_TIMEOUT`). Linux has no such option: stored only (`connectionDropTime`
        /// covers it there).
        public var persistTimeout = 0
        /// Drops the connection when a FIN goes unacknowledged (Apple's `TCP_RXT_FINDROP`).
        /// Linux has no such option: stored only (`tcp_fin_timeout` is system-wide).
        public var retransmitFinDrop = false
        /// Acknowledges every segment instead of stretching acknowledgements. Linux's
        /// `TCP_QUICKACK` does not persist, so this is stored only.
        public var disableAckStretching = false
        /// TCP Fast Open (RFC 7413): clients send their first bytes in the SYN
        /// (`TCP_FASTOPEN_CONNECT`), listeners accept them (`TCP_FASTOPEN`).
        public var enableFastOpen = false
        /// Turns ECN negotiation off. Linux decides ECN system-wide (`net.ipv4.tcp_ecn`): stored only.
        public var disableECN = false
        /// The Multipath TCP version to force, as Apple's `multipathForceVersion`. Not on Linux
        /// here (MPTCP needs `IPPROTO_MPTCP` when the socket is made): stored only.
        public var multipathForceVersion: NWMultipathVersion?

        /// Default TCP options: Nagle on, no keep-alive, the system's timeouts.
        override public init() {}

        /// The socket options these settings ask of each connection's socket, set before it
        /// connects or once it is accepted.
        var socketOptions: [(level: Int32, name: Int32, value: Int32)] {
            var options: [(level: Int32, name: Int32, value: Int32)] = []
            let tcp = Int32(IPPROTO_TCP)
            if noDelay { options.append((tcp, TCP_NODELAY, 1)) }
            if noPush { options.append((tcp, TCP_CORK, 1)) }
            if enableKeepalive {
                options.append((SOL_SOCKET, SO_KEEPALIVE, 1))
                if keepaliveCount > 0 { options.append((tcp, TCP_KEEPCNT, Int32(clamping: keepaliveCount))) }
                if keepaliveIdle > 0 { options.append((tcp, TCP_KEEPIDLE, Int32(clamping: keepaliveIdle))) }
                if keepaliveInterval > 0 { options.append((tcp, TCP_KEEPINTVL, Int32(clamping: keepaliveInterval))) }
            }
            if maximumSegmentSize > 0 { options.append((tcp, TCP_MAXSEG, Int32(clamping: maximumSegmentSize))) }
            if connectionDropTime > 0 { options.append((tcp, TCP_USER_TIMEOUT, Int32(clamping: connectionDropTime * 1000))) }
            return options
        }

        /// TCP Fast Open's option: a client's socket sends data in its SYN, a listening socket
        /// accepts such SYNs with a queue of 16 pending requests.
        func fastOpenOption(listening: Bool) -> (level: Int32, name: Int32, value: Int32)? {
            guard enableFastOpen else { return nil }
            return listening ? (Int32(IPPROTO_TCP), TCP_FASTOPEN, 16) : (Int32(IPPROTO_TCP), Self.fastOpenConnect, 1)
        }

        /// `TCP_FASTOPEN_CONNECT` (Linux 4.11), which Glibc's headers do not name.
        private static let fastOpenConnect: Int32 = 30
    }

    /// What a TCP connection reports, matching Apple's `NWProtocolTCP.Metadata`.
    // @unchecked Sendable: the figures are read through a closure onto the connection's state.
    public final class Metadata: NWProtocolMetadata, @unchecked Sendable {
        private let figures: @Sendable () -> (receive: Int, send: Int)

        init(figures: @escaping @Sendable () -> (receive: Int, send: Int)) { self.figures = figures }

        override public var definition: NWProtocolDefinition { NWProtocolTCP.definition }

        /// Bytes received and not yet read by the app. Linux note: counted in our receive
        /// buffer, where Apple reads the socket's.
        public var availableReceiveBuffer: UInt32 { UInt32(clamping: figures().receive) }
        /// Bytes handed to `send` and not yet written to the socket. Linux note: counted in our
        /// send queue, where Apple reads the socket's free space.
        public var availableSendBuffer: UInt32 { UInt32(clamping: figures().send) }
    }
}

/// Multipath TCP versions, matching Apple's `NWMultipathVersion`; stored, not used, on Linux.
public enum NWMultipathVersion: Hashable, Sendable {
    /// Unspecified: the system's choice.
    case unspecified
    /// Multipath TCP version 0 (RFC 6824).
    case version0
    /// Multipath TCP version 1 (RFC 8684).
    case version1
}
