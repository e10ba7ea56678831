/// The non-QUIC stacks apps open beside a tunnel: TCP, TLS over TCP and UDP, with Apple's
/// initialisers and class properties. A stack with QUIC options among its application protocols
/// is QUIC; any other is served by a socket of its transport protocol.
extension NWParameters {
    /// TLS over TCP, or plain TCP when `tls` is nil, matching Apple's `init(tls:tcp:)`.
    public convenience init(tls: NWProtocolTLS.Options?, tcp: NWProtocolTCP.Options = NWProtocolTCP.Options()) {
        self.init(quic: NWProtocolQUIC.Options())
        defaultProtocolStack.applicationProtocols = tls.map { [$0] } ?? []
        defaultProtocolStack.transportProtocol = tcp
    }

    /// DTLS over UDP, or plain UDP when `dtls` is nil, matching Apple's `init(dtls:udp:)`.
    /// Linux note: DTLS is not offered; a connection or listener with DTLS options fails when
    /// it starts, with `NWError.tls`.
    public convenience init(dtls: NWProtocolTLS.Options?, udp: NWProtocolUDP.Options = NWProtocolUDP.Options()) {
        self.init(quic: NWProtocolQUIC.Options())
        defaultProtocolStack.applicationProtocols = dtls.map { [$0] } ?? []
        defaultProtocolStack.transportProtocol = udp
    }

    /// Plain TCP with default options, matching Apple's `NWParameters.tcp`.
    public static var tcp: NWParameters { NWParameters(tls: nil) }
    /// TLS over TCP with default options (system trust store), matching Apple's `NWParameters.tls`.
    public static var tls: NWParameters { NWParameters(tls: NWProtocolTLS.Options()) }
    /// Plain UDP: each send is one datagram, each `receiveMessage` one datagram, matching
    /// Apple's `NWParameters.udp`.
    public static var udp: NWParameters { NWParameters(dtls: nil) }
    /// DTLS over UDP, matching Apple's `NWParameters.dtls`. Linux note: refused at start (see
    /// `init(dtls:udp:)`).
    public static var dtls: NWParameters { NWParameters(dtls: NWProtocolTLS.Options()) }

    /// The socket stack these parameters ask for, or nil for QUIC.
    var socketStack: NWSocketStack? {
        let application = defaultProtocolStack.applicationProtocols
        if application.contains(where: { $0 is NWProtocolQUIC.Options }) { return nil }
        let tls = application.lazy.compactMap { $0 as? NWProtocolTLS.Options }.first
        switch defaultProtocolStack.transportProtocol {
        case let tcp as NWProtocolTCP.Options: return .tcp(tcp, tls: tls)
        case is NWProtocolUDP.Options: return .udp(dtls: tls)
        default: return nil
        }
    }
}

/// The socket protocols under a non-QUIC `NWConnection` or `NWListener`.
enum NWSocketStack {
    /// TCP, with TLS over it when the options are given.
    case tcp(NWProtocolTCP.Options, tls: NWProtocolTLS.Options?)
    /// UDP; DTLS options, when given, are refused at start.
    case udp(dtls: NWProtocolTLS.Options?)

    /// The TLS options over TCP, if any.
    var tlsOptions: NWProtocolTLS.Options? {
        if case .tcp(_, let tls) = self { return tls }
        return nil
    }
}
