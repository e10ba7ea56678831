#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif
import NIOConcurrencyHelpers
import QuicTransport

/// Remembers alternative services per origin (RFC 7838 §2.2, §3.1), for as long as `ma` says,
/// and persists them in curl's `--alt-svc` file format so curl and h3get can share one file:
///
///     h2 example.com 443 h3 example.com 443 "20261122 18:00:00" 0 0
///
/// (source ALPN, host and port; destination ALPN, host and port; expiry in GMT; persist;
/// priority). Lines that do not parse are skipped with a warning and the rest is kept.
public final class AltServiceCache: Sendable {
    /// An origin: scheme, host and port (RFC 6454).
    public struct Origin: Hashable, Sendable, CustomStringConvertible {
        /// The scheme, lowercased; `https` by default.
        public var scheme: String
        /// The host name or address, lowercased.
        public var host: String
        /// The port; 443 by default.
        public var port: UInt16

        /// Creates an origin, lowercasing `scheme` and `host`.
        public init(scheme: String = "https", host: String, port: UInt16 = 443) {
            self.scheme = scheme.lowercased()
            self.host = host.lowercased()
            self.port = port
        }

        public var description: String { "\(scheme)://\(host):\(port)" }
    }

    /// One cached alternative with its absolute expiry.
    public struct Entry: Hashable, Sendable {
        /// The ALPN the origin was reached with when the entry was learnt (`h2`, `http/1.1`).
        public var sourceALPN: String
        /// The alternative service the origin advertised.
        public var alternative: AltService
        /// When the entry goes stale: the time it was learnt plus its `ma` (RFC 7838 §3.1).
        public var expires: Date
    }

    private struct State {
        var entries: [Origin: [Entry]] = [:]
        var warnings: [String] = []
        /// The field value last seen from each origin, over which ALPN, and when.
        var lastSeen: [Origin: (value: String, sourceALPN: String, at: Date)] = [:]
    }

    private let state = NIOLockedValueBox(State())
    /// The file to load from and save to; nil keeps the cache in memory only (curl's `--alt-svc ""`).
    public let path: String?
    private let now: @Sendable () -> Date

    /// Creates a cache, loading the live entries of the file at `path` if it can be read.
    ///
    /// - Parameter path: the curl-format file to load from and save to; nil keeps the cache in
    ///   memory only, and a file that cannot be read starts the cache empty.
    /// - Parameter now: the clock, injectable for tests.
    public init(path: String? = nil, now: @escaping @Sendable () -> Date = { Date() }) {
        self.path = path
        self.now = now
        if let path, let text = try? String(contentsOfFile: path, encoding: .utf8) { load(text) }
    }

    /// Problems met while loading (skipped lines), for `-v`.
    public var warnings: [String] { state.withLockedValue { $0.warnings } }

    /// Records an `Alt-Svc` value received from `origin` over `sourceALPN` (RFC 7838 §3.1): a new
    /// header replaces what was cached for the origin; `clear` removes it.
    public func update(origin: Origin, sourceALPN: String, with value: AltServiceFieldValue) {
        let now = now()
        state.withLockedValue { state in
            switch value {
            case .clear:
                state.entries[origin] = nil
            case .alternatives(let services):
                state.entries[origin] = services.map { service in
                    let seconds = Double(min(service.maxAge, UInt64(Int32.max)))
                    return Entry(sourceALPN: sourceALPN, alternative: service, expires: now.addingTimeInterval(seconds))
                }
            }
        }
    }

    /// Whether `value` is the `Alt-Svc` value `origin` sent over `sourceALPN` less than a
    /// second ago; otherwise it becomes the one to compare the next with. A repeat need not be
    /// parsed, recorded and saved again: the entries' expiry then lags by at most that second.
    package func isRepeat(of value: String, from origin: Origin, sourceALPN: String) -> Bool {
        let now = now()
        return state.withLockedValue { state in
            if let last = state.lastSeen[origin], last.value == value, last.sourceALPN == sourceALPN,
               now >= last.at, now.timeIntervalSince(last.at) < 1 {
                return true
            }
            state.lastSeen[origin] = (value, sourceALPN, now)
            return false
        }
    }

    /// The live alternatives for `origin` that speak `protocolID`, most recently learnt first.
    public func alternatives(for origin: Origin, protocolID: String = "h3") -> [AltService] {
        let now = now()
        return state.withLockedValue { state in
            let live = (state.entries[origin] ?? []).filter { $0.expires > now }
            state.entries[origin] = live.isEmpty ? nil : live
            return live.filter { $0.alternative.protocolID == protocolID }.map(\.alternative)
        }
    }

    /// Every live entry, for saving and inspection.
    public var entries: [Origin: [Entry]] {
        let now = now()
        return state.withLockedValue { state in
            state.entries.compactMapValues { entries in
                let live = entries.filter { $0.expires > now }
                return live.isEmpty ? nil : live
            }
        }
    }

