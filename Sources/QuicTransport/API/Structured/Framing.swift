import Foundation

/// Type–length–value messages on a stream, as Network.framework's `TLV` protocol: each message
/// has an integer type and a body, and arrives whole.
///
/// On the wire each message is a 4-byte type, a 4-byte length (both big-endian) and the body.
/// Apple does not document its own TLV's bytes, so this framing speaks to peers that use this
/// stack (either face) or implement the same eight-byte header.
public struct TLV: MessageProtocol {
    /// What a TLV message carries beside its body: its type.
    public struct Metadata: Sendable, Hashable {
        /// The message type.
        public var type: Int
        /// Metadata for a message of `type`.
        public init(type: Int) { self.type = type }
    }

    /// The largest body accepted; a longer one fails the receive with EMSGSIZE and resets
    /// nothing else. 16 MiB by default.
    public var maximumMessageSize: Int

    /// TLV framing over `stream`, for `openStream { stream in TLV(stream) }`.
    public init(_ stream: QUICStream = QUICStream(), maximumMessageSize: Int = 16 << 20) {
        self.maximumMessageSize = maximumMessageSize
    }

    /// Eight header bytes and the body; types and lengths must fit 32 bits.
    public func encode(_ content: Data, metadata: Metadata) throws -> Data {
        guard let type = UInt32(exactly: metadata.type), let length = UInt32(exactly: content.count) else {
            throw NWError.posix(.EMSGSIZE)
        }
        var bytes = Data(capacity: 8 + content.count)
        bytes.appendBigEndian(type)
        bytes.appendBigEndian(length)
        bytes.append(content)
        return bytes
    }

    /// One whole message off the front of `buffer`, or nil while it is incomplete.
    public func decode(_ buffer: inout Data) throws -> (content: Data, metadata: Metadata)? {
        guard buffer.count >= 8 else { return nil }
        let type = buffer.bigEndianUInt32(at: 0)
        let length = Int(buffer.bigEndianUInt32(at: 4))
        guard length <= maximumMessageSize else { throw NWError.posix(.EMSGSIZE) }
        guard let content = buffer.removeFrame(headerLength: 8, bodyLength: length) else { return nil }
        return (content, Metadata(type: Int(type)))
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

    /// Messages of type `Message` in `format`, for `openStream { _ in Coder(Request.self, using: .json) }`.
    public init(_ type: Message.Type, using format: Format, maximumMessageSize: Int = 16 << 20) {
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
        guard let length = UInt32(exactly: body.count) else { throw NWError.posix(.EMSGSIZE) }
        var bytes = Data(capacity: 4 + body.count)
        bytes.appendBigEndian(length)
        bytes.append(body)
        return bytes
    }

    /// One decoded value off the front of `buffer`, or nil while it is incomplete; throws the
    /// decoder's error for bytes that are not a `Message`.
    public func decode(_ buffer: inout Data) throws -> (content: Message, metadata: Metadata)? {
        guard buffer.count >= 4 else { return nil }
        let length = Int(buffer.bigEndianUInt32(at: 0))
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
    /// Sends one TLV message of `type`; `endOfStream` finishes this side after it.
    public func send(_ content: Data, type: Int, endOfStream: Bool = false) async throws {
        try await send(content, metadata: TLV.Metadata(type: type), endOfStream: endOfStream)
    }
}

extension QUIC.Stream {
    /// Sends one Codable message; `endOfStream` finishes this side after it.
    public func send<Message>(_ message: Message, endOfStream: Bool = false) async throws where ApplicationProtocol == Coder<Message> {
        try await send(message, metadata: Coder<Message>.Metadata(), endOfStream: endOfStream)
    }
}

extension Data {
    mutating func appendBigEndian(_ value: UInt32) {
        Swift.withUnsafeBytes(of: value.bigEndian) { append(contentsOf: $0) }
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

    func bigEndianUInt32(at offset: Int) -> UInt32 {
        var value: UInt32 = 0
        for byte in self[(startIndex + offset)..<(startIndex + offset + 4)] { value = value << 8 | UInt32(byte) }
        return value
    }
}
