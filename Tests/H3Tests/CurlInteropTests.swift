import Foundation
import QuicTestSupport
import QuicTransport
import Testing

/// curl against h3serve: libcurl 8.23 on ngtcp2 1.25, nghttp3 1.18 and OpenSSL 3.6 (the pinned
/// `pycurl` wheel), driven by Tests/Interop/curl/h3_curl.py. Every body is checked by SHA-256;
/// connection reuse is curl's own `NUM_CONNECTS`; resumption and 0-RTT are read from both sides,
/// curl's log and h3serve's qlog.
@Suite("HTTP/3 interop with curl", .serialized, .timeLimit(TestEnvironment.minutes(3)))
struct CurlInteropTests {
    /// h3serve with a CA-signed leaf, serving random files of the given sizes, with qlog traces.
    struct Server {
        let process: ChildProcess
        let port: UInt16
        let authority: TestCertificateAuthority
        let traces: URL
        let files: [String: [UInt8]]

        init(files sizes: [String: Int], _ arguments: [String] = []) async throws {
            authority = try TestCertificateAuthority()
            let root = FileManager.default.temporaryDirectory.appendingPathComponent("h3serve-curl-\(UUID())")
            try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
            var files: [String: [UInt8]] = [:]
            for (name, size) in sizes {
                let body = try randomBytes(size)
                files[name] = body
                try Data(body).write(to: root.appendingPathComponent(name))
            }
            self.files = files
            traces = root.appendingPathComponent("qlog")
            (process, port) = try await startH3serve(
                root: root,
                [
                    "--cert", authority.leafCertificate, "--key", authority.leafKey, "--qlog-dir", traces.path,
                ] + arguments
            )
        }

        func url(_ path: String) -> String { "https://localhost:\(port)/\(path)" }

        func sha256(_ name: String) throws -> String { Hex.encode(try SHA256.hash(files[name] ?? [])) }

        /// The server's traces, once h3serve has stopped.
        func tracesAfterStopping() async throws -> [[QLogEvent]] {
            process.terminate()
            _ = try await process.waitForExit()
            let names = try FileManager.default.contentsOfDirectory(atPath: traces.path).filter {
                $0.hasSuffix("_server.sqlog")
            }
            return try names.map { try QLogEvent.read(traces.appendingPathComponent($0).path) }
        }
    }

    /// One transfer's result from h3_curl.py.
    struct Transfer {
        let fields: [String: Any]
        var status: Int { fields["status"] as? Int ?? -1 }
        var length: Int { fields["length"] as? Int ?? -1 }
        var sha256: String { fields["sha256"] as? String ?? "" }
        /// curl's `INFO_HTTP_VERSION`: 30 is HTTP/3.
        var httpVersion: Int { fields["http_version"] as? Int ?? -1 }
        var numConnects: Int { fields["num_connects"] as? Int ?? -1 }
        var localPort: Int { fields["local_port"] as? Int ?? -1 }
        var earlyDataSent: Int { fields["early_data_sent"] as? Int ?? -1 }
        var resumed: Bool { fields["resumed"] as? Bool ?? false }
        var error: String? { fields["error"] as? String }
        func header(_ name: String) -> String? { (fields["headers"] as? [String: String])?[name] }
    }