    /// Writes the live entries to `path` atomically (a temporary file renamed over it).
    public func save() throws {
        guard let path else { return }
        var text = "# Your alt-svc cache. https://curl.se/docs/alt-svc.html\n# This file was generated by h3get! Edit at your own risk.\n"
        for (origin, entries) in entries.sorted(by: { $0.key.description < $1.key.description }) {
            for entry in entries {
                let service = entry.alternative
                let destination = URIHost.bracketed(service.host ?? origin.host)
                text += "\(entry.sourceALPN) \(URIHost.bracketed(origin.host)) \(origin.port) \(service.protocolID) \(destination) \(service.port) "
                text += "\"\(Self.format(entry.expires))\" \(service.persist ? 1 : 0) 0\n"
            }
        }
        try Data(text.utf8).write(to: URL(fileURLWithPath: path), options: .atomic)
    }

    private func load(_ text: String) {
        let now = now()
        for (number, rawLine) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let line = String(rawLine.trimmingASCIIWhitespace())
            if line.isEmpty || line.hasPrefix("#") { continue }
            guard let (origin, entry) = Self.parseLine(line) else {
                state.withLockedValue { $0.warnings.append("alt-svc cache line \(number + 1) skipped: \(line)") }
                continue
            }
            guard entry.expires > now else { continue }
            state.withLockedValue { $0.entries[origin, default: []].append(entry) }
        }
    }

    /// Parses one line of curl's format; nil when it is not one.
    package static func parseLine(_ line: String) -> (Origin, Entry)? {
        // Nine fields; the seventh is a quoted "YYYYMMDD HH:MM:SS" that contains a space.
        guard let openQuote = line.firstIndex(of: "\""),
            let closeQuote = line[line.index(after: openQuote)...].firstIndex(of: "\"")
        else { return nil }
        let before = line[..<openQuote].split(separator: " ", omittingEmptySubsequences: true)
        let after = line[line.index(after: closeQuote)...].split(separator: " ", omittingEmptySubsequences: true)
        guard before.count == 6, after.count == 2,
            let sourcePort = UInt16(before[2]), let destinationPort = UInt16(before[5]),
            let expires = parseDate(String(line[line.index(after: openQuote)..<closeQuote])),
            after[0] == "0" || after[0] == "1", Int(after[1]) != nil
        else { return nil }
        let origin = Origin(scheme: "https", host: unbracket(String(before[1])), port: sourcePort)
        let destinationHost = unbracket(String(before[4]))
        let service = AltService(
            protocolID: String(before[3]),
            host: destinationHost == origin.host ? nil : destinationHost,
            port: destinationPort,
            persist: after[0] == "1"
        )
        return (origin, Entry(sourceALPN: String(before[0]), alternative: service, expires: expires))
    }

    private static func unbracket(_ host: String) -> String {
        host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
    }


    /// Writes curl's `YYYYMMDD HH:MM:SS` (UTC), the form `parseDate` reads.
    package static func format(_ date: Date) -> String {
        var seconds = time_t(date.timeIntervalSince1970.rounded(.down))
        var fields = tm()
        gmtime_r(&seconds, &fields)
        func digits(_ value: Int32, _ width: Int) -> String {
            let text = String(value)
            return String(repeating: "0", count: max(0, width - text.count)) + text
        }
        return digits(fields.tm_year + 1900, 4) + digits(fields.tm_mon + 1, 2) + digits(fields.tm_mday, 2) + " "
            + digits(fields.tm_hour, 2) + ":" + digits(fields.tm_min, 2) + ":" + digits(fields.tm_sec, 2)
    }
    /// Reads curl's `YYYYMMDD HH:MM:SS` (UTC) by hand: a DateFormatter per line made loading a
    /// file cost a millisecond a line (the alt-svc-cache fuzz target ran at 400 inputs a second).
    package static func parseDate(_ text: String) -> Date? {
        let bytes = Array(text.utf8)
        guard bytes.count == 17, bytes[8] == UInt8(ascii: " "), bytes[11] == UInt8(ascii: ":"), bytes[14] == UInt8(ascii: ":") else { return nil }
        func number(_ range: Range<Int>) -> Int? {
            var value = 0
            for byte in bytes[range] {
                guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") else { return nil }
                value = value * 10 + Int(byte - UInt8(ascii: "0"))
            }
            return value
        }
        guard let year = number(0..<4), let month = number(4..<6), let day = number(6..<8),
            let hour = number(9..<11), let minute = number(12..<14), let second = number(15..<17),
            (1...12).contains(month), (1...31).contains(day), hour < 24, minute < 60, second < 61
        else { return nil }
        var fields = tm()
        (fields.tm_year, fields.tm_mon, fields.tm_mday) = (Int32(year - 1900), Int32(month - 1), Int32(day))
        (fields.tm_hour, fields.tm_min, fields.tm_sec) = (Int32(hour), Int32(minute), Int32(second))
        let seconds = timegm(&fields)
        // timegm rolls 31 February over into March: a date that does not exist is refused.
        guard fields.tm_mday == Int32(day), fields.tm_mon == Int32(month - 1) else { return nil }
        return Date(timeIntervalSince1970: TimeInterval(seconds))
    }
}
