import Foundation
import H3
import HTTPTypes
import QuicTestSupport
import QuicTransport
import Testing

/// HTTP/3 against Debian's ngtcp2 example server (`gtlsserver`: ngtcp2 + nghttp3 + GnuTLS, written
/// by ngtcp2's authors, not here) over real UDP on 127.0.0.1.
@Suite("HTTP/3 interop with gtlsserver", .serialized, .timeLimit(TestEnvironment.minutes(2)))
struct GtlsServerInteropTests {
    /// A gtlsserver on a free port serving a directory with an index and bodies of 1 MB and 50 MB.
    final class Server: Sendable {
        let process: ChildProcess
        let port: Int
        let directory: URL
        let caFile: String

        init() async throws {
            let gtlsserver = try TestEnvironment.systemTool("gtlsserver", package: "ngtcp2-server")
            directory = FileManager.default.temporaryDirectory.appendingPathComponent("h3-www-\(UUID())")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            try Data("hello over h3\n".utf8).write(to: directory.appendingPathComponent("index.html"))
            var generator = SeededGenerator(seed: 5)
            for (name, size) in [("1mb.bin", 1_000_000), ("50mb.bin", 50_000_000)] {
                var bytes = [UInt8](repeating: 0, count: size)
                for index in stride(from: 0, to: size, by: 8) {
                    let word = generator.next()
                    for offset in 0..<min(8, size - index) { bytes[index + offset] = UInt8(truncatingIfNeeded: word >> (8 * UInt64(offset))) }
                }
                try Data(bytes).write(to: directory.appendingPathComponent(name))
            }
            let identity = try SelfSignedCertificate.generate()
            let cert = directory.appendingPathComponent("cert.pem").path
            let key = directory.appendingPathComponent("key.pem").path
            try identity.certificatePEM.write(toFile: cert, atomically: true, encoding: .utf8)
            try identity.privateKeyPEM.write(toFile: key, atomically: true, encoding: .utf8)
            caFile = cert
            // gtlsserver has no "pick a free port" option: try random high ports until one binds.
            var started: (ChildProcess, Int)?
            for _ in 0..<10 {
                let port = Int.random(in: 20_000...60_000)
                // A port another test's server already holds would look "bound" at once, and
                // our client would reach that server (seen in CI: a certificate from another CA).
                guard !udpPortIsBound(port) else { continue }
                let process = try ChildProcess(gtlsserver, ["-q", "-d", directory.path, "127.0.0.1", "\(port)", key, cert])
                // Ready once its socket is bound; a port someone else took meanwhile makes it exit.
                _ = await eventually(within: 10) { !process.isRunning || udpPortIsBound(port) }
                if process.isRunning && udpPortIsBound(port) {
                    started = (process, port)
                    break
                }
            }
            guard let started else { throw SetupError("gtlsserver did not start: no free port found") }
            (process, port) = started
        }

        func sha256(of name: String) throws -> [UInt8] {
            try SHA256.hash(Array(Data(contentsOf: directory.appendingPathComponent(name))))
        }

        deinit { process.stop() }
    }

    @Test func clientFetchesConcurrentlyOnOneConnection() async throws {
        let server = try await Server()
        defer { server.process.stop() }
        var configuration = HTTP3Client.Configuration()
        configuration.certificateVerification = .caFile(server.caFile)
        let client = HTTP3Client(configuration: configuration)
        defer { client.shutdown() }
        let results = try await withThrowingTaskGroup(of: (String, Int, [UInt8]).self) { tasks in
            for name in ["index.html", "1mb.bin", "50mb.bin"] {
                tasks.addTask {
                    let request = HTTPRequest(method: .get, scheme: "https", authority: "localhost:\(server.port)", path: "/\(name)")
                    let response = try await client.execute(request)
                    return (name, response.head.status.code, try SHA256.hash(try await response.body.collect()))
                }
            }
            var results: [String: (Int, [UInt8])] = [:]
            for try await (name, status, digest) in tasks { results[name] = (status, digest) }
            return results
        }
        for name in ["index.html", "1mb.bin", "50mb.bin"] {
            #expect(results[name]?.0 == 200)
            #expect(results[name]?.1 == (try server.sha256(of: name)), "sha256 of \(name)")
        }
    }

