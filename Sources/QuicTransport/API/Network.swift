/// Network.framework's module name, so code that qualifies a name to disambiguate it
/// (`Network.NWConnection`, `Network.NWEndpoint.Port`, `Network.NWProtocolQUIC.Options`)
/// compiles with `import QuicTransport` in place of `import Network`.
///
/// It is an enum with no cases whose members are the Apple-named public types of this module,
/// and not a module called `Network`: a module of that name would make `#if canImport(Network)`
/// true for every package in the build, and swift-nio-transport-services and async-http-client
/// would then compile their Apple-only code on Linux. With this enum, `canImport(Network)` stays
/// false, and `Network.X` finds the enum when no module named `Network` is imported.
///
/// Only Network.framework's own names are here, and its one free function,
/// `withNetworkConnection(to:using:_:)`. Security's C API (`sec_protocol_options_*`,
/// `SecTrust`) and our QUIC additions (`QUICError`, `QUICEstablishmentReport`, …) are not;
/// `NetworkNamespaceTests` fails when a new public type is neither here nor listed as ours.
public enum Network {
    // MARK: The classic API (iOS 12 and later)

    /// `Network.NWConnection`, this module's ``QuicTransport/NWConnection``.
    public typealias NWConnection = QuicTransport.NWConnection
    /// `Network.NWConnectionGroup`, this module's ``QuicTransport/NWConnectionGroup``.
    public typealias NWConnectionGroup = QuicTransport.NWConnectionGroup
    /// `Network.NWEndpoint`, this module's ``QuicTransport/NWEndpoint``.
    public typealias NWEndpoint = QuicTransport.NWEndpoint
    /// `Network.NWError`, this module's ``QuicTransport/NWError``.
    public typealias NWError = QuicTransport.NWError
    /// `Network.NWGroupDescriptor`, this module's ``QuicTransport/NWGroupDescriptor``.
    public typealias NWGroupDescriptor = QuicTransport.NWGroupDescriptor
    /// `Network.NWInterface`, this module's ``QuicTransport/NWInterface``.
    public typealias NWInterface = QuicTransport.NWInterface
    /// `Network.NWListener`, this module's ``QuicTransport/NWListener``.
    public typealias NWListener = QuicTransport.NWListener
    /// `Network.NWMultiplexGroup`, this module's ``QuicTransport/NWMultiplexGroup``.
    public typealias NWMultiplexGroup = QuicTransport.NWMultiplexGroup
    /// `Network.NWParameters`, this module's ``QuicTransport/NWParameters``.
    public typealias NWParameters = QuicTransport.NWParameters
    /// `Network.NWPath`, this module's ``QuicTransport/NWPath``.
    public typealias NWPath = QuicTransport.NWPath
    /// `Network.NWProtocolDefinition`, this module's ``QuicTransport/NWProtocolDefinition``.
    public typealias NWProtocolDefinition = QuicTransport.NWProtocolDefinition
    /// `Network.NWProtocolIP`, this module's ``QuicTransport/NWProtocolIP``.
    public typealias NWProtocolIP = QuicTransport.NWProtocolIP
    /// `Network.NWProtocolMetadata`, this module's ``QuicTransport/NWProtocolMetadata``.
    public typealias NWProtocolMetadata = QuicTransport.NWProtocolMetadata
    /// `Network.NWProtocolOptions`, this module's ``QuicTransport/NWProtocolOptions``.
    public typealias NWProtocolOptions = QuicTransport.NWProtocolOptions
    /// `Network.NWProtocolQUIC`, this module's ``QuicTransport/NWProtocolQUIC``.
    public typealias NWProtocolQUIC = QuicTransport.NWProtocolQUIC
    /// `Network.NWProtocolUDP`, this module's ``QuicTransport/NWProtocolUDP``.
    public typealias NWProtocolUDP = QuicTransport.NWProtocolUDP

