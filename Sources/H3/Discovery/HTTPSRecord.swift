#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Dispatch
#if canImport(Glibc)
import Glibc
#endif

/// A DNS HTTPS resource record (RFC 9460, type 65): how to reach a service before the first
/// connection, including whether it speaks HTTP/3 (`alpn=h3`) and on which port.
public struct HTTPSRecord: Hashable, Sendable {
    /// 0 is AliasMode (the record only names another host); 1 and up is ServiceMode, lower first.
    public var priority: UInt16
    /// The target host; "." means the owner name itself (RFC 9460 §2.5).
    public var target: String
    /// The `alpn` SvcParam: protocol IDs the service offers, such as `h3` (RFC 9460 §7.1);
    /// empty when absent.
    public var alpn: [String] = []
    /// The `no-default-alpn` SvcParam: the default protocol (`http/1.1`) is not offered, only
    /// those in `alpn` (RFC 9460 §7.1).
    public var noDefaultALPN = false
    /// The `port` SvcParam (RFC 9460 §7.2); nil means the origin's own port.
    public var port: UInt16?
    /// The `ipv4hint` SvcParam: IPv4 addresses in dotted-decimal form (RFC 9460 §7.3); empty
    /// when absent.
    public var ipv4Hints: [String] = []
    /// The `ipv6hint` SvcParam: IPv6 addresses in text form (RFC 9460 §7.3); empty when absent.
    public var ipv6Hints: [String] = []

    /// Whether this is an AliasMode record, priority 0, that only names another host
    /// (RFC 9460 §2.4.2).
    public var isAlias: Bool { priority == 0 }

    /// SvcParamKeys (RFC 9460 §14.3.2).
    enum Key: UInt16 {
        case mandatory = 0, alpn = 1, noDefaultALPN = 2, port = 3, ipv4Hint = 4, ech = 5, ipv6Hint = 6
    }

    /// Parses the RDATA of one HTTPS record (RFC 9460 §2.2); nil when it is malformed.
    static func parse(rdata: ArraySlice<UInt8>, message: [UInt8]) -> HTTPSRecord? {
        var reader = DNSReader(message: message, position: rdata.startIndex)
        let end = rdata.endIndex
        guard let priority = reader.readUInt16(), let target = reader.readName() else { return nil }
        var record = HTTPSRecord(priority: priority, target: target)
        var lastKey: Int = -1
        while reader.position < end {
            guard let key = reader.readUInt16(), let length = reader.readUInt16(),
                reader.position + Int(length) <= end, Int(key) > lastKey
            else { return nil }  // Keys must be strictly increasing (RFC 9460 §2.2).
            lastKey = Int(key)
            let value = Array(message[reader.position..<(reader.position + Int(length))])
            reader.position += Int(length)
            switch Key(rawValue: key) {
            case .alpn:
                var index = 0
                while index < value.count {
                    let count = Int(value[index])
                    guard count > 0, index + 1 + count <= value.count else { return nil }
                    record.alpn.append(String(decoding: value[(index + 1)..<(index + 1 + count)], as: UTF8.self))
                    index += 1 + count
                }
            case .noDefaultALPN:
                record.noDefaultALPN = true
            case .port:
                guard value.count == 2 else { return nil }
                record.port = UInt16(value[0]) << 8 | UInt16(value[1])
            case .ipv4Hint:
                guard value.count % 4 == 0, !value.isEmpty else { return nil }
                record.ipv4Hints = stride(from: 0, to: value.count, by: 4).map { value[$0..<($0 + 4)].map(String.init).joined(separator: ".") }
            case .ipv6Hint:
                guard value.count % 16 == 0, !value.isEmpty else { return nil }
                record.ipv6Hints = stride(from: 0, to: value.count, by: 16).map { start in
                    var address = in6_addr()
                    withUnsafeMutableBytes(of: &address) { $0.copyBytes(from: value[start..<(start + 16)]) }
                    var text = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
                    inet_ntop(AF_INET6, &address, &text, socklen_t(text.count))
                    return String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
                }
            case .mandatory, .ech, nil:
                continue  // Not needed to connect; unknown keys are skipped (RFC 9460 §2.2).
            }
        }
        return record
    }
}

/// Looks up HTTPS records over UDP DNS (RFC 1035 §4, RFC 9460 §9), following AliasMode.
public struct HTTPSRecordResolver: Sendable {
    /// Why a lookup failed, in words: the DNS server was not found, refused or did not answer in time,
    /// the name or the answer was malformed, or the aliases went on for more than 8 steps.
    public struct Failure: Error, Sendable, CustomStringConvertible {
        public let description: String
    }

