import QuicTransport

/// The ALPN protocol ID for HTTP/3 (RFC 9114 §3.1).
public enum HTTP3 {
    /// `h3`, the ALPN protocol ID that selects HTTP/3 over QUIC (RFC 9114 §3.1).
    public static let alpn = "h3"

    /// QUIC parameters for an HTTP/3 client or server: ALPN `h3` and the stream limits RFC 9114 §6.2 needs
    /// (the control and two QPACK streams each way).
    public static func parameters() -> NWParameters {
        let options = NWProtocolQUIC.Options(alpn: [alpn])
        options.initialMaxStreamsUnidirectional = max(options.initialMaxStreamsUnidirectional, 3)
        return NWParameters(quic: options)
    }
}
