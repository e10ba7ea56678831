#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import HTTPTypes
import Logging
import NIOConcurrencyHelpers
import NIOCore
import QuicTransport

/// A handler's answer: the head, then the body as bytes, a stream of pieces, or a file region,
/// and trailers.
public struct HTTP3ServerResponse: Sendable {
    /// The status and header fields.
    public var head: HTTPResponse {
        get { storage.head.response }
        set { uniqueStorage().head = .given(newValue) }
    }
    /// The head as given, or made and encoded ahead of time by whoever answers with the same
    /// head many times (`HTTP3FileHandler`, per open file). Any change to `head` leaves the
    /// prepared one.
    var storedHead: HTTP3ResponseHead { storage.head }
    /// The prepared head, while the response carries one.
    var prepared: HTTP3PreparedHead? {
        if case .prepared(let prepared) = storage.head { return prepared }
        return nil
    }
    /// The body bytes, sent before any `bodyStream`; empty by default.
    public var body: [UInt8] {
        get { storage.bodyBuffer.map { storage.body + Array(buffer: $0) } ?? storage.body }
        // In place, so appending to a response's body does not copy what it has.
        _modify {
            let storage = uniqueStorage()
            if let buffer = storage.bodyBuffer {
                storage.body += Array(buffer: buffer)
                storage.bodyBuffer = nil
            }
            yield &storage.body
        }
    }
    /// Body bytes in a NIO `ByteBuffer`, sent after `body` and before any `bodyStream`: for a
    /// framework whose responses hold one (Vapor), which would otherwise copy it into an array
    /// first. HTTP/3 sends the readable bytes from where they are, holding the buffer's storage
    /// until the peer has them; the buffer may be changed meanwhile, since a `ByteBuffer`
    /// copies storage it shares before writing.
    public var bodyBuffer: ByteBuffer? {
        get { storage.bodyBuffer }
        set { uniqueStorage().bodyBuffer = newValue.flatMap { $0.readableBytes > 0 ? $0 : nil } }
    }
    /// A body produced piece by piece, sent after `body`; the server pulls the next piece only
    /// while less than `HTTP3BodyPump.bufferLimit` (4 MiB) waits for acknowledgement.
    public var bodyStream: AsyncThrowingStream<[UInt8], any Error>? {
        get { storage.bodyStream }
        set {
            let storage = uniqueStorage()
            storage.bodyStream = newValue
            storage.hasBodyStream = newValue != nil
        }
    }
    /// The bytes of `body` as given, without those of `bodyBuffer`, which the getter adds.
    var givenBody: [UInt8] { storage.body }
    /// The bytes of `body` and `bodyBuffer`, without copying either.
    var bodyByteCount: Int { storage.body.count + (storage.bodyBuffer?.readableBytes ?? 0) }
    /// Whether the body goes on in a `bodyStream`.
    var hasBodyStream: Bool { storage.hasBodyStream }
    /// Whether it carries any content: bytes, a file or a stream.
    var hasContent: Bool { !storage.body.isEmpty || storage.bodyBuffer != nil || storage.file != nil || storage.hasBodyStream }
    /// Overrides the client's priority for this response (RFC 9218 §8: the server decides).
    public var priority: HTTPPriority? {
        get { storage.priority }
        set { uniqueStorage().priority = newValue }
    }
    /// Trailer fields sent after the body (RFC 9114 §4.1).
    public var trailers: HTTPFields? {
        get { storage.trailers }
        set { uniqueStorage().trailers = newValue }
    }
    /// Trailers known only once `bodyStream` has ended, as a framework's body writer gives them
    /// at its end: called right after the stream's last piece, and when it returns fields, they
    /// are sent after the body in place of `trailers`.
    public var trailersAfterBodyStream: (@Sendable () -> HTTPFields?)? {
        get { storage.trailersAfterBodyStream }
        set { uniqueStorage().trailersAfterBodyStream = newValue }
    }
    /// A file region sent as the body instead of `body` and `bodyStream` (`HTTP3FileHandler`
    /// sets it): HTTP/3 reads it as the client acknowledges, with no copy through the handler.
    package var file: HTTP3FileRegion? {
        get { storage.file }
        set { uniqueStorage().file = newValue }
    }

    /// Every part, behind one reference that copies share until one of them changes.
    ///
    /// Held inline, the parts made a response a large value: the server moved it from the
    /// handler through an optional, whose destruction went through the type's metadata (a
    /// call into its value witness), and each copy and destruction counted every reference
    /// in it. Behind one reference, a response the file handler keeps for a file (its 200 and
    /// its reply to HEAD) is handed out by counting that one reference.
    private var storage: Storage

    // @unchecked Sendable: a storage is changed only through `uniqueStorage()`, while one
    // response holds it; once shared, it is only read. For the same reason its properties
    // skip Swift's run-time exclusivity check: each read of one that the optimizer left
    // checked was a call into the runtime and a lookup of its thread-local access set.
    private final class Storage: @unchecked Sendable {
        @exclusivity(unchecked) var head: HTTP3ResponseHead
        @exclusivity(unchecked) var body: [UInt8]
        /// Never an empty buffer: `bodyBuffer`'s setter keeps nil instead.
        @exclusivity(unchecked) var bodyBuffer: ByteBuffer?
        @exclusivity(unchecked) var bodyStream: AsyncThrowingStream<[UInt8], any Error>?
        /// Kept apart from `bodyStream`: telling that stream from nil goes through its type's
        /// metadata (the concurrency library is built for library evolution), and every
        /// response asks.
        @exclusivity(unchecked) var hasBodyStream = false
        @exclusivity(unchecked) var priority: HTTPPriority?
        @exclusivity(unchecked) var trailers: HTTPFields?
        @exclusivity(unchecked) var trailersAfterBodyStream: (@Sendable () -> HTTPFields?)?
        @exclusivity(unchecked) var file: HTTP3FileRegion?

        init(head: HTTP3ResponseHead, body: [UInt8], file: HTTP3FileRegion?) {
            self.head = head
            self.body = body
            self.file = file
        }

        func copy() -> Storage {
            let copy = Storage(head: head, body: body, file: file)
            copy.bodyBuffer = bodyBuffer
            copy.bodyStream = bodyStream
            copy.hasBodyStream = hasBodyStream
            copy.priority = priority
            copy.trailers = trailers
            copy.trailersAfterBodyStream = trailersAfterBodyStream
            return copy
        }
    }

    /// The storage, made this response's own first if another shares it.
    private mutating func uniqueStorage() -> Storage {
        if !isKnownUniquelyReferenced(&storage) { storage = storage.copy() }
        return storage
    }

    /// A response with this head and body.
    public init(head: HTTPResponse, body: [UInt8] = []) {
        storage = Storage(head: .given(head), body: body, file: nil)
    }

    /// A response with a head made ahead of time, and a file region as its body or none.
    init(prepared: HTTP3PreparedHead, file: HTTP3FileRegion?) {
        storage = Storage(head: .prepared(prepared), body: [], file: file)
    }

    /// A response with this head and a file region as its body, or none.
    init(head: HTTPResponse, file: HTTP3FileRegion?) {
        storage = Storage(head: .given(head), body: [], file: file)
    }

    /// A response with this status, header fields and body.
    public init(status: HTTPResponse.Status, headerFields: HTTPFields = [:], body: [UInt8] = []) {
        self.init(head: HTTPResponse(status: status, headerFields: headerFields), body: body)
    }
}
