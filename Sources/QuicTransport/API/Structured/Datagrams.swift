#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif

/// QUIC's unreliable datagrams (RFC 9221) as a protocol, as Network.framework's `QUICDatagram`:
/// the protocol of a `NetworkConnection<QUIC>`'s `datagrams` channel. Each send is one
/// datagram and each receive returns one, whole, or none if it was lost.
public struct QUICDatagram: OneToOneProtocol {
    /// What a received datagram carries beside its bytes: nothing yet.
    public struct Metadata: Sendable, Hashable {
        /// No metadata.
        public init() {}
    }

    /// The datagram protocol; connections add it themselves.
    public init() {}
}

extension QUIC {
    /// A QUIC tunnel's datagram channel (RFC 9221), as Network.framework's `QUIC.Datagrams`:
    /// `send(_:)` sends one datagram, and `receive()` or `messages` return the peer's.
    ///
    /// Datagrams are unreliable: a send returns once the datagram is queued, not when it
    /// arrives. The channel holds the newest `unreadLimit` datagrams nobody has received yet and
    /// drops older ones, so a peer cannot fill our memory with datagrams we do not read.
    // @unchecked Sendable: `parent` is Sendable; `unread` is touched only by the one receive
    // that `receiveTurn` lets through at a time.
    public final class Datagrams<ApplicationProtocol: OneToOneProtocol>: NetworkChannel<ApplicationProtocol>, @unchecked Sendable {
        /// How many received datagrams wait unread before the oldest are dropped.
        public static var unreadLimit: Int { 256 }

        /// The tunnel the datagrams travel on.
        public let parent: NetworkConnection<QUIC>
        private var unread: AsyncStream<Data>.AsyncIterator
        private let receiveTurn = AsyncTurnstile()

        init(parent: NetworkConnection<QUIC>, inbox: AsyncStream<Data>) {
            self.parent = parent
            self.unread = inbox.makeAsyncIterator()
            super.init(id: "\(parent.id)/datagrams", parameters: parent.parameters)
        }

        /// The largest datagram payload the peer accepts now (RFC 9221 §3), as Apple's
        /// `maximumDatagramSize`.
        public var maximumDatagramSize: Int { parent.usableDatagramFrameSize }

        /// Sends one datagram; it must fit `maximumDatagramSize`, or the send throws.
        public func send(_ content: some DataProtocol) async throws {
            try await parent.ready()
            try await parent.group.send(datagram: Data(content))
        }

        /// Receives the next datagram. Throws the error the tunnel failed with, or
        /// `NWError.posix(.ECANCELED)` once it has closed.
        public func receive() async throws -> (content: Data, metadata: QUICDatagram.Metadata) {
            guard let datagram = await next() else {
                if case .failed(let error) = parent.state { throw error }
                throw NWError.posix(.ECANCELED)
            }
            return (datagram, QUICDatagram.Metadata())
        }

        /// The datagrams still to come; the sequence ends when the tunnel closes.
        public var messages: AsyncThrowingStream<(content: Data, metadata: QUICDatagram.Metadata), any Error> {
            AsyncThrowingStream { await self.next().map { ($0, QUICDatagram.Metadata()) } }
        }

        private func next() async -> Data? {
            await receiveTurn.enter()
            defer { receiveTurn.leave() }
            return await unread.next()
        }
    }
}
