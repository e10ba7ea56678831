import Foundation
@testable import H3
import QuicTestSupport
import Testing

/// HTTPS records (RFC 9460) from a real DNS server on loopback: Debian's dnsmasq.
@Suite("HTTPSRecord", .serialized, .timeLimit(TestEnvironment.minutes(1)))
struct HTTPSRecordTests {
    /// RDATA: priority, target name, then SvcParams in key order.
    static func rdata(priority: UInt16, target: String, params: [(UInt16, [UInt8])] = []) -> [UInt8] {
        var bytes: [UInt8] = [UInt8(priority >> 8), UInt8(priority & 0xff)]
        for label in target.split(separator: ".") { bytes += [UInt8(label.utf8.count)] + Array(label.utf8) }
        bytes.append(0)
        for (key, value) in params {
            bytes += [UInt8(key >> 8), UInt8(key & 0xff), UInt8(value.count >> 8), UInt8(value.count & 0xff)] + value
        }
        return bytes
    }

    static let h3Service = rdata(priority: 1, target: ".", params: [
        (1, [2] + Array("h3".utf8) + [2] + Array("h2".utf8)), (3, [0x20, 0xfb]), (4, [127, 0, 0, 1]),
        (6, [UInt8](repeating: 0, count: 15) + [1]),
    ])

    /// dnsmasq on a free port answering for a few names only. It runs in its own session
    /// (setsid): dnsmasq signals its process group, which must not be the test runner's. So
    /// it is stopped through its pid file, not through the launching process.
    struct DNSServer {
        let port: UInt16
        let pidFile: String

        func stop() {
            if let text = try? String(contentsOfFile: pidFile, encoding: .utf8), let pid = Int32(text.trimmingCharacters(in: .whitespacesAndNewlines)) {
                kill(pid, SIGKILL)
                return
            }
            // No pid file: find it by its unique port.
            let pkill = Process()
            pkill.executableURL = URL(fileURLWithPath: "/usr/bin/pkill")
            pkill.arguments = ["-9", "-f", "dnsmasq .*--port=\(port) "]
            try? pkill.run()
            pkill.waitUntilExit()
        }
    }

    static func startDNS(_ records: [(String, [UInt8])]) async throws -> DNSServer {
        let dnsmasq = try TestEnvironment.systemTool("dnsmasq", package: "dnsmasq-base")
        let setsid = try TestEnvironment.systemTool("setsid", package: "util-linux")
        var lastError = ""
        for _ in 0..<10 {
            let port = UInt16.random(in: 20_000...60_000)
            let pidFile = FileManager.default.temporaryDirectory.appendingPathComponent("dnsmasq-\(UUID()).pid").path
            var arguments = [
                dnsmasq.path, "--no-daemon", "--conf-file=/dev/null", "--no-resolv", "--no-hosts", "--bind-interfaces",
                "--listen-address=127.0.0.1", "--port=\(port)", "--user=root", "--pid-file=\(pidFile)", "--log-facility=-",
            ]
            for (name, rdata) in records {
                arguments.append("--dns-rr=\(name),65,\(rdata.map { String(format: "%02x", $0) }.joined())")
            }
            let launcher = try ChildProcess(setsid, arguments)
            let server = DNSServer(port: port, pidFile: pidFile)
            // Ready when it answers: ask for a name it serves.
            let answers = await eventually(within: 5) {
                let probe = HTTPSRecordResolver(server: ("127.0.0.1", port), timeout: .milliseconds(200))
                guard let name = records.first?.0 else { return false }
                return (try? await probe.query(name: name)) != nil
            }
            if answers { return server }
            server.stop()
            lastError = launcher.standardError
        }
        throw SetupError("dnsmasq did not start on any port: \(lastError)")
    }

    @Test func serviceModeRecordGivesALPNPortAndHints() async throws {
        let dns = try await Self.startDNS([("h3.test", Self.h3Service)])
        defer { dns.stop() }
        let resolver = HTTPSRecordResolver(server: ("127.0.0.1", dns.port))
        let records = try await resolver.lookup(host: "h3.test")
        #expect(records.count == 1)
        let record = try #require(records.first)
        #expect(record.priority == 1)
        #expect(record.target == ".")
        #expect(record.alpn == ["h3", "h2"])
        #expect(record.port == 8443)
        #expect(record.ipv4Hints == ["127.0.0.1"])
        #expect(record.ipv6Hints == ["::1"])
    }

    @Test func aliasModeIsFollowed() async throws {
        let dns = try await Self.startDNS([
            ("alias.test", Self.rdata(priority: 0, target: "svc.test")), ("svc.test", Self.h3Service),
        ])
        defer { dns.stop() }
        let records = try await HTTPSRecordResolver(server: ("127.0.0.1", dns.port)).lookup(host: "alias.test")
        #expect(records.first?.alpn.contains("h3") == true)
        #expect(records.first?.port == 8443)
    }

    /// A port nobody listens on answers with ICMP port unreachable, and the look-up fails at
    /// once saying so. A server that never answers fails it when the timeout runs out. The
    /// suite's time limit is what catches a look-up that would wait forever.
    @Test func aRefusedOrSilentServerFailsTheLookUpAndSaysWhich() async throws {
        let refusedPort = try UDPBlackhole.freePort()
        let refused = await #expect(throws: HTTPSRecordResolver.Failure.self) {
            _ = try await HTTPSRecordResolver(server: ("127.0.0.1", refusedPort), timeout: .seconds(30)).lookup(host: "h3.test")
        }
        #expect(refused?.description == "the DNS server 127.0.0.1:\(refusedPort) refused the query: nothing listens there")

        let silentPort = try UDPBlackhole.freePort()
        let silent = try UDPBlackhole(port: silentPort)
        defer { silent.close() }
        let unanswered = await #expect(throws: HTTPSRecordResolver.Failure.self) {
            _ = try await HTTPSRecordResolver(server: ("127.0.0.1", silentPort), timeout: .milliseconds(200)).lookup(host: "h3.test")
        }
        #expect(unanswered?.description == "no answer from the DNS server 127.0.0.1:\(silentPort) within 200 ms")
    }

    @Test func malformedRecordsAreRejectedNotTrusted() {
        let message = [UInt8](repeating: 0, count: 12)
        // SvcParam keys out of order, a truncated value, an empty ALPN id.
        for rdata in [
            Self.rdata(priority: 1, target: ".", params: [(3, [0x01, 0xbb]), (1, [2, 0x68, 0x33])]),
            Self.rdata(priority: 1, target: ".") + [0, 3, 0, 4, 0x01],
            Self.rdata(priority: 1, target: ".", params: [(1, [0])]),
            Self.rdata(priority: 1, target: ".", params: [(3, [0x01])]),
        ] {
            let full = message + rdata
            #expect(HTTPSRecord.parse(rdata: full[12...], message: full) == nil)
        }
    }
}
