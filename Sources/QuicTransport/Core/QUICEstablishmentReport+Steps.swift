#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

extension QUICEstablishmentReport {
    /// One name-resolution step, as Network.framework's `EstablishmentReport.Resolution`: here
    /// the one getaddrinfo query the connector makes for a host name.
    public struct Resolution: Sendable, Equatable {
        /// Where an answer came from, as Network.framework's `Resolution.Source`.
        public enum Source: Sendable, Hashable {
            /// Received from the network.
            case query
            /// Taken from a local cache.
            case cache
            /// Taken from a local cache after it had expired.
            case expiredCache
        }

        /// The transport the resolver used, as Network.framework's `Resolution.DNSProtocol`.
        public enum DNSProtocol: Sendable, Hashable {
            /// Not known.
            case unknown
            /// DNS over UDP.
            case udp
            /// DNS over TCP.
            case tcp
            /// DNS over TLS.
            case tls
            /// DNS over HTTPS.
            case https
        }

        /// Always `.query`: getaddrinfo(3) does not say whether an answer came from a cache
        /// (nscd, systemd-resolved) or the network.
        public let source: Source
        /// Seconds from issuing the query to having every answer.
        public let duration: TimeInterval
        /// How many usable addresses the query returned (those the IP version allows).
        public let endpointCount: Int
        /// The address the successful attempt used.
        public let successfulEndpoint: NWEndpoint
        /// The address tried first, the resolver's first answer.
        public let preferredEndpoint: NWEndpoint
        /// Always `.unknown`: getaddrinfo(3) does not say which transport the resolver used.
        public var dnsProtocol: DNSProtocol { .unknown }

        init(_ resolution: QUICEstablishmentAttempts.Resolution, successful: QUICSocketAddress) {
            source = .query
            duration = Duration.nanoseconds(Int64(resolution.duration)).timeInterval
            endpointCount = resolution.addresses.count
            successfulEndpoint = NWEndpoint(address: successful)
            preferredEndpoint = NWEndpoint(address: resolution.addresses.first ?? successful)
        }
    }

    /// One protocol's handshake, as Network.framework's `EstablishmentReport.Handshake`.
    public struct Handshake: Sendable, Equatable {
        /// The protocol: `NWProtocolQUIC.definition`, whose handshake carries TLS 1.3.
        public let definition: NWProtocolDefinition
        /// Seconds from the first Initial to handshake completion (RFC 9001 §4.1.1).
        public let handshakeDuration: TimeInterval
        /// The smoothed RTT, in seconds, when the handshake completed (RFC 9002 §5.3).
        public let handshakeRTT: TimeInterval
    }
}

extension Duration {
    /// The duration in seconds, as Foundation's `TimeInterval`.
    var timeInterval: TimeInterval {
        let (seconds, attoseconds) = components
        return TimeInterval(seconds) + TimeInterval(attoseconds) / 1e18
    }
}
