import Foundation
import QuicTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Every datagram sequence that ever broke the server endpoint under the fuzzer
/// (Fuzz/regressions/server-datagram), thrown at a real `quic-echo serve` over loopback: the
/// server must stay up and keep serving.
@Suite("Hostile datagrams over loopback", .timeLimit(TestEnvironment.minutes(2)))
struct HostileDatagramTests {
    @Test func theFuzzersFindingsLeaveTheServerServing() async throws {
        let folder = TestEnvironment.repositoryRoot.appendingPathComponent("Fuzz/regressions/server-datagram")
        let names = try FileManager.default.contentsOfDirectory(atPath: folder.path).filter { !$0.hasPrefix(".") }.sorted()
        #expect(!names.isEmpty, "no regressions in \(folder.path)")
        let server = try await EchoServerProcess()
        defer { server.process.stop() }
        var sent = 0
        for name in names {
            let input = try Data(contentsOf: folder.appendingPathComponent(name))
            for datagram in Self.datagrams(in: Array(input)) {
                try Self.send(datagram, toPort: server.port)
                sent += 1
            }
        }
        #expect(sent >= names.count)
        let client = try ChildProcess(try TestEnvironment.executable("quic-echo"), [
            "connect", "127.0.0.1", "\(server.port)", "--pin-sha256", server.fingerprint, "--data", "still serving",
        ])
        #expect(try await client.waitForExit(seconds: 30) == 0, "\(client.standardError)")
        #expect(client.standardOutput.hasSuffix("ok\n"))
        #expect(server.process.isRunning, "the server stopped: \(server.process.standardError)")
    }

    /// An Initial flood's effect, over real sockets: with `--retry-threshold 1`, one half-open
    /// handshake (aioquic's first flight, and then silence) makes the server send a real client
    /// a Retry before it creates state (RFC 9000 §8.1.2); the client follows it and echoes.
    @Test func pastTheRetryThresholdARealClientIsRetriedAndConnects() async throws {
        let server = try await EchoServerProcess(["--retry-threshold", "1"])
        defer { server.process.stop() }
        let seed = TestEnvironment.repositoryRoot.appendingPathComponent("Fuzz/corpus/server-datagram/aioquic-first-flight-quic-echo")
        for datagram in Self.datagrams(in: Array(try Data(contentsOf: seed))) { try Self.send(datagram, toPort: server.port) }
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("retry-threshold-\(UUID())")
        defer { try? FileManager.default.removeItem(at: directory) }
        let client = try ChildProcess(try TestEnvironment.executable("quic-echo"), [
            "connect", "127.0.0.1", "\(server.port)", "--pin-sha256", server.fingerprint, "--data", "after a Retry",
            "--qlog-dir", directory.path,
        ])
        #expect(try await client.waitForExit(seconds: 30) == 0, "\(client.standardError)")
        let traces = try FileManager.default.contentsOfDirectory(atPath: directory.path).filter { $0.hasSuffix("_client.sqlog") }
        let trace = try String(contentsOf: directory.appendingPathComponent(try #require(traces.first)), encoding: .utf8)
        #expect(trace.contains(#""packet_type":"retry""#), "the client's trace shows the server's Retry")
    }

    /// The fuzz targets' datagram sequence: a 2-byte big-endian length, then that many bytes.
    static func datagrams(in bytes: [UInt8]) -> [[UInt8]] {
        var datagrams: [[UInt8]] = []
        var offset = 0
        while bytes.count - offset >= 2 {
            let length = Int(bytes[offset]) << 8 | Int(bytes[offset + 1])
            let end = min(bytes.count, offset + 2 + length)
            datagrams.append(Array(bytes[(offset + 2)..<end]))
            offset = end
        }
        return datagrams
    }

    static func send(_ datagram: [UInt8], toPort port: Int) throws {
        let fd = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
        guard fd >= 0 else { throw SetupError("socket: errno \(errno)") }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = UInt16(port).bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let sent = datagram.withUnsafeBytes { bytes in
            withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    sendto(fd, bytes.baseAddress, bytes.count, 0, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                }
            }
        }
        guard sent == datagram.count else { throw SetupError("sendto: errno \(errno)") }
    }
}
