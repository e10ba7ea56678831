#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// A protocol that carries one sequence of data between two ends: a QUIC stream, or a framing
/// protocol over one. As in Network.framework, `NetworkChannel`s are generic over it.
public protocol OneToOneProtocol: Sendable {}

/// A byte-stream protocol: `receive(atLeast:atMost:)` returns bytes with per-receive metadata.
public protocol StreamProtocol: OneToOneProtocol {
    /// What a receive reports beside its bytes (for QUIC streams, `endOfStream`).
    associatedtype Metadata: Sendable
}

/// A message protocol (`TLV`, `Coder`): each send is one message, and the receiver gets whole
/// messages back, typed as `ContentType`. It cuts messages out of a stream's bytes and back,
/// holding no state of its own between calls.
public protocol MessageProtocol: OneToOneProtocol {
    /// The type of one message's content.
    associatedtype ContentType: Sendable
    /// What a received message carries beside its content (for `TLV`, its type).
    associatedtype Metadata: Sendable

    /// The bytes that carry one message.
    func encode(_ content: ContentType, metadata: Metadata) throws -> Data

    /// Takes one whole message off the front of `buffer`, or returns nil when more bytes are
    /// needed. Throws when the bytes cannot be a message.
    func decode(_ buffer: inout Data) throws -> (content: ContentType, metadata: Metadata)?
}

extension StreamProtocol {
    /// What a receive returns: the bytes and their metadata, as Apple's `Message<Data>`.
    public typealias Message<Content> = (content: Content, metadata: Metadata)
}

extension MessageProtocol {
    /// One received message and its metadata, as Apple's `Message<ContentType>`.
    public typealias Message<Content> = (content: Content, metadata: Metadata)
}

/// Builds a protocol stack in a closure, as Network.framework's `ProtocolStackBuilder`: the
/// closure's one expression is the top protocol, which holds the ones below it.
@resultBuilder
public enum ProtocolStackBuilder<Top> {
    /// The stack is its top protocol.
    public static func buildBlock(_ top: Top) -> Top { top }
    /// A single expression is the top protocol.
    public static func buildExpression(_ top: Top) -> Top { top }
}
