#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// What carries an `NWConnection` that is not a QUIC stream: a TCP, TLS-over-TCP or UDP socket.
///
/// The QUIC stream path stays inline in `NWConnection` (it is measured per instruction); a
/// connection made from TCP, TLS or UDP parameters hands every call to one of these instead.
/// Each method may be called from any thread; the transport hops to its own event loop.
protocol NWConnectionTransport: AnyObject, Sendable {
    /// Connects (outbound) or begins reading (accepted), as `start(queue:)` asks.
    func start()
    /// Sends `content`; `token` names the send for `abandon(token:)`.
    func send(
        content: Data?,
        contentContext: NWConnection.ContentContext,
        isComplete: Bool,
        completion: NWConnection.SendCompletion,
        delivery: CompletionDelivery,
        token: UInt64?
    )
    /// Waits for bytes (or one datagram); `minimum` `.max` asks for the whole message.
    func receive(
        minimum: Int, maximum: Int, completion: @escaping NWConnection.ReceiveCompletion, delivery: CompletionDelivery, token: UInt64?
    )
    /// An async caller's task was cancelled: a receive still waiting, or a send not yet handed
    /// to the socket, completes with `ECANCELED`; one already under way is left to finish.
    func abandon(token: UInt64)
    /// Ends the connection: TLS's close_notify, unless `force`, then the socket closes (FIN).
    func cancel(force: Bool)
    /// The metadata of one protocol of the stack, or nil.
    func metadata(definition: NWProtocolDefinition) -> NWProtocolMetadata?
}