    /// `Network.NWProtocolTCP`, this module's ``QuicTransport/NWProtocolTCP``.
    public typealias NWProtocolTCP = QuicTransport.NWProtocolTCP
    /// `Network.NWProtocolTLS`, this module's ``QuicTransport/NWProtocolTLS``.
    public typealias NWProtocolTLS = QuicTransport.NWProtocolTLS
    /// `Network.NWMultipathVersion`, this module's ``QuicTransport/NWMultipathVersion``.
    public typealias NWMultipathVersion = QuicTransport.NWMultipathVersion
    /// `Network.NWBrowser`, this module's ``QuicTransport/NWBrowser``.
    public typealias NWBrowser = QuicTransport.NWBrowser
    /// `Network.NWTXTRecord`, this module's ``QuicTransport/NWTXTRecord``.
    public typealias NWTXTRecord = QuicTransport.NWTXTRecord
    /// `Network.IPAddress`, this module's ``QuicTransport/IPAddress``.
    public typealias IPAddress = QuicTransport.IPAddress
    /// `Network.IPv4Address`, this module's ``QuicTransport/IPv4Address``.
    public typealias IPv4Address = QuicTransport.IPv4Address
    /// `Network.IPv6Address`, this module's ``QuicTransport/IPv6Address``.
    public typealias IPv6Address = QuicTransport.IPv6Address

    // MARK: The structured-concurrency API (iOS and macOS 26)

    /// `Network.NetworkChannel`, this module's ``QuicTransport/NetworkChannel``.
    public typealias NetworkChannel = QuicTransport.NetworkChannel
    /// `Network.NetworkConnection`, this module's ``QuicTransport/NetworkConnection``.
    public typealias NetworkConnection = QuicTransport.NetworkConnection
    /// `Network.NetworkListener`, this module's ``QuicTransport/NetworkListener``.
    public typealias NetworkListener = QuicTransport.NetworkListener
    /// `Network.QUIC`, this module's ``QuicTransport/QUIC``.
    public typealias QUIC = QuicTransport.QUIC
    /// `Network.QUICStream`, this module's ``QuicTransport/QUICStream``.
    public typealias QUICStream = QuicTransport.QUICStream
    /// `Network.QUICDatagram`, this module's ``QuicTransport/QUICDatagram``.
    public typealias QUICDatagram = QuicTransport.QUICDatagram
    /// `Network.TLS`, this module's ``QuicTransport/TLS``.
    public typealias TLS = QuicTransport.TLS
    /// `Network.UDP`, this module's ``QuicTransport/UDP``.
    public typealias UDP = QuicTransport.UDP
    /// `Network.IP`, this module's ``QuicTransport/IP``.
    public typealias IP = QuicTransport.IP
    /// `Network.TLV`, this module's ``QuicTransport/TLV``.
    public typealias TLV = QuicTransport.TLV
    /// `Network.Coder`, this module's ``QuicTransport/Coder``.
    public typealias Coder = QuicTransport.Coder
    /// `Network.ProtocolStackBuilder`, this module's ``QuicTransport/ProtocolStackBuilder``.
    public typealias ProtocolStackBuilder = QuicTransport.ProtocolStackBuilder
    /// `Network.OneToOneProtocol`, this module's ``QuicTransport/OneToOneProtocol``.
    public typealias OneToOneProtocol = QuicTransport.OneToOneProtocol
    /// `Network.StreamProtocol`, this module's ``QuicTransport/StreamProtocol``.
    public typealias StreamProtocol = QuicTransport.StreamProtocol
    /// `Network.MessageProtocol`, this module's ``QuicTransport/MessageProtocol``.
    public typealias MessageProtocol = QuicTransport.MessageProtocol

    /// `Network.withNetworkConnection(to:using:_:)`, this module's
    /// ``QuicTransport/withNetworkConnection(to:using:_:)``.
    public static func withNetworkConnection<Result: Sendable>(
        to endpoint: QuicTransport.NWEndpoint,
        @QuicTransport.ProtocolStackBuilder<QuicTransport.QUIC> using stack: () -> QuicTransport.QUIC,
        _ body: (QuicTransport.NetworkConnection<QuicTransport.QUIC>) async throws -> Result
    ) async throws -> Result {
        try await QuicTransport.withNetworkConnection(to: endpoint, using: stack, body)
    }
}
