#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif

/// Type–length–value messages on a stream, as Network.framework's `TLV` protocol: each message
/// has an integer type and a body, and arrives whole.
///
/// On the wire each message is the type, the body's length (both big-endian unsigned integers,
/// of the widths given to `init(type:length:_:)`, 4 bytes each by default) and the body. Apple
/// does not document its own TLV's bytes, so this framing speaks to peers that use this stack
/// (either face) or implement the same header.
public struct TLV: MessageProtocol {
    /// What a TLV message carries beside its body.
    public struct Metadata: Sendable, Hashable {
        /// The message type.
        public var type: Int
        /// The body's length in bytes; on a send it is taken from the content.
        public var length: Int
        /// Metadata for a message of `type`.
        public init(type: Int, length: Int = 0) {
            self.type = type
            self.length = length
        }
    }

    /// Bytes in the type field.
    public let typeFieldSize: Int
    /// Bytes in the length field.
    public let lengthFieldSize: Int
    /// The largest body accepted; a longer one fails the receive with EMSGSIZE and resets
    /// nothing else. 16 MiB by default, and never more than the length field can say.
    public var maximumMessageSize: Int

    /// TLV framing with `type` and `length` fields of these unsigned integer types, over the
    /// stream the builder gives: `TLV(type: UInt8.self, length: UInt16.self) { stream }`.
    public init<T: UnsignedInteger & FixedWidthInteger & Sendable, L: UnsignedInteger & FixedWidthInteger & Sendable>(
        type: T.Type,
        length: L.Type,
        maximumMessageSize: Int = 16 << 20,
        @ProtocolStackBuilder<QUICStream> _ below: () -> QUICStream = { QUICStream() }
    ) {
        precondition(T.bitWidth <= 32 && L.bitWidth <= 32, "TLV fields are at most 32 bits wide")
        typeFieldSize = T.bitWidth / 8
        lengthFieldSize = L.bitWidth / 8
        self.maximumMessageSize = min(maximumMessageSize, Int(L.max))
    }

    /// TLV framing with 4-byte type and length fields over the stream the builder gives:
    /// `openStream { stream in TLV { stream } }`.
    public init(maximumMessageSize: Int = 16 << 20, @ProtocolStackBuilder<QUICStream> _ below: () -> QUICStream = { QUICStream() }) {
        self.init(type: UInt32.self, length: UInt32.self, maximumMessageSize: maximumMessageSize, below)
    }

    private var headerSize: Int { typeFieldSize + lengthFieldSize }

    /// The header and the body; throws EMSGSIZE when the type or length does not fit its field.
    public func encode(_ content: Data, metadata: Metadata) throws -> Data {
        guard metadata.type >= 0, metadata.type >> (typeFieldSize * 8) == 0, content.count <= maximumMessageSize else {
            throw NWError.posix(.EMSGSIZE)
        }
        var bytes = Data(capacity: headerSize + content.count)
        bytes.appendBigEndian(UInt64(metadata.type), width: typeFieldSize)
        bytes.appendBigEndian(UInt64(content.count), width: lengthFieldSize)
        bytes.append(content)
        return bytes
    }

    /// One whole message off the front of `buffer`, or nil while it is incomplete.
    public func decode(_ buffer: inout Data) throws -> (content: Data, metadata: Metadata)? {
        guard buffer.count >= headerSize else { return nil }
        let type = Int(buffer.bigEndianInteger(at: 0, width: typeFieldSize))
        let length = Int(buffer.bigEndianInteger(at: typeFieldSize, width: lengthFieldSize))
        guard length <= maximumMessageSize else { throw NWError.posix(.EMSGSIZE) }
        guard let content = buffer.removeFrame(headerLength: headerSize, bodyLength: length) else { return nil }
        return (content, Metadata(type: type, length: length))
    }
}

/// Codable messages on a stream, as Network.framework's `Coder` protocol: `send(value)` on one
/// side, `for try await message in stream.messages` on the other, with `message.content`
/// typed as `Message`.
///
/// On the wire each message is a 4-byte big-endian length and the encoded value (JSON or a
/// binary property list).
public struct Coder<Message: Codable & Sendable>: MessageProtocol {
    /// How values are encoded.
    public enum Format: Sendable {
        /// JSON (RFC 8259), with `JSONEncoder` and `JSONDecoder`.
        case json
        /// A binary property list, with `PropertyListEncoder` and `PropertyListDecoder`.
        case propertyList
    }

