import Foundation
import H3
import NIOConcurrencyHelpers
import QuicTestSupport
import Testing

@Suite("AltService parser")
struct AltServiceTests {
    static func parse(_ text: String) throws -> [AltService] {
        guard case .alternatives(let services) = try AltServiceFieldValue(parsing: text) else {
            throw SetupError("expected alternatives, got clear")
        }
        return services
    }

    @Test func rfc7838Examples() throws {
        #expect(try Self.parse(#"h2="new.example.org:80""#) == [AltService(protocolID: "h2", host: "new.example.org", port: 80)])
        #expect(try Self.parse(#"h2=":443"; ma=3600"#) == [AltService(protocolID: "h2", port: 443, maxAge: 3600)])
        #expect(try Self.parse(#"h2="alt.example.com:8000", h2=":443""#) == [
            AltService(protocolID: "h2", host: "alt.example.com", port: 8000), AltService(protocolID: "h2", port: 443),
        ])
        #expect(try Self.parse(#"h2=":443"; ma=2592000; persist=1"#) == [AltService(protocolID: "h2", port: 443, maxAge: 2_592_000, persist: true)])
        #expect(try AltServiceFieldValue(parsing: "clear") == .clear)
        #expect(try AltServiceFieldValue(parsing: "  clear  ") == .clear)
    }

    @Test func realWorldVariants() throws {
        // What servers send: several versions, odd spacing, unknown parameters, case in names.
        let services = try Self.parse(#"h3=":443"; ma=86400,h3-29=":443"; ma=86400 ;  foo="bar" , quic=":443"; MA=60; v="46,43""#)
        #expect(services.map(\.protocolID) == ["h3", "h3-29", "quic"])
        #expect(services.map(\.maxAge) == [86_400, 86_400, 60])
        #expect(try Self.parse(#"w%3Dx%3Ay=":1""#).first?.protocolID == "w=x:y")
        #expect(try Self.parse(#"h3="[::1]:8443""#).first == AltService(protocolID: "h3", host: "::1", port: 8443))
        #expect(try Self.parse(#"h3=":443";"#).first?.port == 443)
        #expect(try Self.parse(#", h3=":443",,"#).count == 1)
        #expect(try Self.parse(#"h3=":443"; ma=99999999999999999999999"#).first?.maxAge == UInt64.max)
        #expect(try Self.parse(#"h3=":443"; persist=0"#).first?.persist == false)
    }

    /// Found by the alt-svc fuzz target: an ID with octets outside `tchar` printed raw, which
    /// no parser reads back (RFC 7838 §3 wants them percent-encoded).
    @Test func printingPercentEncodesTheProtocolIDAndParsesBack() throws {
        let service = AltService(protocolID: "w=x:y%", host: #"a\b"#, port: 1)
        #expect(service.description == #"w%3Dx%3Ay%25="a\\b:1"; ma=86400"#)
        #expect(try Self.parse(service.description) == [service])
        #expect(AltService(protocolID: "h3", port: 443).description == #"h3=":443"; ma=86400"#)
    }

    /// Found by the alt-svc fuzz target: a backslash followed by a combining mark is one
    /// Character, so escaping by Character left that backslash bare, and the value read back
    /// with one backslash fewer.
    @Test func backslashesAreEscapedWhateverFollowsThem() throws {
        for host in ["\\\u{5B4}x", "\\\\\u{301}"] {
            let service = AltService(protocolID: "wDx", host: host, port: 1)
            #expect(try Self.parse(service.description) == [service], "\(service.description)")
        }
        // The fuzzer's input itself.
        let input = Data(base64Encoded: "d0R4PSJcXFxcXFxc1rS0OjEi")!
        let parsed = try Self.parse(String(decoding: input, as: UTF8.self))
        #expect(try Self.parse(parsed[0].description) == parsed)
    }

    @Test(arguments: [
        "", " ", ",", "h3", "h3=", "h3=:443", "h3=\":443", "h3=\"\"", "h3=\":\"", "h3=\"host\"", "h3=\"host:\"",
        "h3=\":0\"", "h3=\":65536\"", "h3=\":-1\"", "h3=\":44a\"", "h3=\"::1:443\"", "h3=\"[::1:443\"", "h3=\"[]:443\"",
        "h3 =\":443\"", "=\":443\"", "h3=\":443\"; ma", "h3=\":443\"; ma=", "h3=\":443\"; ma=abc", "h3=\":443\"; ma=-5",
        "h3=\":443\"; =5", "h3=\":443\" h2=\":443\"", "h3=\":443\"; ma=\"", "h%zz=\":443\"", "h%4=\":443\"",
        "h3=\":443\"\u{7f}", "h3=\"ho st:443\"", "h3=\"a/b:443\"", "CLEAR", "clear, h3=\":443\"", "h3=\":443\"; ma=5 ma=6",
        "h3=\"\u{01}:443\"", "h3=\"\\\"", "h3=\"a \u{301}b:443\"",
    ])
    func malformedValuesAreRejectedWithAReason(text: String) {
        do {
            let value = try AltServiceFieldValue(parsing: text)
            Issue.record("'\(text)' parsed as \(value)")
        } catch let error as AltServiceParseError {
            #expect(!error.reason.isEmpty)
            #expect(error.offset >= 0 && error.offset <= text.utf8.count)
        } catch {
            Issue.record("unexpected error \(error)")
        }
    }

    @Test func randomBytesNeverCrashTheParser() {
        var generator = SeededGenerator(seed: 2024)
        let alphabet = Array(#"h3=":;, ma=persist"[]0123456789%\ "#.utf8) + [0x00, 0x7f, 0xff]
        for round in 0..<20_000 {
            let count = Int(generator.next() % 64)
            let bytes: [UInt8] = (0..<count).map { _ in
                round % 2 == 0 ? UInt8(truncatingIfNeeded: generator.next()) : alphabet[Int(generator.next() % UInt64(alphabet.count))]
            }
            _ = try? AltServiceFieldValue(parsing: String(decoding: bytes, as: UTF8.self))
        }
    }
}

@Suite("AltServiceCache")
struct AltServiceCacheTests {
    /// A clock the test moves by hand.
    final class Clock: Sendable {
        private let value = NIOLockedValueBox(Date(timeIntervalSince1970: 1_800_000_000))
        var now: Date { value.withLockedValue { $0 } }
        func advance(_ seconds: TimeInterval) { value.withLockedValue { $0 = $0.addingTimeInterval(seconds) } }
    }

    let origin = AltServiceCache.Origin(host: "Example.COM", port: 443)

    @Test func entriesExpireAfterMaxAge() throws {
        let clock = Clock()
        let cache = AltServiceCache(now: { clock.now })
        cache.update(origin: origin, sourceALPN: "h2", with: try AltServiceFieldValue(parsing: #"h3=":443"; ma=60"#))
        #expect(cache.alternatives(for: AltServiceCache.Origin(host: "example.com")) == [AltService(protocolID: "h3", port: 443, maxAge: 60)])
        clock.advance(59)
        #expect(cache.alternatives(for: origin).count == 1)
        clock.advance(2)
        #expect(cache.alternatives(for: origin).isEmpty)
    }

    @Test func defaultMaxAgeIsADay() throws {
        let clock = Clock()
        let cache = AltServiceCache(now: { clock.now })
        cache.update(origin: origin, sourceALPN: "h2", with: try AltServiceFieldValue(parsing: #"h3=":8443""#))
        clock.advance(86_399)
        #expect(cache.alternatives(for: origin).first?.port == 8443)
        clock.advance(2)
        #expect(cache.alternatives(for: origin).isEmpty)
    }

    @Test func aNewHeaderReplacesAndClearRemoves() throws {
        let cache = AltServiceCache()
        cache.update(origin: origin, sourceALPN: "h2", with: try AltServiceFieldValue(parsing: #"h3=":443""#))
        cache.update(origin: origin, sourceALPN: "h2", with: try AltServiceFieldValue(parsing: #"h3="alt.example.com:9443""#))
        #expect(cache.alternatives(for: origin) == [AltService(protocolID: "h3", host: "alt.example.com", port: 9443)])
        cache.update(origin: origin, sourceALPN: "h2", with: .clear)
        #expect(cache.alternatives(for: origin).isEmpty)
        #expect(cache.entries.isEmpty)
    }

    @Test func persistsAcrossInstancesInCurlsFormat() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("altsvc-\(UUID()).txt").path
        let clock = Clock()
        let first = AltServiceCache(path: path, now: { clock.now })
        first.update(origin: origin, sourceALPN: "h2", with: try AltServiceFieldValue(parsing: #"h3=":443"; ma=3600; persist=1, h3="[::1]:8443""#))
        try first.save()
        let text = try String(contentsOfFile: path, encoding: .utf8)
        #expect(text.contains("h2 example.com 443 h3 example.com 443 \"20270115 09:00:00\" 1 0"), "\(text)")
        #expect(text.contains("h2 example.com 443 h3 [::1] 8443 "), "\(text)")
        let second = AltServiceCache(path: path, now: { clock.now })
        #expect(second.alternatives(for: origin).map(\.port).sorted() == [443, 8443])
        #expect(second.alternatives(for: origin).first { $0.port == 443 }?.persist == true)
    }

    @Test func readsAFileCurlWroteAndSkipsCorruptLines() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("altsvc-curl-\(UUID()).txt").path
        let text = """
            # Your alt-svc cache. https://curl.se/docs/alt-svc.html
            # This file was generated by libcurl! Edit at your own risk.
            h2 quic.tech 8443 h3-22 quic.tech 8443 "20190808 06:18:37" 0 0
            h2 example.org 443 h3 example.org 443 "20300101 00:00:00" 0 0
            this line is not an entry
            h2 broken.example 443 h3 broken.example notaport "20300101 00:00:00" 0 0
            h1 [2001:db8::1] 443 h3 [2001:db8::1] 4433 "20300101 00:00:00" 1 0

            """
        try text.write(toFile: path, atomically: true, encoding: .utf8)
        let cache = AltServiceCache(path: path, now: { Date(timeIntervalSince1970: 1_800_000_000) })
        #expect(cache.alternatives(for: AltServiceCache.Origin(host: "example.org")) == [AltService(protocolID: "h3", port: 443)])
        #expect(cache.alternatives(for: AltServiceCache.Origin(host: "quic.tech", port: 8443), protocolID: "h3-22").isEmpty, "expired in 2019")
        #expect(cache.alternatives(for: AltServiceCache.Origin(host: "2001:db8::1")).first?.port == 4433)
        #expect(cache.warnings.count == 2)
    }

    /// The expiry is read by hand (curl's `YYYYMMDD HH:MM:SS`, UTC), so it is checked here.
    @Test func expiryDatesAreUTCAndMustExist() throws {
        let line = { (date: String) in #"h2 example.org 443 h3 example.org 443 "\#(date)" 0 0"# }
        #expect(AltServiceCache.parseLine(line("20300101 00:00:00"))?.1.expires == Date(timeIntervalSince1970: 1_893_456_000))
        #expect(AltServiceCache.parseLine(line("20240229 23:59:59"))?.1.expires == Date(timeIntervalSince1970: 1_709_251_199))
        for impossible in ["20230229 00:00:00", "20300231 00:00:00", "20301301 00:00:00", "20300101 24:00:00", "2030010100:00:00", "2030-1-1 00:00:00"] {
            #expect(AltServiceCache.parseLine(line(impossible)) == nil, "\(impossible)")
        }
    }

    /// The expiry is written by hand too, with zero padding, in UTC, and reads back the same.
    @Test(arguments: [
        (1_893_456_000.0, "20300101 00:00:00"), (1_709_251_199.9, "20240229 23:59:59"), (946_684_800, "20000101 00:00:00"),
        (4_102_444_799, "20991231 23:59:59"), (-1, "19691231 23:59:59"),
    ])
    func expiryDatesAreWrittenAsCurlWritesThem(seconds: Double, text: String) {
        #expect(AltServiceCache.format(Date(timeIntervalSince1970: seconds)) == text)
        #expect(AltServiceCache.parseDate(text) == Date(timeIntervalSince1970: seconds.rounded(.down)))
    }
}