    /// The DNS server as host and port.
    public let server: (host: String, port: UInt16)
    /// How long to wait for the answer to each query, alias steps included; 1 s by default.
    public let timeout: Duration

    /// A resolver that asks `server` and waits up to `timeout` for each answer.
    public init(server: (host: String, port: UInt16), timeout: Duration = .seconds(1)) {
        self.server = server
        self.timeout = timeout
    }

    /// The first `nameserver` in /etc/resolv.conf, port 53.
    public static func system() throws -> HTTPSRecordResolver {
        let text = (try? String(contentsOfFile: "/etc/resolv.conf", encoding: .utf8)) ?? ""
        for line in text.split(separator: "\n") {
            let parts = line.split(separator: " ", omittingEmptySubsequences: true)
            if parts.count >= 2, parts[0] == "nameserver" { return HTTPSRecordResolver(server: (String(parts[1]), 53)) }
        }
        throw Failure(description: "no nameserver in /etc/resolv.conf; pass --dns-server host:port")
    }

    /// ServiceMode records for `host` (`_PORT._https.host` when the port is not 443), best
    /// first, after following at most 8 aliases (RFC 9460 §2.4.2). Empty when there are none.
    public func lookup(host: String, port: UInt16 = 443) async throws -> [HTTPSRecord] {
        var name = port == 443 ? host : "_\(port)._https.\(host)"
        for _ in 0..<8 {
            let records = try await query(name: name)
            if let alias = records.first(where: \.isAlias) {
                guard alias.target != "." && alias.target != name else { return [] }
                name = alias.target
                continue
            }
            return records.sorted { $0.priority < $1.priority }
        }
        throw Failure(description: "HTTPS record aliases for \(host) go on for more than 8 steps")
    }

    /// One query and its answers.
    func query(name: String) async throws -> [HTTPSRecord] {
        let id = UInt16.random(in: 0...UInt16.max)
        guard let question = DNSMessage.query(id: id, name: name, type: 65) else {
            throw Failure(description: "'\(name)' is not a valid DNS name")
        }
        let server = self.server
        let (seconds, attoseconds) = timeout.components
        let microseconds = Int(seconds) * 1_000_000 + Int(attoseconds / 1_000_000_000_000)
        return try await withCheckedThrowingContinuation { continuation in
            DispatchQueue.global().async {
                continuation.resume(with: Result {
                    let response = try DNSMessage.exchange(question, with: server, timeoutMicroseconds: microseconds)
                    return try DNSMessage.httpsRecords(in: response, id: id)
                })
            }
        }
    }
}

