#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import AsyncHTTPClient
import HTTPTypes
import NIOConcurrencyHelpers
import NIOCore
import QuicTransport

/// A response from `HTTPSession`, with the story of how it was fetched.
public struct HTTPSessionResponse: Sendable {
    /// The final response head: status and header fields. Over HTTP/3 it is built from the
    /// field section on first use, as ``HTTP3Response/head`` is.
    public var head: HTTPResponse {
        switch headSource {
        case .http3(let source): return source.head
        case .built(let head): return head
        }
    }
    /// The final response's status, read without building ``head``.
    public var status: HTTPResponse.Status {
        switch headSource {
        case .http3(let source): return source.status
        case .built(let head): return head.status
        }
    }
    private let headSource: HeadSource
    /// The response body, streamed as it arrives.
    public let body: Body
    /// The HTTP version that carried the response.
    public let version: HTTPVersionUsed
    /// Why HTTP/3 was tried, when it was.
    public let discovery: HTTP3Discovery?
    /// Why TCP carried the response although HTTP/3 was tried.
    public let fallbackReason: String?
    /// Things worth telling a verbose user: Alt-Svc learnt or ignored, DNS look-ups.
    public internal(set) var notes: [String]
    /// The HTTP/3 connection, when the response came over one.
    public let http3: HTTP3ConnectionInfo?
    let reprioritize: (@Sendable (HTTPPriority) async throws -> Void)?
    let collectStatistics: (@Sendable () async -> HTTP3ConnectionStatistics?)?

    /// Where the head comes from: an HTTP/3 field section, read on demand, or a head that the
    /// TCP client built.
    enum HeadSource: Sendable {
        case http3(HTTP3ResponseHeadSource)
        case built(HTTPResponse)
    }

    init(
        headSource: HeadSource, body: Body, version: HTTPVersionUsed, discovery: HTTP3Discovery?, fallbackReason: String?,
        notes: [String], http3: HTTP3ConnectionInfo?, reprioritize: (@Sendable (HTTPPriority) async throws -> Void)?,
        collectStatistics: (@Sendable () async -> HTTP3ConnectionStatistics?)?
    ) {
        self.headSource = headSource
        self.body = body
        self.version = version
        self.discovery = discovery
        self.fallbackReason = fallbackReason
        self.notes = notes
        self.http3 = http3
        self.reprioritize = reprioritize
        self.collectStatistics = collectStatistics
    }

    /// The `Alt-Svc` field's value (RFC 7838 §3), its lines joined by commas; nil without one.
    /// Over HTTP/3 it is read from the field section, with no head built.
    var altSvcValue: String? {
        switch headSource {
        case .http3(let source): return source.value(ofFieldNamed: "alt-svc")
        case .built(let head): return HTTPSession.altSvcValue(of: head.headerFields)
        }
    }

    /// The QUIC connection's reports when HTTP/3 carried the response; nil over TCP.
    public func statistics() async -> HTTP3ConnectionStatistics? {
        await collectStatistics?()
    }

    /// Sends PRIORITY_UPDATE over HTTP/3 (RFC 9218 §7); over TCP the priority set with the
    /// request stays, since async-http-client has no reprioritisation.
    public func updatePriority(_ priority: HTTPPriority) async throws {
        try await reprioritize?(priority)
    }

    /// The body as byte chunks, whichever version carried it.
    public struct Body: AsyncSequence, Sendable {
        public typealias Element = [UInt8]
        enum Source: Sendable {
            case http3(HTTP3ResponseBody)
            case tcp(HTTPClientResponse.Body)
        }
        let source: Source

        public func makeAsyncIterator() -> Iterator {
            switch source {
            case .http3(let body): return Iterator(base: .http3(body.makeAsyncIterator()))
            case .tcp(let body): return Iterator(base: .tcp(body.makeAsyncIterator()))
            }
        }

        /// Hands out the chunks in order from whichever transport carried the response.
        public struct Iterator: AsyncIteratorProtocol {
            enum Base {
                case http3(HTTP3ResponseBody.Iterator)
                case tcp(HTTPClientResponse.Body.AsyncIterator)
            }
            var base: Base

            public mutating func next() async throws -> [UInt8]? {
                switch base {
                case .http3(var iterator):
                    defer { base = .http3(iterator) }
                    return try await iterator.next()
                case .tcp(var iterator):
                    defer { base = .tcp(iterator) }
                    return try await iterator.next().map { Array($0.readableBytesView) }
                }
            }
        }

        /// The whole body.
        public func collect() async throws -> [UInt8] {
            var all: [UInt8] = []
            for try await chunk in self { all += chunk }
            return all
        }
    }
}