    @Test func h3getWritesFilesAndReportsLikeCurl() async throws {
        let server = try await Server()
        defer { server.process.stop() }
        let output = server.directory.appendingPathComponent("downloaded.bin").path
        let h3get = try ChildProcess(try TestEnvironment.executable("h3get"), [
            "--http3-only", "--cacert", server.caFile, "-o", output,
            "-w", "%{http_version} %{response_code} %{size_download}\\n",
            "https://localhost:\(server.port)/1mb.bin",
        ])
        #expect(try await h3get.waitForExit() == 0, "\(h3get.standardError)")
        #expect(h3get.standardOutput == "3 200 1000000\n")
        #expect(try SHA256.hash(Array(Data(contentsOf: URL(fileURLWithPath: output)))) == (try server.sha256(of: "1mb.bin")))

        let missing = try ChildProcess(try TestEnvironment.executable("h3get"), [
            "--http3-only", "--cacert", server.caFile, "--fail", "-w", "%{response_code}", "https://localhost:\(server.port)/absent",
        ])
        #expect(try await missing.waitForExit() == 22)
        #expect(missing.standardOutput == "404")

        let untrusted = try ChildProcess(try TestEnvironment.executable("h3get"), ["--http3-only", "https://localhost:\(server.port)/"])
        #expect(try await untrusted.waitForExit() == 60)
        #expect(untrusted.standardError.contains("unknown issuer"), "\(untrusted.standardError)")
    }

    /// Resumption against ngtcp2's example server: the second h3get run resumes from the session
    /// file the first one wrote (RFC 8446 §2.2), and fetches the same bytes.
    @Test func h3getResumesWithGtlsserversTicket() async throws {
        let server = try await Server()
        defer { server.process.stop() }
        let sessionFile = server.directory.appendingPathComponent("session.txt").path
        var resumed: [Bool] = []
        for _ in 0..<2 {
            let output = server.directory.appendingPathComponent("resumed.bin").path
            let run = try ChildProcess(try TestEnvironment.executable("h3get"), [
                "--http3-only", "--cacert", server.caFile, "--session-file", sessionFile, "--stats=json", "-o", output,
                "https://localhost:\(server.port)/1mb.bin",
            ])
            #expect(try await run.waitForExit() == 0, "\(run.standardError)")
            #expect(try SHA256.hash(Array(Data(contentsOf: URL(fileURLWithPath: output)))) == (try server.sha256(of: "1mb.bin")))
            let stats = try #require(try JSONSerialization.jsonObject(with: Data(run.standardError.utf8)) as? [String: Any])
            resumed.append((stats["establishment"] as? [String: Any])?["resumed"] as? Bool ?? false)
        }
        #expect(resumed == [false, true])
    }

    @Test func h3getRejectsBadURLsClearly() async throws {
        let binary = try TestEnvironment.executable("h3get")
        for (url, message) in [("ftp://example.com/", "needs https://"), ("https:///nohost", "has no host"), ("not a url", "is not a URL")] {
            let run = try ChildProcess(binary, [url])
            #expect(try await run.waitForExit() != 0)
            #expect(run.standardError.contains(message), "\(url): \(run.standardError)")
        }
    }

    /// A method or header name that is not a token (RFC 9110 §9.1, §5.1) is refused before any
    /// request, with a message; a bad -X used to stop h3get on a failed unwrap.
    @Test func h3getRejectsBadMethodsAndHeaderNamesClearly() async throws {
        let binary = try TestEnvironment.executable("h3get")
        for (arguments, message) in [
            (["-X", "BAD METHOD"], "-X 'BAD METHOD' is not an HTTP method"),
            (["-H", "bad name: x"], "'bad name' is not a field name"),
            (["-H", "no colon"], "is not \"Name: value\""),
        ] {
            let run = try ChildProcess(binary, arguments + ["https://localhost:9/"])
            let status = try await run.waitForExit()
            #expect(status == 64, "\(arguments): exit \(status), \(run.standardError)")
            #expect(run.standardError.contains(message), "\(arguments): \(run.standardError)")
        }
    }
}