/// The few pieces of the DNS wire format (RFC 1035 §4.1) an HTTPS-record lookup needs.
package enum DNSMessage {
    static func query(id: UInt16, name: String, type: UInt16) -> [UInt8]? {
        var message: [UInt8] = [UInt8(id >> 8), UInt8(id & 0xff), 0x01, 0x00, 0x00, 0x01, 0, 0, 0, 0, 0, 0]
        let labels = name.split(separator: ".", omittingEmptySubsequences: true)
        guard !labels.isEmpty else { return nil }
        for label in labels {
            let bytes = Array(label.utf8)
            guard !bytes.isEmpty, bytes.count <= 63 else { return nil }
            message.append(UInt8(bytes.count))
            message += bytes
        }
        message += [0, UInt8(type >> 8), UInt8(type & 0xff), 0x00, 0x01]
        return message
    }

    /// Sends `query` over UDP and waits for the answer with the same ID.
    static func exchange(_ query: [UInt8], with server: (host: String, port: UInt16), timeoutMicroseconds: Int) throws -> [UInt8] {
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_DGRAM.rawValue)
        var result: UnsafeMutablePointer<addrinfo>?
        guard getaddrinfo(server.host, String(server.port), &hints, &result) == 0, let address = result else {
            throw HTTPSRecordResolver.Failure(description: "cannot resolve the DNS server \(server.host)")
        }
        defer { freeaddrinfo(address) }
        let socketFD = socket(address.pointee.ai_family, Int32(SOCK_DGRAM.rawValue), 0)
        guard socketFD >= 0 else { throw HTTPSRecordResolver.Failure(description: "cannot open a UDP socket") }
        defer { close(socketFD) }
        // At least 1 µs: a zero SO_RCVTIMEO means no time limit at all.
        let timeoutMicroseconds = max(1, timeoutMicroseconds)
        var timeout = timeval(tv_sec: timeoutMicroseconds / 1_000_000, tv_usec: timeoutMicroseconds % 1_000_000)
        setsockopt(socketFD, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        guard connect(socketFD, address.pointee.ai_addr, address.pointee.ai_addrlen) == 0,
            query.withUnsafeBytes({ send(socketFD, $0.baseAddress, $0.count, 0) }) == query.count
        else { throw HTTPSRecordResolver.Failure(description: "cannot send to the DNS server \(server.host):\(server.port)") }
        let deadline = Date().addingTimeInterval(Double(timeoutMicroseconds) / 1e6)
        var buffer = [UInt8](repeating: 0, count: 4096)
        while Date() < deadline {
            let count = recv(socketFD, &buffer, buffer.count, 0)
            if count < 0 {
                // A connected UDP socket reports the peer's ICMP port unreachable as ECONNREFUSED.
                if errno == ECONNREFUSED {
                    throw HTTPSRecordResolver.Failure(description: "the DNS server \(server.host):\(server.port) refused the query: nothing listens there")
                }
                throw HTTPSRecordResolver.Failure(description: "no answer from the DNS server \(server.host):\(server.port) within \(timeoutMicroseconds / 1000) ms")
            }
            // Ignore stray datagrams that are not the answer to this query.
            if count >= 12, buffer[0] == query[0], buffer[1] == query[1] { return Array(buffer[0..<count]) }
        }
        throw HTTPSRecordResolver.Failure(description: "no answer from the DNS server \(server.host):\(server.port)")
    }

    /// The HTTPS records in the answer section of `message`.
    package static func httpsRecords(in message: [UInt8], id: UInt16) throws -> [HTTPSRecord] {
        var reader = DNSReader(message: message, position: 0)
        guard let responseID = reader.readUInt16(), responseID == id, let flags = reader.readUInt16(),
            let questions = reader.readUInt16(), let answers = reader.readUInt16(),
            reader.readUInt16() != nil, reader.readUInt16() != nil
        else { throw HTTPSRecordResolver.Failure(description: "malformed DNS answer") }
        let rcode = flags & 0x000f
        if rcode == 3 { return [] }  // NXDOMAIN: no such name, so no record.
        guard flags & 0x8000 != 0, rcode == 0 else {
            throw HTTPSRecordResolver.Failure(description: "the DNS server answered with error code \(rcode)")
        }
        for _ in 0..<questions {
            guard reader.readName() != nil, reader.readUInt16() != nil, reader.readUInt16() != nil else {
                throw HTTPSRecordResolver.Failure(description: "malformed DNS question section")
            }
        }
        var records: [HTTPSRecord] = []
        for _ in 0..<answers {
            guard reader.readName() != nil, let type = reader.readUInt16(), reader.readUInt16() != nil,
                reader.readUInt32() != nil, let length = reader.readUInt16(), reader.position + Int(length) <= message.count
            else { throw HTTPSRecordResolver.Failure(description: "malformed DNS answer section") }
            let rdata = message[reader.position..<(reader.position + Int(length))]
            reader.position += Int(length)
            if type == 65 {
                guard let record = HTTPSRecord.parse(rdata: rdata, message: message) else {
                    throw HTTPSRecordResolver.Failure(description: "malformed HTTPS record")
                }
                records.append(record)
            }
        }
        return records
    }
}

/// Reads big-endian integers and (possibly compressed) names from a DNS message.
struct DNSReader {
    let message: [UInt8]
    var position: Int

    mutating func readUInt16() -> UInt16? {
        guard position + 2 <= message.count else { return nil }
        defer { position += 2 }
        return UInt16(message[position]) << 8 | UInt16(message[position + 1])
    }

    mutating func readUInt32() -> UInt32? {
        guard let high = readUInt16(), let low = readUInt16() else { return nil }
        return UInt32(high) << 16 | UInt32(low)
    }

    /// A domain name, following compression pointers (RFC 1035 §4.1.4) at most 16 times.
    mutating func readName() -> String? {
        var labels: [String] = []
        var cursor = position
        var jumped = false
        var jumps = 0
        while true {
            guard cursor < message.count else { return nil }
            let length = Int(message[cursor])
            if length == 0 {
                if !jumped { position = cursor + 1 }
                return labels.isEmpty ? "." : labels.joined(separator: ".")
            }
            if length & 0xc0 == 0xc0 {
                guard cursor + 1 < message.count, jumps < 16 else { return nil }
                if !jumped { position = cursor + 2 }
                cursor = (length & 0x3f) << 8 | Int(message[cursor + 1])
                jumped = true
                jumps += 1
                continue
            }
            guard length <= 63, cursor + 1 + length <= message.count else { return nil }
            labels.append(String(decoding: message[(cursor + 1)..<(cursor + 1 + length)], as: UTF8.self))
            cursor += 1 + length
        }
    }
}