    /// Runs h3_curl.py with `transfers` (rounds separated by `then`) against `server`, and
    /// returns one result per transfer and curl's verbose log.
    static func curl(
        _ server: Server,
        _ transfers: [String],
        earlyData: Bool = false
    ) async throws -> (transfers: [Transfer], log: String) {
        let python = try TestEnvironment.python()
        let log = server.traces.deletingLastPathComponent().appendingPathComponent("curl-\(UUID()).log").path
        let script = TestEnvironment.repositoryRoot.appendingPathComponent("Tests/Interop/curl/h3_curl.py").path
        let run = try ChildProcess(
            python,
            [
                script, "--cacert", server.authority.caCertificate, "--resolve", "localhost:\(server.port):127.0.0.1",
                "--timeout", "60", "--log", log,
            ] + (earlyData ? ["--early-data"] : []) + transfers
        )
        _ = try await run.waitForExit(seconds: 90)
        if run.standardError.contains("No module named 'pycurl'") {
            throw SetupError(
                "pycurl is not installed: run `bash scripts/setup` (it installs pycurl==7.49.0 into .venv)"
            )
        }
        let results = run.standardOutput.split(separator: "\n").compactMap { line in
            (try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]).map(Transfer.init)
        }
        let count = transfers.filter { $0 != "then" }.count
        guard results.count == count else {
            throw SetupError(
                "h3_curl.py reported \(results.count) of \(count) transfers: \(run.standardOutput) "
                    + "\(run.standardError.suffix(2000))"
            )
        }
        return (results, (try? String(contentsOfFile: log, encoding: .utf8)) ?? "")
    }

    /// The end of the furthest CRYPTO frame the server sent at the Handshake level: its
    /// certificate flight, or only EncryptedExtensions and Finished when the client resumed.
    static func handshakeCryptoSent(_ events: [QLogEvent]) -> Int {
        events.filter { $0.name == "transport:packet_sent" && $0.packetType == "handshake" }
            .flatMap(\.frames).filter { $0["frame_type"] as? String == "crypto" }
            .map { ($0["offset"] as? Int ?? 0) + ($0["length"] as? Int ?? 0) }.max() ?? 0
    }

    /// Three GETs started together share one connection (PIPEWAIT, PIPE_MULTIPLEX), and a
    /// later GET reuses it: curl made one connection in all, and so h3serve saw one.
    @Test func getsAreMultiplexedOnOneConnectionAndItIsReused() async throws {
        let server = try await Server(files: ["a.bin": 2_000_000, "b.bin": 1_000_000, "c.bin": 300_000])
        defer { server.process.stop() }
        let (transfers, _) = try await Self.curl(
            server,
            [
                "GET@\(server.url("a.bin"))", "GET@\(server.url("b.bin"))", "GET@\(server.url("c.bin"))",
                "then", "GET@\(server.url("b.bin"))",
            ]
        )
        for (transfer, name) in zip(transfers, ["a.bin", "b.bin", "c.bin", "b.bin"]) {
            #expect(transfer.error == nil && transfer.status == 200, "\(name): \(transfer.fields)")
            #expect(transfer.httpVersion == 30, "\(name) over HTTP/3: \(transfer.fields)")
            #expect(transfer.sha256 == (try server.sha256(name)), "sha256 of \(name)")
        }
        #expect(
            transfers.map(\.numConnects).reduce(0, +) == 1,
            "connections curl made: \(transfers.map(\.numConnects))"
        )
        #expect(transfers[3].numConnects == 0, "the later GET reused the connection")
        #expect(Set(transfers.map(\.localPort)).count == 1, "one local port: \(transfers.map(\.localPort))")
        #expect(try await server.tracesAfterStopping().count == 1, "h3serve saw one connection")
    }

    /// HEAD gets the head only, with the file's length; a byte range gets 206 and those bytes
    /// (RFC 9110 §9.3.2, §14).
    @Test func headAndAByteRange() async throws {
        let server = try await Server(files: ["f.bin": 100_000])
        defer { server.process.stop() }
        let (transfers, _) = try await Self.curl(
            server,
            [
                "HEAD@\(server.url("f.bin"))", "then", "GET,range=1000-4999@\(server.url("f.bin"))",
            ]
        )
        let head = transfers[0]
        #expect(head.status == 200 && head.length == 0, "\(head.fields)")
        #expect(head.header("content-length") == "100000", "\(head.fields)")
        let range = transfers[1]
        #expect(range.status == 206, "\(range.fields)")
        #expect(range.header("content-range") == "bytes 1000-4999/100000", "\(range.fields)")
        #expect(range.length == 4000)
        let expected = Hex.encode(try SHA256.hash(Array(server.files["f.bin"]![1000..<5000])))
        #expect(range.sha256 == expected, "sha256 of the range")
        #expect(range.numConnects == 0, "the range reused the HEAD's connection")
    }

    /// A second connection (FRESH_CONNECT) resumes the first one's TLS session from curl's
    /// session cache and sends its request as 0-RTT, which h3serve `--early-data` accepts:
    /// curl logs the reuse and counts the early bytes, and h3serve's qlog shows the second
    /// handshake without a certificate and 0-RTT packets received.
    @Test func aSecondConnectionResumesAndSends0RTT() async throws {
        let server = try await Server(files: ["r.bin": 500_000], ["--early-data"])
        defer { server.process.stop() }
        let (transfers, log) = try await Self.curl(
            server,
            [
                "GET@\(server.url("r.bin"))", "then", "GET,fresh@\(server.url("r.bin"))",
            ],
            earlyData: true
        )
        let expected = try server.sha256("r.bin")
        for transfer in transfers {
            #expect(transfer.status == 200 && transfer.sha256 == expected, "\(transfer.fields)")
        }
        #expect(transfers[1].numConnects == 1, "the second transfer made a new connection")
        #expect(!transfers[0].resumed && transfers[1].resumed, "curl's log: \(log.suffix(1500))")
        #expect(transfers[1].earlyDataSent > 0, "curl sent its request as 0-RTT: \(transfers[1].fields)")

        let traces = try await server.tracesAfterStopping()
        try #require(traces.count == 2, "h3serve saw \(traces.count) connections")
        // Both connections are from one run, so neither name nor time orders them: the full
        // handshake is the one whose flight carries the certificate.
        let (full, resumed) =
            Self.handshakeCryptoSent(traces[0]) >= Self.handshakeCryptoSent(traces[1])
            ? (traces[0], traces[1]) : (traces[1], traces[0])
        let fullSize = Self.handshakeCryptoSent(full)
        let resumedSize = Self.handshakeCryptoSent(resumed)
        #expect(
            fullSize > 450 && resumedSize > 0 && resumedSize < 300,
            "Handshake CRYPTO: \(fullSize) B, then \(resumedSize) B resumed"
        )
        let early = resumed.filter { $0.name == "transport:packet_received" && $0.packetType == "0RTT" }
        #expect(
            early.contains { $0.frames.contains { $0["frame_type"] as? String == "stream" } },
            "0-RTT stream data received"
        )
    }

    /// A POST that the file server refuses (405) is answered before its 2 MB body is all sent.
    /// RFC 9114 §4.1.2: the server sends the complete response, asks the client to stop with
    /// STOP_SENDING(H3_NO_ERROR) and keeps the connection, so a later GET on it succeeds.
    @Test func anUploadAnsweredEarlyLeavesTheConnectionUsable() async throws {
        let server = try await Server(files: ["after.bin": 200_000])
        defer { server.process.stop() }
        let (transfers, log) = try await Self.curl(
            server,
            [
                "POST,size=2000000@\(server.url("upload"))", "then", "GET@\(server.url("after.bin"))",
            ]
        )
        #expect(transfers[0].status == 405, "the POST: \(transfers[0].fields)")
        let after = transfers[1]
        #expect(
            after.error == nil && after.status == 200,
            "the GET after it: \(after.fields); curl's log: \(log.suffix(1500))"
        )
        #expect(after.sha256 == (try server.sha256("after.bin")), "sha256 of the GET after the POST")
        #expect(after.numConnects == 0, "the GET reused the POST's connection")
    }
}
