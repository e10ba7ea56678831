#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

extension NWConnectionGroup {
    /// A message sent or received on a group, as in Network.framework; for QUIC, a datagram
    /// (RFC 9221) on the tunnel. A received message knows the tunnel's endpoints and can be
    /// answered with `reply(content:message:)`.
    // @unchecked Sendable: immutable after init.
    public final class Message: NWConnection.ContentContext, @unchecked Sendable {
        /// The message to send when nothing in particular is needed.
        public static let `default` = Message()

        /// The tunnel a received message came on; nil for messages made to send.
        weak var group: NWConnectionGroup?
        /// The peer that sent a received message; nil for messages you send.
        public let remoteEndpoint: NWEndpoint?
        /// The local address a received message arrived at; nil for messages you send.
        public let localEndpoint: NWEndpoint?
        /// The path a received message arrived over, as Apple's `path`; nil for messages you send.
        /// Made when read, so datagrams nobody asks about cost no interface lookup.
        public var path: NWPath? { receivedPath.map { NWPath($0) } }
        private let receivedPath: QUICPath?

        /// A message to send, with Network.framework's send properties.
        override public init(
            identifier: String = "",
            expiration: UInt64 = 0,
            priority: Double = 0.5,
            isFinal: Bool = false,
            antecedent: NWConnection.ContentContext? = nil,
            metadata: [NWProtocolMetadata]? = []
        ) {
            self.group = nil
            self.remoteEndpoint = nil
            self.localEndpoint = nil
            self.receivedPath = nil
            super.init(
                identifier: identifier, expiration: expiration, priority: priority, isFinal: isFinal,
                antecedent: antecedent, metadata: metadata
            )
        }

        /// A datagram received on `group`'s tunnel over `path`; on the group's loop.
        init(received group: NWConnectionGroup, path: QUICPath?) {
            self.group = group
            self.remoteEndpoint = path.map { NWEndpoint(address: $0.remote) }
            self.localEndpoint = path.map { NWEndpoint(address: $0.local) }
            self.receivedPath = path
            super.init(identifier: "datagram", isFinal: true, metadata: group.metadata(definition: NWProtocolQUIC.definition).map { [$0] })
        }

        /// The attached metadata of one protocol; for a received message, the tunnel's QUIC metadata.
        public func metadata(definition: NWProtocolDefinition) -> NWProtocolMetadata? {
            protocolMetadata(definition: definition)
        }

        /// Sends `content` back to the peer that sent this message, as a datagram on its tunnel.
        /// Does nothing for a message that was not received.
        public func reply(content: Data?, message: NWConnectionGroup.Message = .default) {
            group?.send(content: content, message: message) { _ in }
        }

        /// A connection to the sender: a new outbound stream on the message's tunnel, nil while the
        /// tunnel cannot open one. A QUIC tunnel keeps delivering its datagrams to the group.
        public func extractConnection() -> NWConnection? {
            NWConnection(message: self)
        }
    }
}
