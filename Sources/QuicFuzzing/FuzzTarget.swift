import Foundation

/// The inputs from strangers that the stack parses, each as a fuzz target: libFuzzer drives
/// them through `quic-fuzz` (built by `scripts/fuzz` with `-sanitize=fuzzer,address`), and the
/// test suite replays the seed corpora and every crash found under `Fuzz/`.
///
/// A target returns normally for any input; a broken invariant stops the process with
/// `preconditionFailure`, which libFuzzer records as a crash and keeps the input.
package enum FuzzTarget: String, CaseIterable, Sendable {
    /// The server endpoint's datagram entry: routing, version negotiation, Retry, stateless
    /// reset and the connections it creates, with real ngtcp2 and GnuTLS on a virtual clock.
    case serverDatagram = "server-datagram"
    /// A client connection after its first Initial, fed datagrams as if from the server.
    case clientDatagram = "client-datagram"
    /// The HTTP/3 frame scanner (RFC 9114 §7.1) and the qlog events it feeds.
    case frames
    /// `Alt-Svc` field values (RFC 7838 §3).
    case altSvc = "alt-svc"
    /// Lines of the Alt-Svc cache file, in curl's format.
    case altSvcCache = "alt-svc-cache"
    /// DNS answers carrying HTTPS records (RFC 9460).
    case httpsRecord = "https-record"
    /// `priority` field values (RFC 9218 §4).
    case priority
    /// Session-ticket files, and the tickets in them handed to GnuTLS and ngtcp2 on resumption.
    case sessionTicket = "session-ticket"
    /// h3serve's mapping from a request path to a file; nothing may resolve outside the root.
    case requestPath = "request-path"

    /// Runs one input through the target.
    package func run(_ input: [UInt8]) {
        switch self {
        case .serverDatagram: ServerDatagramHarness.shared.run(input)
        case .clientDatagram: ClientDatagramHarness.shared.run(input)
        case .frames: ParserHarnesses.frames(input)
        case .altSvc: ParserHarnesses.altSvc(input)
        case .altSvcCache: ParserHarnesses.altSvcCacheLine(input)
        case .httpsRecord: ParserHarnesses.httpsRecord(input)
        case .priority: ParserHarnesses.priority(input)
        case .sessionTicket: ClientDatagramHarness.shared.resume(ticketFile: input)
        case .requestPath: RequestPathHarness.shared.run(input)
        }
    }
}

/// A sequence of datagrams in one fuzz input: each is a 2-byte big-endian length and that many
/// bytes; a length past the end takes what is left.
package struct DatagramSequence: Sequence {
    let bytes: [UInt8]

    package init(_ bytes: [UInt8]) { self.bytes = bytes }

    /// Encodes datagrams in the same form, for seeds.
    package static func encode(_ datagrams: [[UInt8]]) -> [UInt8] {
        datagrams.flatMap { [UInt8(truncatingIfNeeded: $0.count >> 8), UInt8(truncatingIfNeeded: $0.count)] + $0 }
    }

    package func makeIterator() -> AnyIterator<ArraySlice<UInt8>> {
        var offset = 0
        return AnyIterator {
            guard bytes.count - offset >= 2 else { return nil }
            let length = Int(bytes[offset]) << 8 | Int(bytes[offset + 1])
            let start = offset + 2
            let end = Swift.min(bytes.count, start + length)
            offset = end
            return bytes[start..<end]
        }
    }
}
