#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Dispatch
#if canImport(Glibc)
import Glibc
#endif

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