    /// Coder messages carry nothing beside their content.
    public struct Metadata: Sendable, Hashable {
        /// No metadata.
        public init() {}
    }

    /// The encoding.
    public let format: Format
    /// The largest encoded message accepted; a longer one fails the receive with EMSGSIZE.
    public var maximumMessageSize: Int

    /// Messages of type `Message` in `format` over the stream the builder gives:
    /// `openStream { stream in Coder(Request.self, using: .json) { stream } }`.
    public init(
        _ type: Message.Type,
        using format: Format,
        maximumMessageSize: Int = 16 << 20,
        @ProtocolStackBuilder<QUICStream> _ below: () -> QUICStream = { QUICStream() }
    ) {
        self.format = format
        self.maximumMessageSize = maximumMessageSize
    }

    /// The 4-byte length and the encoded value.
    public func encode(_ content: Message, metadata: Metadata) throws -> Data {
        let body: Data
        switch format {
        case .json: body = try JSONEncoder().encode(content)
        case .propertyList:
            let encoder = PropertyListEncoder()
            encoder.outputFormat = .binary
            body = try encoder.encode(content)
        }
        guard body.count <= maximumMessageSize else { throw NWError.posix(.EMSGSIZE) }
        var bytes = Data(capacity: 4 + body.count)
        bytes.appendBigEndian(UInt64(body.count), width: 4)
        bytes.append(body)
        return bytes
    }

    /// One decoded value off the front of `buffer`, or nil while it is incomplete; throws the
    /// decoder's error for bytes that are not a `Message`.
    public func decode(_ buffer: inout Data) throws -> (content: Message, metadata: Metadata)? {
        guard buffer.count >= 4 else { return nil }
        let length = Int(buffer.bigEndianInteger(at: 0, width: 4))
        guard length <= maximumMessageSize else { throw NWError.posix(.EMSGSIZE) }
        guard let body = buffer.removeFrame(headerLength: 4, bodyLength: length) else { return nil }
        let value: Message
        switch format {
        case .json: value = try JSONDecoder().decode(Message.self, from: body)
        case .propertyList: value = try PropertyListDecoder().decode(Message.self, from: body)
        }
        return (value, Metadata())
    }
}

extension QUIC.Stream where ApplicationProtocol == TLV {
    /// Sends one TLV message of `type`, as Apple's `send(_:type:lastMessage:)`; `lastMessage`
    /// finishes this side (FIN) after it.
    public func send(_ content: some DataProtocol, type: Int, lastMessage: Bool = false) async throws {
        try await send(Data(content), metadata: TLV.Metadata(type: type), lastMessage: lastMessage)
    }
}

extension QUIC.Stream {
    /// Sends one Codable message, as Apple's `send(_:)`; `lastMessage` finishes this side (FIN)
    /// after it, an addition.
    public func send<Message>(_ message: Message, lastMessage: Bool = false) async throws where ApplicationProtocol == Coder<Message> {
        try await send(message, metadata: Coder<Message>.Metadata(), lastMessage: lastMessage)
    }
}

extension Data {
    /// Appends the low `width` bytes of `value`, most significant first.
    mutating func appendBigEndian(_ value: UInt64, width: Int) {
        for shift in stride(from: (width - 1) * 8, through: 0, by: -8) { append(UInt8(truncatingIfNeeded: value >> UInt64(shift))) }
    }

    /// Takes a header and the body after it off the front, returning the body; nil, taking
    /// nothing, while the buffer holds less than both.
    mutating func removeFrame(headerLength: Int, bodyLength: Int) -> Data? {
        guard count >= headerLength + bodyLength else { return nil }
        let start = startIndex
        let body = Data(self[(start + headerLength)..<(start + headerLength + bodyLength)])
        removeSubrange(start..<(start + headerLength + bodyLength))
        return body
    }

    /// The big-endian unsigned integer in the `width` bytes at `offset`.
    func bigEndianInteger(at offset: Int, width: Int) -> UInt64 {
        var value: UInt64 = 0
        for byte in self[(startIndex + offset)..<(startIndex + offset + width)] { value = value << 8 | UInt64(byte) }
        return value
    }
}
