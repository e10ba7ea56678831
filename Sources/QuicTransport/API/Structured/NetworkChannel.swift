
/// What `NetworkConnection`, `QUIC.Stream` and `QUIC.Datagrams` have in common, as
/// Network.framework's `NetworkChannel` base class: a stable identity, the parameters the
/// tunnel was made with, and equality and hashing by that identity, so channels can key
/// dictionaries and sets. Sending and receiving live on the subclasses, whose top protocol
/// decides their shape.
// @unchecked Sendable: `id` and `parameters` are immutable; subclasses state their own invariants.
public class NetworkChannel<ApplicationProtocol: Sendable>: Hashable, Identifiable, CustomDebugStringConvertible, @unchecked Sendable {
    /// The channel's stable identity: a tunnel's is unique in the process, and a stream's or
    /// datagram channel's extends its tunnel's (`<tunnel>/stream/4`, `<tunnel>/datagrams`).
    public let id: String
    /// The parameters of the tunnel the channel belongs to.
    public let parameters: NWParameters

    init(id: String, parameters: NWParameters) {
        self.id = id
        self.parameters = parameters
    }

    /// Channels are equal when they are the same entity: two objects for one stream are equal.
    public static func == (lhs: NetworkChannel, rhs: NetworkChannel) -> Bool { lhs.id == rhs.id }

    public func hash(into hasher: inout Hasher) { hasher.combine(id) }

    /// The kind of channel and its identity, for logs.
    public var debugDescription: String { "\(Self.self)(\(id))" }
}
