import Foundation
import H3
import HTTPTypes
import NIOConcurrencyHelpers
import NIOCore
import QuicTestSupport
import QuicTransport
import Testing

/// Our HTTP/3 client and server over real UDP on 127.0.0.1, and h3serve against Debian's gtlsclient.
@Suite("HTTP/3 over loopback", .serialized, .timeLimit(TestEnvironment.minutes(2)))
struct HTTP3LoopbackTests {
    static func startServer(
        qlogDirectory: String? = nil,
        responder: HTTP3Server.Responder? = nil,
        promiseResponder: HTTP3Server.PromiseResponder? = nil,
        _ handler: @escaping HTTP3Server.Handler
    ) async throws -> (HTTP3Server, UInt16, SelfSignedCertificate) {
        let identity = try SelfSignedCertificate.generate()
        var configuration = HTTP3Server.Configuration()
        configuration.port = 0
        configuration.identity = identity
        if let qlogDirectory { configuration.qlogDirectory = qlogDirectory }
        let server = try HTTP3Server(configuration: configuration, responder: responder, promiseResponder: promiseResponder, handler: handler)
        let port = try await server.start()
        return (server, port, identity)
    }

    /// The handler behind a responder: 202 with the size of the body it read.
    @Sendable static func countsTheBody(_ request: HTTP3ServerRequest) async throws -> HTTP3ServerResponse {
        let body = try await request.body.collect()
        return HTTP3ServerResponse(status: .accepted, body: Array("from the handler, \(body.count) bytes".utf8))
    }

    /// The responder answers what it can without a task, on the connection's loop; what it
    /// passes on (nil) reaches the async handler, request body included.
    @Test func aResponderAnswersFirstAndPassesTheRestToTheHandler() async throws {
        let responderCalls = NIOLockedValueBox(0)
        let (server, port, identity) = try await Self.startServer(
            responder: { request in
                responderCalls.withLockedValue { $0 += 1 }
                guard request.head.path == "/now" else { return nil }
                return HTTP3ServerResponse(status: .ok, body: Array("from the responder".utf8))
            },
            Self.countsTheBody
        )
        defer { server.shutdown() }
        let client = Self.client(trusting: identity)
        defer { client.shutdown() }
        let now = try await client.execute(HTTPRequest(method: .get, scheme: "https", authority: "localhost:\(port)", path: "/now"))
        #expect(now.head.status == .ok)
        #expect(String(decoding: try await now.body.collect(), as: UTF8.self) == "from the responder")
        let later = try await client.execute(
            HTTPRequest(method: .post, scheme: "https", authority: "localhost:\(port)", path: "/later"), body: Array(repeating: 7, count: 5000)
        )
        #expect(later.head.status == .accepted)
        #expect(String(decoding: try await later.body.collect(), as: UTF8.self) == "from the handler, 5000 bytes")
        #expect(responderCalls.withLockedValue { $0 } == 2)
    }

    /// A promise responder answers requests that ended with their head, as NIO frameworks
    /// answer, with no task: its promise may be completed later, on the connection's loop or
    /// another, and a failed or dropped one answers 500 and costs only its own stream. Only the
    /// first completion counts. A HEAD request's answer goes without content. What it passes on
    /// (false), here an upload, reaches the handler, and its void promise sends nothing.
    @Test func aPromiseResponderAnswersLaterOnAnyLoopAndPassesTheRestOn() async throws {
        let elsewhere = try QUICEventLoop(name: "test-elsewhere")
        let sawBodies = NIOLockedValueBox<[String: Bool]>([:])
        let (server, port, identity) = try await Self.startServer(
            promiseResponder: { request, promise in
                let path = request.path ?? ""
                sawBodies.withLockedValue { $0[path] = !request.body.endedWithHead }
                let answer = HTTP3ServerResponse(status: .ok, body: Array("later from \(path)".utf8))
                guard request.body.endedWithHead, let loop = request.eventLoop else {
                    promise.succeed(answer)
                    return false
                }
                switch path {
                case "/fail":
                    struct Refused: Error {}
                    promise.fail(Refused())
                case "/dropped":
                    break
                case "/twice":
                    promise.succeed(answer)
                    promise.succeed(HTTP3ServerResponse(status: .conflict))
                case "/elsewhere":
                    elsewhere.scheduleTask(in: .milliseconds(20)) { promise.succeed(answer) }
                default:
                    loop.scheduleTask(in: .milliseconds(20)) { promise.succeed(answer) }
                }
                return true
            },
            Self.countsTheBody
        )
        defer { server.shutdown() }
        let client = Self.client(trusting: identity)
        defer { client.shutdown() }
        func get(_ path: String, method: HTTPRequest.Method = .get) async throws -> (HTTPResponse.Status, String) {
            let response = try await client.execute(HTTPRequest(method: method, scheme: "https", authority: "localhost:\(port)", path: path))
            return (response.head.status, String(decoding: try await response.body.collect(), as: UTF8.self))
        }
        #expect(try await get("/loop") == (.ok, "later from /loop"))
        #expect(try await get("/elsewhere") == (.ok, "later from /elsewhere"))
        #expect(try await get("/fail").0 == .internalServerError)
        #expect(try await get("/dropped").0 == .internalServerError)
        #expect(try await get("/twice") == (.ok, "later from /twice"))
        #expect(try await get("/head", method: .head) == (.ok, ""))
        let upload = try await client.execute(
            HTTPRequest(method: .post, scheme: "https", authority: "localhost:\(port)", path: "/upload"), body: Array(repeating: 7, count: 5000)
        )
        #expect(upload.head.status == .accepted)
        #expect(String(decoding: try await upload.body.collect(), as: UTF8.self) == "from the handler, 5000 bytes")
        #expect(try await get("/loop") == (.ok, "later from /loop"), "the connection outlived the failed promises")
        #expect(
            sawBodies.withLockedValue { $0 }
                == ["/loop": false, "/elsewhere": false, "/fail": false, "/dropped": false, "/twice": false, "/head": false, "/upload": true]
        )
        let accepted = await server.workerStatistics().map(\.connectionsAccepted).reduce(0, +)
        #expect(accepted == 1)
    }

    /// A body in a `ByteBuffer` goes after the array body, and reads back as part of `body`;
    /// changing `body` keeps both parts. HTTP/3 sends the buffer's bytes from where they are,
    /// and they stay as given until sent. A HEAD request's answer carries neither.
    @Test func aBufferBodyFollowsTheArrayBody() async throws {
        var response = HTTP3ServerResponse(status: .ok, body: Array("array, ".utf8))
        response.bodyBuffer = ByteBuffer(string: "then buffer")
        #expect(response.body == Array("array, then buffer".utf8))
        var changed = response
        changed.body += Array("!".utf8)
        #expect(changed.body == Array("array, then buffer!".utf8))
        #expect(changed.bodyBuffer == nil)
        #expect(response.bodyBuffer == ByteBuffer(string: "then buffer"), "a copy's change left the original as it was")
        var emptied = response
        emptied.bodyBuffer = ByteBuffer()
        #expect(emptied.bodyBuffer == nil)

        let sent = response
        // A large one goes out over many acknowledgements, long after the handler, and the
        // buffer it made, are gone, while the handler's copy is written over.
        let large = (0..<(3 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        let (server, port, identity) = try await Self.startServer { request in
            guard request.path == "/large" else { return sent }
            var buffer = ByteBuffer(bytes: large)
            var answer = HTTP3ServerResponse(status: .ok)
            answer.bodyBuffer = buffer
            buffer.setBytes([UInt8](repeating: 0, count: 4096), at: 0)
            return answer
        }
        defer { server.shutdown() }
        let client = Self.client(trusting: identity)
        defer { client.shutdown() }
        let get = try await client.execute(HTTPRequest(method: .get, scheme: "https", authority: "localhost:\(port)", path: "/"))
        #expect(String(decoding: try await get.body.collect(), as: UTF8.self) == "array, then buffer")
        let largeGet = try await client.execute(HTTPRequest(method: .get, scheme: "https", authority: "localhost:\(port)", path: "/large"))
        #expect(try await largeGet.body.collect() == large)
        let head = try await client.execute(HTTPRequest(method: .head, scheme: "https", authority: "localhost:\(port)", path: "/"))
        #expect(head.head.status == .ok)
        #expect(try await head.body.collect().isEmpty)
    }

    static func client(trusting identity: SelfSignedCertificate) -> HTTP3Client {
        var configuration = HTTP3Client.Configuration()
        configuration.certificateVerification = .pinnedSHA256(identity.sha256Fingerprint)
        return HTTP3Client(configuration: configuration)
    }

    /// The file handler's bodies are read by the connection as the client acknowledges them,
    /// at most a window ahead. A file over twice the window arrives whole and in order; a file
    /// that shrinks after its head went out fails the stream instead of ending it short.
    @Test func fileBodiesArriveWholeAndAShrunkFileFailsTheStream() async throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("file-bodies-\(UUID())")
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: root) }
        let large = (0..<(9 << 20) + 123).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ $0 >> 16) }
        try Data(large).write(to: root.appendingPathComponent("large.bin"))
        let shrinking = root.appendingPathComponent("shrinking.bin")
        try Data(large).write(to: shrinking)
        let files = HTTP3FileHandler(root: root.path)
        let (server, port, identity) = try await Self.startServer { request in
            let response = files.respond(to: request)
            // Its length is in the head already; the bytes past 100,000 are gone.
            if request.head.path == "/shrinking.bin" { truncate(shrinking.path, 100_000) }
            return response
        }
        defer { server.shutdown(gracePeriod: .zero) }
        let client = Self.client(trusting: identity)
        defer { Task { await client.close() } }

        let whole = try await client.execute(HTTPRequest(method: .get, scheme: "https", authority: "localhost:\(port)", path: "/large.bin"))
        #expect(whole.head.headerFields[.contentLength] == String(large.count))
        let received = try await whole.body.collect()
        #expect(received.count == large.count)
        #expect(received == large)

        do {
            let cut = try await client.execute(HTTPRequest(method: .get, scheme: "https", authority: "localhost:\(port)", path: "/shrinking.bin"))
            let bytes = try await cut.body.collect()
            Issue.record("the truncated file ended as a response of \(bytes.count) bytes")
        } catch let error as HTTP3ClientError where error.code == .streamReset {
            #expect(error.streamErrorCode == .internalError)
        } catch {
            Issue.record("expected a reset with H3_INTERNAL_ERROR, got \(error)")
        }
    }

    /// A handler learns both ends of its connection and runs on the connection's event loop,
    /// which frameworks built on NIO need (Vapor's `Request`, a Hummingbird request context).
    @Test func aRequestKnowsItsAddressesAndRunsOnItsConnectionsLoop() async throws {
        let (server, port, identity) = try await Self.startServer { request in
            let loop = try #require(request.eventLoop)
            let facts = [
                request.remoteSocketAddress?.ipAddress ?? "-", "\(request.remoteSocketAddress?.port ?? 0)",
                request.localSocketAddress?.ipAddress ?? "-", "\(request.localSocketAddress?.port ?? 0)",
                "\(loop.inEventLoop)",
            ]
            return HTTP3ServerResponse(status: .ok, body: Array(facts.joined(separator: " ").utf8))
        }
        defer { server.shutdown() }
        let client = Self.client(trusting: identity)
        defer { client.shutdown() }
        let response = try await client.execute(HTTPRequest(method: .get, scheme: "https", authority: "127.0.0.1:\(port)", path: "/"))
        let facts = String(decoding: try await response.body.collect(), as: UTF8.self).split(separator: " ").map(String.init)
        let clientPort = try #require(response.connection.establishment?.localPort)
        #expect(facts == ["127.0.0.1", "\(clientPort)", "127.0.0.1", "\(port)", "true"])
    }

    @Test func postWithABodyIsEchoed() async throws {
        let (server, port, identity) = try await Self.startServer { request in
            let body = try await request.body.collect()
            return HTTP3ServerResponse(status: .ok, body: Array("got \(request.head.method) \(body.count) bytes: ".utf8) + body)
        }
        defer { server.shutdown() }
        let client = Self.client(trusting: identity)
        defer { client.shutdown() }
        let request = HTTPRequest(method: .post, scheme: "https", authority: "localhost:\(port)", path: "/echo")
        let response = try await client.execute(request, body: Array("payload".utf8))
        #expect(response.head.status == .ok)
        #expect(String(decoding: try await response.body.collect(), as: UTF8.self) == "got POST 7 bytes: payload")
        #expect(response.connection.alpn == "h3")
    }

    @Test func hundredConcurrentRequestsOnOneConnection() async throws {
        let (server, port, identity) = try await Self.startServer { request in
            HTTP3ServerResponse(status: .ok, body: Array((request.head.path ?? "").utf8))
        }
        defer { server.shutdown() }
        let client = Self.client(trusting: identity)
        defer { client.shutdown() }
        let matches = try await withThrowingTaskGroup(of: Bool.self) { tasks in
            for index in 0..<100 {
                tasks.addTask {
                    let request = HTTPRequest(method: .get, scheme: "https", authority: "localhost:\(port)", path: "/item/\(index)")
                    let response = try await client.execute(request)
                    return try await response.body.collect() == Array("/item/\(index)".utf8)
                }
            }
            var count = 0
            for try await ok in tasks where ok { count += 1 }
            return count
        }
        #expect(matches == 100)
    }

    @Test func gtlsclientDownloadsFromH3serve() async throws {
        let gtlsclient = try TestEnvironment.systemTool("gtlsclient", package: "ngtcp2-client")
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("h3serve-\(UUID())")
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        var generator = SeededGenerator(seed: 11)
        var sizes: [String: Int] = ["1mb.bin": 1_000_000, "50mb.bin": 50_000_000]
        for (name, size) in sizes {
            var bytes = [UInt8](repeating: 0, count: size)
            for index in 0..<size where index % 8 == 0 {
                let word = generator.next()
                for offset in 0..<min(8, size - index) { bytes[index + offset] = UInt8(truncatingIfNeeded: word >> (8 * UInt64(offset))) }
            }
            try Data(bytes).write(to: root.appendingPathComponent(name))
        }
        sizes["index.html"] = 0
        let (server, port) = try await startH3serve(root: root)
        defer { server.stop() }
        let downloads = root.appendingPathComponent("downloads")
        try FileManager.default.createDirectory(at: downloads, withIntermediateDirectories: true)
        let client = try ChildProcess(gtlsclient, [
            "--quiet", "--exit-on-all-streams-close", "--download", downloads.path, "127.0.0.1", "\(port)",
            "https://127.0.0.1:\(port)/1mb.bin", "https://127.0.0.1:\(port)/50mb.bin",
        ])
        _ = try await client.waitForExit(seconds: 100)
        for name in ["1mb.bin", "50mb.bin"] {
            let original = try SHA256.hash(Array(Data(contentsOf: root.appendingPathComponent(name))))
            let fetched = try SHA256.hash(Array(Data(contentsOf: downloads.appendingPathComponent(name))))
            #expect(fetched == original, "sha256 of \(name) fetched by gtlsclient")
        }
        // h3serve logs one line per request in the Combined Log Format, then rt= and priority=.
        let logged = await eventually { server.standardError.contains("\"GET /50mb.bin HTTP/3\" 200 50000000 ") }
        #expect(logged, "\(server.standardError)")
    }

    /// ngtcp2's example client updates keys 5 ms into the connection with ChaCha20-Poly1305 only,
    /// marking ECT(0): h3serve must follow the peer's key update (RFC 9001 §6.2), negotiate the
    /// one cipher offered, and count ECN marks in its ACKs (RFC 9000 §13.4.1).
    @Test func gtlsclientKeyUpdateChaChaAndECNAgainstH3serve() async throws {
        // The update must come while the body still flows: 5 ms after the handshake, into a
        // 16 MB transfer that takes 40 ms even at 400 MB/s (at 50 ms, a fast run of 4 MB had
        // finished before the client updated).
        let (root, traces, downloads, body) = try makeServedRoot("h3serve-ku", file: "16mb.bin", size: 16_000_000, multiplier: 7)
        let (server, port) = try await startH3serve(root: root, ["--no-tcp", "--qlog-dir", traces.path])
        defer { server.stop() }
        let fetched = try await gtlsclientDownload("16mb.bin", port: port, flags: [
            "--key-update=5ms", "--ciphers=NORMAL:-VERS-ALL:+VERS-TLS1.3:-CIPHER-ALL:+CHACHA20-POLY1305",
        ], into: downloads, within: 100)
        #expect(try SHA256.hash(fetched) == (try SHA256.hash(body)), "sha256 of the body after the key update")
        let text = try String(contentsOfFile: try await serverTrace(afterStopping: server, in: traces), encoding: .utf8)
        #expect(text.contains(#""key_type":"client_1rtt_secret","generation":1,"trigger":"remote_update""#), "the server saw the client's key update")
        let ect0 = text.matches(of: /"ect0":(\d+)/).compactMap { Int($0.output.1) }.max() ?? 0
        #expect(ect0 > 100, "ACKs count ECT(0)-marked packets: \(ect0)")
    }

    /// h3serve --preferred-address offers a second address (RFC 9000 §9.6); ngtcp2's example
    /// client moves there once the handshake is confirmed, and the server validates the new path
    /// and carries on from the preferred socket.
    @Test func gtlsclientMovesToH3servesPreferredAddress() async throws {
        let (root, traces, downloads, body) = try makeServedRoot("h3serve-pa", file: "3mb.bin", size: 3_000_000, multiplier: 13)
        let (server, port) = try await startH3serve(root: root, ["--no-tcp", "--qlog-dir", traces.path, "--preferred-address", "127.0.0.2:0"])
        defer { server.stop() }
        let line = try await server.waitForLine(containing: "preferred address: ")
        let preferredPort = try #require(line.split(separator: ":").last.flatMap { UInt16($0.trimmingCharacters(in: .whitespaces)) })
        let fetched = try await gtlsclientDownload("3mb.bin", port: port, into: downloads, within: 100)
        #expect(try SHA256.hash(fetched) == (try SHA256.hash(body)))
        let text = try String(contentsOfFile: try await serverTrace(afterStopping: server, in: traces), encoding: .utf8)
        #expect(text.contains(#""new":{"ip":"127.0.0.2","port":\#(preferredPort)}"#), "the connection moved to the preferred address")
        #expect(text.contains(#""frame_type":"path_challenge""#))
    }

    /// h3serve --server-id issues QUIC-LB connection IDs (draft-ietf-quic-load-balancers-21 §5):
    /// every ID the server hands gtlsclient, in its transport parameters and NEW_CONNECTION_ID
    /// frames, carries the configured first octet and server ID, in clear or under the key, and
    /// the client's migration (`--change-local-addr`) moves to such IDs. The encrypted run
    /// listens on one dual-stack socket (`--host ::`), where gtlsclient's IPv4 address is
    /// v4-mapped; the plain one on the default `localhost`.
    @Test(arguments: zip([false, true], ["localhost", "::"]))
    func gtlsclientMigratesOnH3servesQUICLBConnectionIDs(encrypted: Bool, host: String) async throws {
        let (root, traces, downloads, body) = try makeServedRoot("h3serve-lb", file: "1mb.bin", size: 1_000_000, multiplier: 17)
        let key = "8f95f09245765f80256934e50c66207f"
        let configuration = try QUICLoadBalancerConfiguration(
            configRotation: 4,
            serverID: [0x0a, 0x0b, 0x0c],
            key: encrypted ? Hex.decode(key) : nil
        )
        let (server, port) = try await startH3serve(root: root, [
            "--no-tcp", "--host", host, "--qlog-dir", traces.path, "--server-id", "0a0b0c", "--quic-lb-config", "4",
        ] + (encrypted ? ["--quic-lb-key", key] : []))
        defer { server.stop() }
        let fetched = try await gtlsclientDownload("1mb.bin", port: port, flags: ["--change-local-addr=10ms"], into: downloads, within: 60)
        #expect(try SHA256.hash(fetched) == (try SHA256.hash(body)))
        let events = try QLogEvent.read(try await serverTrace(afterStopping: server, in: traces))
        let initial = events.filter { $0.name == "transport:parameters_set" && $0.data["owner"] as? String == "local" }
            .compactMap { $0.data["initial_source_connection_id"] as? String }
        let issued = events.filter { $0.name == "transport:packet_sent" }.flatMap(\.frames)
            .filter { $0["frame_type"] as? String == "new_connection_id" }.compactMap { $0["connection_id"] as? String }
        let ids = (initial + issued).compactMap { Hex.decode($0) }
        #expect(initial.count == 1 && issued.count >= 3, "initial \(initial), issued \(issued)")
        for id in ids {
            #expect(id.count == 18 && id[0] == 4 << 5 | 17, "first octet of \(Hex.encode(id)): rotation 4, length 17")
            #expect(configuration.serverID(of: id) == [0x0a, 0x0b, 0x0c], "server ID of \(Hex.encode(id))")
            #expect(encrypted != (id[1...3] == [0x0a, 0x0b, 0x0c]), "the server ID is in clear only without a key")
        }
        let challenges = events.filter { $0.name == "transport:packet_sent" }.flatMap(\.frames)
            .filter { $0["frame_type"] as? String == "path_challenge" }
        #expect(!challenges.isEmpty, "the client migrated and the server validated the new path")
    }

    /// Behind a balancer that hashes only the 4-tuple, h3serve --disable-active-migration tells
    /// clients to stay put (RFC 9000 §18.2): h3get --migrate does not move, and the fetch works.
    /// (Without the flag the same run moves: path_changes 1.)
    @Test func disableActiveMigrationKeepsTheClientOnItsAddress() async throws {
        let (root, traces, _, body) = try makeServedRoot("h3serve-nomig", file: "f.bin", size: 300_000, multiplier: 13)
        let (server, port) = try await startH3serve(root: root, ["--no-tcp", "--disable-active-migration", "--qlog-dir", traces.path])
        defer { server.stop() }
        let output = root.appendingPathComponent("out.bin").path
        let client = try ChildProcess(try TestEnvironment.executable("h3get"), [
            "--http3-only", "-k", "--migrate", "-v", "--stats=json", "-o", output, "https://127.0.0.1:\(port)/f.bin",
        ])
        #expect(try await client.waitForExit() == 0, "\(client.standardError.suffix(1500))")
        #expect(FileManager.default.contents(atPath: output).map(Array.init) == body)
        #expect(client.standardError.contains(#""path_changes":0"#), "\(client.standardError.suffix(800))")
        let trace = try await QLogEvent.closedTrace(in: traces.path, named: "_server.sqlog")
        #expect(trace.contains(#""disable_active_migration":true"#), "the server's transport parameters")
    }

    @Test func h3serveRefusesAPreferredAddressThatIsNotAnIP() async throws {
        let run = try ChildProcess(try TestEnvironment.executable("h3serve"), ["--preferred-address", "localhost:4434"])
        #expect(try await run.waitForExit() != 0)
        #expect(run.standardError.contains("numeric IP:PORT"), "\(run.standardError)")
    }

    /// ngtcp2's example client resumes with its session and transport-parameter files and sends
    /// its request in 0-RTT: h3serve --early-data answers it (the server reads 0-RTT packets and
    /// sends a handshake without a certificate); plain h3serve refuses the early data and the
    /// client's request still succeeds in 1-RTT.
    @Test(arguments: [true, false])
    func gtlsclientZeroRTTAgainstH3serve(acceptsEarlyData: Bool) async throws {
        let gtlsclient = try TestEnvironment.systemTool("gtlsclient", package: "ngtcp2-client")
        let (root, traces, downloads, body) = try makeServedRoot("h3serve-0rtt", file: "body.bin", size: 300_000, multiplier: 11)
        let (server, port) = try await startH3serve(root: root, ["--no-tcp", "--qlog-dir", traces.path] + (acceptsEarlyData ? ["--early-data"] : []))
        defer { server.stop() }
        for _ in 0..<2 {
            try? FileManager.default.removeItem(at: downloads.appendingPathComponent("body.bin"))
            let client = try ChildProcess(gtlsclient, [
                "--quiet", "--exit-on-all-streams-close", "--session-file=\(root.path)/session.pem", "--tp-file=\(root.path)/tp.txt",
                "--download", downloads.path, "127.0.0.1", "\(port)", "https://127.0.0.1:\(port)/body.bin",
            ])
            #expect(try await client.waitForExit(seconds: 30) == 0, "\(client.standardError)")
            let fetched = try Data(contentsOf: downloads.appendingPathComponent("body.bin"))
            #expect(try SHA256.hash(Array(fetched)) == (try SHA256.hash(body)))
        }
        server.terminate()
        _ = try await server.waitForExit()
        let files = try FileManager.default.contentsOfDirectory(atPath: traces.path).filter { $0.hasSuffix("_server.sqlog") }
        let texts = try files.map { try String(contentsOfFile: traces.appendingPathComponent($0).path, encoding: .utf8) }
        #expect(texts.count == 2)
        // One record per line-less JSON-SEQ entry: a received packet whose header says 0RTT.
        let readZeroRTT = texts.map { text in
            text.split(separator: "\u{1E}").contains { $0.contains(#""name":"transport:packet_received""#) && $0.contains(#""packet_type":"0RTT""#) }
        }
        #expect(readZeroRTT.filter { $0 }.count == (acceptsEarlyData ? 1 : 0), "connections whose 0-RTT packets the server read")
    }

    @Test func h3getAgainstH3serveCoversHeadRangeAndErrors() async throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("h3serve-\(UUID())")
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        try Data("0123456789".utf8).write(to: root.appendingPathComponent("ten.txt"))
        let (server, port) = try await startH3serve(root: root)
        defer { server.stop() }
        let base = "https://127.0.0.1:\(port)"
        let h3get = try TestEnvironment.executable("h3get")

        let range = try ChildProcess(h3get, ["-k", "-H", "Range: bytes=3-5", "-w", " %{response_code}", "\(base)/ten.txt"])
        #expect(try await range.waitForExit() == 0)
        #expect(range.standardOutput == "345 206")

        let head = try ChildProcess(h3get, ["-k", "--http3-only", "-I", "\(base)/ten.txt"])
        #expect(try await head.waitForExit() == 0)
        #expect(head.standardOutput.hasPrefix("HTTP/3 200\r\n"))
        #expect(head.standardOutput.contains("content-length: 10\r\n"))

        let missing = try ChildProcess(h3get, ["-k", "--fail", "-s", "\(base)/nope"])
        #expect(try await missing.waitForExit() == 22)

        let post = try ChildProcess(h3get, ["-k", "-d", "x=1", "-w", "%{response_code}", "-o", "/dev/null", "\(base)/ten.txt"])
        #expect(try await post.waitForExit() == 0)
        #expect(post.standardOutput == "405")
        // Writing to a device must not replace it with a file.
        let nullType = try FileManager.default.attributesOfItem(atPath: "/dev/null")[.type] as? FileAttributeType
        #expect(nullType == .typeCharacterSpecial, "-o /dev/null replaced the device")

        // --connect-to keeps the URL's name for TLS and sends the packets elsewhere.
        let moved = try ChildProcess(h3get, ["-k", "--http3-only", "--connect-to", "files.example:443:127.0.0.1:\(port)", "https://files.example/ten.txt"])
        #expect(try await moved.waitForExit() == 0, "\(moved.standardError)")
        #expect(moved.standardOutput == "0123456789")

        // --stats=json: the HTTP/3 connection's reports as one JSON object on stderr.
        let stats = try ChildProcess(h3get, ["-k", "--http3-only", "--stats=json", "-o", "/dev/null", "\(base)/ten.txt"])
        #expect(try await stats.waitForExit() == 0, "\(stats.standardError)")
        let object = try #require(try JSONSerialization.jsonObject(with: Data(stats.standardError.utf8)) as? [String: Any])
        #expect(object["http_version"] as? String == "3")
        #expect((object["establishment"] as? [String: Any])?["alpn"] as? String == "h3")
        #expect(((object["transfer"] as? [String: Any])?["received_bytes"] as? Int ?? 0) > 10)

        // No terminal, no progress bar: stderr stays empty on success.
        let quiet = try ChildProcess(h3get, ["-k", "-o", root.appendingPathComponent("copy.txt").path, "\(base)/ten.txt"])
        #expect(try await quiet.waitForExit() == 0)
        #expect(quiet.standardError.isEmpty, "\(quiet.standardError)")

        // A client that rejects the certificate leaves a connection without HTTP/3 behind;
        // the graceful shutdown on SIGTERM must cope with it and exit cleanly.
        let untrusted = try ChildProcess(h3get, ["--http3-only", "\(base)/ten.txt"])
        #expect(try await untrusted.waitForExit() == 60)
        server.terminate()
        #expect(try await server.waitForExit() == 0, "\(server.standardError)")
        #expect(server.standardOutput.contains("shutting down"))
    }

    /// Waits until `count` requests have arrived, so the server schedules them all at once.
    actor Barrier {
        private let count: Int
        private var arrived = 0
        private var waiters: [CheckedContinuation<Void, Never>] = []
        init(count: Int) { self.count = count }
        func arrive() async {
            arrived += 1
            if arrived >= count {
                for waiter in waiters { waiter.resume() }
                waiters.removeAll()
                return
            }
            await withCheckedContinuation { waiters.append($0) }
        }
    }

    actor Timeline {
        private(set) var finished: [Int] = []
        func finish(_ index: Int) { finished.append(index) }
    }

    /// A response body of `size` bytes in 64 KiB chunks whose first chunk waits at a barrier.
    actor HeldBody {
        private var remaining: Int
        private var held: Barrier?

        init(size: Int, heldUntil barrier: Barrier) {
            remaining = size
            held = barrier
        }

        func next() async -> [UInt8]? {
            if let barrier = held {
                held = nil
                await barrier.arrive()
            }
            guard remaining > 0 else { return nil }
            let chunk = min(64 << 10, remaining)
            remaining -= chunk
            return [UInt8](repeating: 0x62, count: chunk)
        }
    }

    /// Which request each response stream answers, as the server's handler saw it.
    actor StreamLabels {
        private(set) var labels: [Int: Int] = [:]
        func label(_ streamID: Int64, _ value: Int) { labels[Int(streamID)] = value }
    }

    /// The response STREAM frames of a server trace that carried new bytes (not retransmissions),
    /// in the order they were sent, for the streams in `streams`: (stream, offset, end, fin).
    static func newResponseBytes(in events: [QLogEvent], streams: Set<Int>) -> [(stream: Int, offset: Int, end: Int, fin: Bool)] {
        var sentUpTo: [Int: Int] = [:]
        var frames: [(stream: Int, offset: Int, end: Int, fin: Bool)] = []
        for event in events where event.name == "transport:packet_sent" {
            for frame in event.frames where frame["frame_type"] as? String == "stream" {
                guard let id = frame["stream_id"] as? Int, streams.contains(id) else { continue }
                let offset = frame["offset"] as? Int ?? 0
                let end = offset + (frame["length"] as? Int ?? 0)
                let fin = frame["fin"] as? Bool ?? false
                guard end > sentUpTo[id, default: 0] || (fin && end == 0) else { continue }
                sentUpTo[id] = end
                frames.append((id, offset, end, fin))
            }
        }
        return frames
    }

    /// The server's trace of its only connection, once closed.
    static func serverEvents(in directory: String) async throws -> [QLogEvent] {
        _ = try await QLogEvent.closedTrace(in: directory, named: "_server.sqlog")
        let name = try #require(try FileManager.default.contentsOfDirectory(atPath: directory).first { $0.hasSuffix("_server.sqlog") })
        return try QLogEvent.read(directory + "/" + name)
    }

    /// RFC 9218 §4 on the wire: once a response of urgency u has started, no new byte of a less
    /// urgent (non-incremental) response leaves until it has finished. This is checked in the
    /// server's trace, not by when the client's tasks finish reading, which depends on how a busy
    /// machine schedules them; handlers may also submit in any order.
    @Test func responsesGoOutInUrgencyOrder() async throws {
        let size = 1_500_000
        let barrier = Barrier(count: 8)
        let urgencyOfStream = StreamLabels()
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("urgency-\(UUID())").path
        let (server, port, identity) = try await Self.startServer(qlogDirectory: directory) { request in
            await urgencyOfStream.label(request.streamID, request.priority.urgency)
            await barrier.arrive()
            return HTTP3ServerResponse(status: .ok, body: [UInt8](repeating: 0x61, count: size))
        }
        defer { server.shutdown() }
        let client = Self.client(trusting: identity)
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            // Least urgent first: urgency 7 is asked for first, urgency 0 last.
            for urgency in stride(from: 7, through: 0, by: -1) {
                tasks.addTask {
                    let request = HTTPRequest(method: .get, scheme: "https", authority: "localhost:\(port)", path: "/u\(urgency)")
                    let response = try await client.execute(request, priority: HTTPPriority(urgency: urgency))
                    #expect(try await response.body.collect().count == size)
                }
                // The next is asked for once the server has this one: the order of asking is sure.
                let asked = 8 - urgency
                #expect(await eventually { await urgencyOfStream.labels.count == asked }, "request \(asked) never reached the server")
            }
            try await tasks.waitForAll()
        }
        await client.close()
        let urgency = await urgencyOfStream.labels
        #expect(Set(urgency.values) == Set(0...7))
        let frames = Self.newResponseBytes(in: try await Self.serverEvents(in: directory), streams: Set(urgency.keys))
        var started: Set<Int> = []
        var finished: Set<Int> = []
        var inversions: [String] = []
        for frame in frames {
            let waiting = started.subtracting(finished).filter { urgency[$0]! < urgency[frame.stream]! && $0 != frame.stream }
            if !waiting.isEmpty {
                inversions.append("u\(urgency[frame.stream]!) sent [\(frame.offset), \(frame.end)) before u\(waiting.map { urgency[$0]! }.sorted()) finished")
            }
            started.insert(frame.stream)
            if frame.fin { finished.insert(frame.stream) }
        }
        #expect(finished.count == 8, "every response ended with FIN")
        #expect(inversions.isEmpty, "\(inversions.count) inversions, first: \(inversions.prefix(3))")
    }

    /// Two incremental responses of one urgency share the connection (RFC 9218 §4): their bytes
    /// interleave on the wire. Both bodies are held until both responses are under way, so
    /// neither can be sent whole before the other exists; the check reads the server's trace.
    @Test func incrementalResponsesOfOneUrgencyInterleave() async throws {
        let size = 4_000_000
        let bodiesReady = Barrier(count: 2)
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("incremental-\(UUID())").path
        let (server, port, identity) = try await Self.startServer(qlogDirectory: directory) { _ in
            var response = HTTP3ServerResponse(status: .ok)
            let source = HeldBody(size: size, heldUntil: bodiesReady)
            response.bodyStream = AsyncThrowingStream<[UInt8], any Error> { await source.next() }
            return response
        }
        defer { server.shutdown() }
        let client = Self.client(trusting: identity)
        var streams: Set<Int> = []
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            for index in 0..<2 {
                tasks.addTask {
                    let request = HTTPRequest(method: .get, scheme: "https", authority: "localhost:\(port)", path: "/i\(index)")
                    let response = try await client.execute(request, priority: HTTPPriority(urgency: 3, incremental: true))
                    #expect(try await response.body.collect().count == size)
                }
            }
            try await tasks.waitForAll()
        }
        await client.close()
        let events = try await Self.serverEvents(in: directory)
        for event in events where event.name == "transport:packet_sent" {
            for frame in event.frames where frame["frame_type"] as? String == "stream" {
                if let id = frame["stream_id"] as? Int, id % 4 == 0 { streams.insert(id) }
            }
        }
        #expect(streams == [0, 4])
        let frames = Self.newResponseBytes(in: events, streams: streams).map(\.stream)
        let firstOfZero = try #require(frames.firstIndex(of: 0))
        let firstOfFour = try #require(frames.firstIndex(of: 4))
        let lastOfZero = try #require(frames.lastIndex(of: 0))
        let lastOfFour = try #require(frames.lastIndex(of: 4))
        #expect(firstOfFour < lastOfZero && firstOfZero < lastOfFour, "the two responses did not interleave")
    }

    @Test func priorityReachesTheServerAndCanBeUpdated() async throws {
        let seen = Timeline()
        let (server, port, identity) = try await Self.startServer { request in
            await seen.finish(request.priority.urgency)
            return HTTP3ServerResponse(status: .ok, body: [UInt8](repeating: 0x63, count: 3_000_000))
        }
        defer { server.shutdown() }
        let client = Self.client(trusting: identity)
        defer { client.shutdown() }
        let request = HTTPRequest(method: .get, scheme: "https", authority: "localhost:\(port)", path: "/p")
        let response = try await client.execute(request, priority: HTTPPriority(urgency: 6))
        try await response.updatePriority(HTTPPriority(urgency: 1, incremental: true))
        #expect(try await response.body.collect().count == 3_000_000)
        #expect(await seen.finished == [6])
    }

    @Test func goawayLetsTheTransferFinishAndMovesNewRequestsToANewConnection() async throws {
        let started = Barrier(count: 2)
        // The slow request stays in flight until the fresh one is answered.
        let release = AsyncStream<Never>.makeStream()
        defer { release.continuation.finish() }
        let (server, port, identity) = try await Self.startServer { request in
            if request.head.path == "/slow" {
                await started.arrive()
                for await _ in release.stream {}
                return HTTP3ServerResponse(status: .ok, body: [UInt8](repeating: 0x64, count: 5_000_000))
            }
            return HTTP3ServerResponse(status: .ok, body: Array("fresh".utf8))
        }
        defer { server.shutdown() }
        let client = Self.client(trusting: identity)
        defer { client.shutdown() }
        // Each connection has a socket, and so a local port, of its own.
        let first = try #require(try await client.connect(host: "localhost", port: port).establishment?.localPort)
        let slow = Task {
            let request = HTTPRequest(method: .get, scheme: "https", authority: "localhost:\(port)", path: "/slow")
            return try await client.execute(request).body.collect().count
        }
        await started.arrive()
        server.rotateConnections()
        // Once the GOAWAY arrives the client opens a new connection for what comes next.
        let moved = await eventually { (try? await client.connect(host: "localhost", port: port).establishment?.localPort) != first }
        #expect(moved, "the client kept using its connection after GOAWAY")
        let fresh = HTTPRequest(method: .get, scheme: "https", authority: "localhost:\(port)", path: "/fresh")
        let freshResponse = try await client.execute(fresh)
        #expect(freshResponse.connection.establishment?.localPort != first, "the new request went to the old connection")
        let freshBody = try await freshResponse.body.collect()
        #expect(freshBody == Array("fresh".utf8))
        release.continuation.finish()
        #expect(try await slow.value == 5_000_000, "the request in flight when GOAWAY was sent completes")
    }

    @Test func shutdownFinishesInFlightRequestsThenRefusesNewConnections() async throws {
        let started = Barrier(count: 2)
        let (server, port, identity) = try await Self.startServer { _ in
            await started.arrive()
            try? await Task.sleep(for: .milliseconds(200))
            return HTTP3ServerResponse(status: .ok, body: [UInt8](repeating: 0x65, count: 1_000_000))
        }
        let client = Self.client(trusting: identity)
        defer { client.shutdown() }
        let request = HTTPRequest(method: .get, scheme: "https", authority: "localhost:\(port)", path: "/inflight")
        let inflight = Task { try await client.execute(request).body.collect().count }
        await started.arrive()
        await server.shutdownGracefully(gracePeriod: .seconds(5))
        #expect(try await inflight.value == 1_000_000)
        let late = HTTPRequest(method: .get, scheme: "https", authority: "localhost:\(port)", path: "/late")
        await #expect(throws: HTTP3ClientError.self) { _ = try await client.execute(late) }
    }

    /// Once its requests are done, a connection closes right after the final GOAWAY: the server
    /// counts its open request streams down to none, and does not wait out the grace period.
    @Test func shutdownClosesAConnectionWhoseRequestsAreDoneWithoutWaitingOutTheGracePeriod() async throws {
        let (server, port, identity) = try await Self.startServer { request in
            HTTP3ServerResponse(status: .ok, body: Array((request.path ?? "").utf8))
        }
        let client = Self.client(trusting: identity)
        defer { client.shutdown() }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for index in 0..<20 {
                group.addTask {
                    let request = HTTPRequest(method: .get, scheme: "https", authority: "localhost:\(port)", path: "/\(index)")
                    let body = try await client.execute(request).body.collect()
                    #expect(body == Array("/\(index)".utf8))
                }
            }
            try await group.waitForAll()
        }
        // The client keeps its connection open; only the server's shutdown can end it before
        // the idle timeout (30 s), and it takes a few round trips.
        let clock = ContinuousClock()
        let started = clock.now
        await server.shutdownGracefully(gracePeriod: .seconds(120))
        #expect(clock.now - started < .seconds(10), "the idle connection closed after GOAWAY, not at the idle timeout or the end of the grace period")
    }

    /// A qlog trace once its connection has finished writing it: the last record comes when the
    /// connection is freed, and the writer closes the file with it.
    static func completedTrace(at path: String) async throws -> String {
        try await QLogEvent.finishedTrace(at: path)
    }

    /// The `http:` records of a qlog file, decoded, once the connection has finished writing it.
    static func httpEvents(in path: String) async throws -> [[String: Any]] {
        let text = try await completedTrace(at: path)
        var events: [[String: Any]] = []
        for record in text.split(separator: "\u{1E}") {
            guard let object = try? JSONSerialization.jsonObject(with: Data(record.utf8)) as? [String: Any] else {
                throw SetupError("not a JSON record in \(path): \(record.prefix(300))")
            }
            if (object["name"] as? String)?.hasPrefix("http:") == true { events.append(object) }
        }
        return events
    }

    @Test func qlogCarriesHTTPFramesOnTheTransportClock() async throws {
        // The body's second half waits for the priority update: a request that was over
        // before it got no PRIORITY_UPDATE to log.
        let (secondHalf, release) = AsyncStream.makeStream(of: Void.self)
        let (server, port, identity) = try await Self.startServer { _ in
            var response = HTTP3ServerResponse(status: .ok, body: [UInt8](repeating: 0x66, count: 1_000_000))
            var waited = false
            response.bodyStream = AsyncThrowingStream(unfolding: {
                guard !waited else { return nil }
                waited = true
                for await _ in secondHalf { break }
                return [UInt8](repeating: 0x66, count: 1_000_000)
            })
            return response
        }
        defer { server.shutdown() }
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("h3-qlog-\(UUID())").path
        var configuration = HTTP3Client.Configuration()
        configuration.certificateVerification = .pinnedSHA256(identity.sha256Fingerprint)
        configuration.qlogDirectory = directory
        let client = HTTP3Client(configuration: configuration)
        let request = HTTPRequest(method: .get, scheme: "https", authority: "localhost:\(port)", path: "/traced")
        let response = try await client.execute(request, priority: HTTPPriority(urgency: 5))
        try await response.updatePriority(HTTPPriority(urgency: 0, incremental: true))
        release.yield()
        _ = try await response.body.collect()
        let path = try #require(response.connection.qlogPath)
        client.shutdown()

        let events = try await Self.httpEvents(in: path)
        func frames(_ name: String, _ type: String) -> [[String: Any]] {
            events.filter { $0["name"] as? String == name }.compactMap { $0["data"] as? [String: Any] }
                .filter { ($0["frame"] as? [String: Any])?["frame_type"] as? String == type }
        }
        let requestHeaders = try #require(frames("http:frame_created", "headers").first)
        #expect(requestHeaders["stream_id"] as? Int == 0)
        let fields = ((requestHeaders["frame"] as? [String: Any])?["headers"] as? [[String: String]]) ?? []
        #expect(fields.contains { $0["name"] == "priority" && $0["value"] == "u=5" })
        #expect(fields.contains { $0["name"] == ":path" && $0["value"] == "/traced" })
        let responseHeaders = try #require(frames("http:frame_parsed", "headers").first)
        let responseFields = ((responseHeaders["frame"] as? [String: Any])?["headers"] as? [[String: String]]) ?? []
        #expect(responseFields.contains { $0["name"] == ":status" && $0["value"] == "200" })
        #expect(frames("http:frame_parsed", "data").reduce(0) { $0 + (($1["length"] as? Int) ?? 0) } == 2_000_000)
        #expect(!frames("http:frame_created", "settings").isEmpty)
        #expect(!frames("http:frame_parsed", "settings").isEmpty)
        let update = try #require(frames("http:frame_created", "priority_update").first?["frame"] as? [String: Any])
        #expect(update["element_id"] as? Int == 0)
        #expect(update["priority_field_value"] as? String == "u=0, i")
        let streamTypes = events.filter { $0["name"] as? String == "http:stream_type_set" }
        #expect(streamTypes.count == 6, "control and two QPACK streams each way")
        let (status, output) = try await TestEnvironment.checkQLog([path])
        #expect(status == 0, "qlog-check: \(output)")
    }

    /// Counts what a streaming body has produced so far.
    // @unchecked Sendable: `value` is read and written only under `lock`.
    final class Meter: @unchecked Sendable {
        private let lock = NSLock()
        private var value = 0
        func add(_ count: Int) { lock.lock(); value += count; lock.unlock() }
        var total: Int { lock.lock(); defer { lock.unlock() }; return value }

        /// Waits until the total reaches `target` for as long as it keeps moving; false once it
        /// has stood still for `stall` seconds. A lost flow-control window stops a transfer for
        /// good, while a loaded machine only slows it: on the 2-core CI machine, with the other
        /// suites running, 6 MB of upload has taken 15 s that takes 0.03 s alone.
        func reaches(_ target: Int, unlessStillFor stall: Double = 20) async -> Bool {
            var last = total
            var lastMoved = ContinuousClock.now
            while last < target {
                try? await Task.sleep(for: .milliseconds(20))
                if Task.isCancelled { return false }
                let now = total
                if now != last {
                    (last, lastMoved) = (now, .now)
                } else if ContinuousClock.now - lastMoved > TestEnvironment.scaled(.seconds(stall)) {
                    return false
                }
            }
            return true
        }
    }

    @Test func aSlowReaderHoldsTheServerBackThroughFlowControl() async throws {
        let total = 64 << 20
        let chunk = 256 << 10
        let produced = Meter()
        let (server, port, identity) = try await Self.startServer { _ in
            var sent = 0
            var response = HTTP3ServerResponse(status: .ok, headerFields: [.contentLength: "\(total)"])
            response.bodyStream = AsyncThrowingStream(unfolding: {
                guard sent < total else { return nil }
                sent += chunk
                produced.add(chunk)
                return [UInt8](repeating: 0x67, count: chunk)
            })
            return response
        }
        defer { server.shutdown() }
        let client = Self.client(trusting: identity)
        defer { client.shutdown() }
        let request = HTTPRequest(method: .get, scheme: "https", authority: "localhost:\(port)", path: "/stream")
        let response = try await client.execute(request)
        var iterator = response.body.makeAsyncIterator()
        var received = try await iterator.next()?.count ?? 0
        // While the reader waits, the producer fills the stream window and the server's send
        // buffer, and no more: `HTTP3BackpressureTests` proves the bound on the virtual clock.
        let filled = await produced.reaches(4 << 20)
        #expect(filled, "the producer stopped at \(produced.total) bytes, short of the stream window")
        #expect(produced.total < 24 << 20, "produced \(produced.total) bytes for a reader that took \(received)")
        while let next = try await iterator.next() { received += next.count }
        #expect(received == total)
        #expect(produced.total == total)
    }

    /// A body written by pushing, as frameworks write theirs (`HTTP3BodyWriter`), is paced by
    /// the client like a pulled one, and the trailers given with its end follow it.
    @Test func aWrittenBodyIsPacedByTheReaderAndEndsWithItsTrailers() async throws {
        let total = 64 << 20
        let piece = 256 << 10
        let taken = Meter()
        let (server, port, identity) = try await Self.startServer { _ in
            HTTP3ServerResponse(head: HTTPResponse(status: .ok)) { writer in
                while taken.total < total {
                    try await writer.write([UInt8](repeating: 0x77, count: piece))
                    taken.add(piece)
                }
                writer.finish(trailers: [HTTPField.Name("x-written")!: "\(taken.total)"])
            }
        }
        defer { server.shutdown() }
        let client = Self.client(trusting: identity)
        defer { client.shutdown() }
        let response = try await client.execute(HTTPRequest(method: .get, scheme: "https", authority: "localhost:\(port)", path: "/written"))
        var iterator = response.body.makeAsyncIterator()
        var received = try await iterator.next()?.count ?? 0
        let filled = await taken.reaches(4 << 20)
        #expect(filled, "the writer stopped at \(taken.total) bytes, short of the stream window")
        #expect(taken.total < 24 << 20, "the writer got \(taken.total) bytes ahead of a reader that took \(received)")
        while let next = try await iterator.next() { received += next.count }
        #expect(received == total)
        #expect(response.body.trailers?[HTTPField.Name("x-written")!] == "\(total)")
    }

    @Test func trailersTravelBothWays() async throws {
        let (server, port, identity) = try await Self.startServer { request in
            var response = HTTP3ServerResponse(status: .ok, body: Array("body".utf8))
            var trailers = HTTPFields()
            trailers[HTTPField.Name("x-checksum")!] = "abc123"
            _ = try await request.body.collect()
            trailers[HTTPField.Name("x-saw-request-trailer")!] = request.body.trailers?[HTTPField.Name("x-upload-done")!] ?? "none"
            response.trailers = trailers
            return response
        }
        defer { server.shutdown() }
        let client = Self.client(trusting: identity)
        defer { client.shutdown() }
        var requestTrailers = HTTPFields()
        requestTrailers[HTTPField.Name("x-upload-done")!] = "yes"
        let request = HTTPRequest(method: .post, scheme: "https", authority: "localhost:\(port)", path: "/t")
        let response = try await client.execute(request, body: Array("upload".utf8), trailers: requestTrailers)
        #expect(try await response.body.collect() == Array("body".utf8))
        let trailers = try #require(response.body.trailers)
        #expect(trailers[HTTPField.Name("x-checksum")!] == "abc123")
        #expect(trailers[HTTPField.Name("x-saw-request-trailer")!] == "yes")
    }

    /// A streamed body's trailers, known only once it has ended (a checksum of what was sent),
    /// follow it; they replace any given with the head.
    @Test func trailersKnownAtTheEndOfAStreamedBodyFollowIt() async throws {
        let (server, port, identity) = try await Self.startServer { _ in
            let sent = NIOLockedValueBox(0)
            var response = HTTP3ServerResponse(status: .ok)
            response.trailers = [HTTPField.Name("x-sent")!: "unknown"]
            response.bodyStream = AsyncThrowingStream(unfolding: {
                sent.withLockedValue { sent -> [UInt8]? in
                    guard sent < 3 << 20 else { return nil }
                    sent += 1 << 20
                    return [UInt8](repeating: 0x74, count: 1 << 20)
                }
            })
            response.trailersAfterBodyStream = { [HTTPField.Name("x-sent")!: "\(sent.withLockedValue { $0 })"] }
            return response
        }
        defer { server.shutdown() }
        let client = Self.client(trusting: identity)
        defer { client.shutdown() }
        let response = try await client.execute(HTTPRequest(method: .get, scheme: "https", authority: "localhost:\(port)", path: "/t"))
        #expect(try await response.body.collect().count == 3 << 20)
        #expect(response.body.trailers?[HTTPField.Name("x-sent")!] == "\(3 << 20)")
    }

    @Test func cancellingARequestSendsH3RequestCancelled() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("h3-cancel-\(UUID())").path
        let identity = try SelfSignedCertificate.generate()
        var configuration = HTTP3Server.Configuration()
        configuration.port = 0
        configuration.identity = identity
        configuration.qlogDirectory = directory
        let server = try HTTP3Server(configuration: configuration) { _ in
            var response = HTTP3ServerResponse(status: .ok)
            response.bodyStream = AsyncThrowingStream(unfolding: { [UInt8](repeating: 0x68, count: 256 << 10) })
            return response
        }
        let port = try await server.start()
        let client = Self.client(trusting: identity)
        let received = Meter()
        let download = Task {
            let request = HTTPRequest(method: .get, scheme: "https", authority: "localhost:\(port)", path: "/endless")
            let response = try await client.execute(request)
            for try await chunk in response.body { received.add(chunk.count) }
        }
        // Cancelled mid-body: once the body flows.
        #expect(await eventually { received.total > 0 }, "no body arrived")
        download.cancel()
        await #expect(throws: (any Error).self) { _ = try await download.value }
        client.shutdown()
        await server.shutdownGracefully(gracePeriod: .seconds(2))
        // The server's own trace shows the client's STOP_SENDING/RESET_STREAM with H3_REQUEST_CANCELLED (0x10c).
        let files = try FileManager.default.contentsOfDirectory(atPath: directory).filter { $0.hasSuffix("_server.sqlog") }
        let trace = try await Self.completedTrace(at: directory + "/" + #require(files.first))
        #expect(trace.contains("\"error_code\":268"), "no H3_REQUEST_CANCELLED in the server trace")
    }

    /// A task run with the client's task executor as its preference comes back to the
    /// connections' loop after every await: a response wakes its reader there, not on the
    /// global pool, and off that preference the same reads do not run there.
    @Test func requestsOnTheClientsExecutorRunOnItsLoop() async throws {
        let (server, port, identity) = try await Self.startServer { _ in
            HTTP3ServerResponse(status: .ok, body: [UInt8](repeating: 0x61, count: 200_000))
        }
        defer { server.shutdown() }
        let client = Self.client(trusting: identity)
        let loop = try #require((client.taskExecutor as? EventLoopTaskExecutor)?.eventLoop)
        let request = HTTPRequest(method: .get, scheme: "https", authority: "localhost:\(port)", path: "/")
        @Sendable func fetch() async throws -> (size: Int, onLoop: [Bool]) {
            let response = try await client.execute(request)
            var onLoop = [loop.inEventLoop]
            var size = 0
            for try await chunk in response.body {
                size += chunk.count
                onLoop.append(loop.inEventLoop)
            }
            return (size, onLoop)
        }
        let preferring = try await withTaskExecutorPreference(client.taskExecutor) { try await fetch() }
        #expect(preferring.size == 200_000)
        #expect(preferring.onLoop.count > 2 && preferring.onLoop.allSatisfy { $0 })
        let elsewhere = try await Task.detached { try await fetch() }.value
        #expect(elsewhere.size == 200_000)
        #expect(!elsewhere.onLoop.contains(true), "without the preference the reader runs on the global pool")
        await client.close()
    }

    /// Requests that tasks send in the same turn of the client's loop leave together: the
    /// connection asks its driver for one pass (`schedulePass`) rather than writing at once,
    /// so a burst of requests shares packets instead of sealing one packet each.
    @Test func requestsSentInOneTurnSharePackets() async throws {
        let (server, port, identity) = try await Self.startServer { _ in HTTP3ServerResponse(status: .noContent) }
        defer { server.shutdown() }
        let client = Self.client(trusting: identity)
        let request = HTTPRequest(method: .get, scheme: "https", authority: "localhost:\(port)", path: "/")
        let warmUp = try await client.execute(request)
        _ = try await warmUp.body.collect()
        let before = try #require(await warmUp.statistics()).transfer.sentPackets
        let burst = 50
        // The children start together in the loop's next turn, since the parent queues them all
        // from the loop; each sends its request and waits for the response.
        let last = try await withTaskExecutorPreference(client.taskExecutor) {
            try await withThrowingTaskGroup(of: HTTP3Response.self) { group in
                for _ in 0..<burst {
                    group.addTask(executorPreference: client.taskExecutor) {
                        let response = try await client.execute(request)
                        _ = try await response.body.collect()
                        return response
                    }
                }
                var last: HTTP3Response?
                for try await response in group {
                    #expect(response.head.status == .noContent)
                    last = response
                }
                return try #require(last)
            }
        }
        let sent = try #require(await last.statistics()).transfer.sentPackets - before
        // One packet per request without the shared flush; the acknowledgements of the
        // responses add a few.
        #expect(sent < UInt64(burst / 2), "the client sent \(sent) packets for \(burst) requests made in one turn")
        await client.close()
    }

    /// A response's status is read when it arrives; its head, with the fields, is built when
    /// first asked for and then kept, the same from any task.
    @Test func aResponsesStatusComesWithoutItsHeadAndTheHeadIsComplete() async throws {
        let (server, port, identity) = try await Self.startServer { _ in
            var fields = HTTPFields()
            fields[.contentType] = "text/plain"
            fields[HTTPField.Name("x-trace")!] = "abc"
            return HTTP3ServerResponse(status: .notFound, headerFields: fields, body: Array("gone\n".utf8))
        }
        defer { server.shutdown() }
        let client = Self.client(trusting: identity)
        let response = try await client.execute(HTTPRequest(method: .get, scheme: "https", authority: "localhost:\(port)", path: "/x"))
        #expect(response.status == .notFound)
        let heads = await withTaskGroup(of: HTTPResponse.self) { group in
            for _ in 0..<4 { group.addTask { response.head } }
            return await group.reduce(into: []) { $0.append($1) }
        }
        #expect(heads.allSatisfy { $0 == heads[0] })
        #expect(heads[0].status == .notFound)
        #expect(heads[0].headerFields[.contentType] == "text/plain")
        #expect(heads[0].headerFields[HTTPField.Name("x-trace")!] == "abc")
        #expect(heads[0].headerFields.contains { $0.name.rawName.hasPrefix(":") } == false, "pseudo-header fields stay out of the head")
        #expect(String(decoding: try await response.body.collect(), as: UTF8.self) == "gone\n")
        await client.close()
    }

    @Test func requestBodiesStreamUp() async throws {
        let (server, port, identity) = try await Self.startServer { request in
            let body = try await request.body.collect()
            let digest = (try? SHA256.hash(body)).map(Hex.encode) ?? "-"
            return HTTP3ServerResponse(status: .ok, body: Array("\(body.count) \(digest)".utf8))
        }
        defer { server.shutdown() }
        let client = Self.client(trusting: identity)
        defer { client.shutdown() }
        let pieces = 80
        let piece = [UInt8](repeating: 0x69, count: 256 << 10)
        var sent = 0
        let upload = AsyncThrowingStream<[UInt8], any Error>(unfolding: {
            guard sent < pieces else { return nil }
            sent += 1
            return piece
        })
        let request = HTTPRequest(method: .put, scheme: "https", authority: "localhost:\(port)", path: "/upload")
        let response = try await client.execute(request, bodyStream: upload)
        let expected = Hex.encode(try SHA256.hash([UInt8]((0..<pieces).flatMap { _ in piece })))
        #expect(String(decoding: try await response.body.collect(), as: UTF8.self) == "\(pieces * piece.count) \(expected)")
    }

    @Test func aSlowHandlerHoldsAnUploadBack() async throws {
        let total = 64 << 20
        let piece = 256 << 10
        let produced = Meter()
        let observed = Meter()
        let (server, port, identity) = try await Self.startServer { request in
            var iterator = request.body.makeAsyncIterator()
            var received = try await iterator.next()?.count ?? 0
            // The client fills the stream window while the handler waits, and no more
            // (`HTTP3BackpressureTests` proves the bound on the virtual clock).
            _ = await produced.reaches(4 << 20)
            observed.add(produced.total)
            while let chunk = try await iterator.next() { received += chunk.count }
            return HTTP3ServerResponse(status: .ok, body: Array("\(received)".utf8))
        }
        defer { server.shutdown() }
        let client = Self.client(trusting: identity)
        defer { client.shutdown() }
        var sent = 0
        let upload = AsyncThrowingStream<[UInt8], any Error>(unfolding: {
            guard sent < total else { return nil }
            sent += piece
            produced.add(piece)
            return [UInt8](repeating: 0x6a, count: piece)
        })
        let request = HTTPRequest(method: .put, scheme: "https", authority: "localhost:\(port)", path: "/slow-upload")
        let response = try await client.execute(request, bodyStream: upload)
        #expect(String(decoding: try await response.body.collect(), as: UTF8.self) == "\(total)")
        // While the handler paused, the client could only get the flow-control window plus its
        // own 4 MiB send buffer ahead, not the whole 64 MB.
        #expect(observed.total >= 4 << 20, "the upload stopped at \(observed.total) bytes, short of its send buffer")
        #expect(observed.total < 24 << 20, "the upload ran \(observed.total) bytes ahead of the handler")
    }

    @Test func aCancelledUploadEndsTheHandlersBodyWithTheClientsReset() async throws {
        // What ended the handler's body: an error, or nil when it ended normally (the wrong outcome).
        let (endings, ended) = AsyncStream<(any Error)?>.makeStream()
        let (starts, started) = AsyncStream<Void>.makeStream()
        let (server, port, identity) = try await Self.startServer { request in
            started.yield()
            do {
                _ = try await request.body.collect()
                ended.yield(nil)
            } catch {
                ended.yield(error)
            }
            return HTTP3ServerResponse(status: .ok)
        }
        defer { server.shutdown() }
        let client = Self.client(trusting: identity)
        defer { client.shutdown() }
        let upload = AsyncThrowingStream<[UInt8], any Error>(unfolding: { [UInt8](repeating: 0x6b, count: 64 << 10) })
        let request = HTTPRequest(method: .put, scheme: "https", authority: "localhost:\(port)", path: "/endless-upload")
        let uploading = Task { try await client.execute(request, bodyStream: upload) }
        // Cancel once the server is reading the body, not after a guess at how long that takes.
        var startIterator = starts.makeAsyncIterator()
        await startIterator.next()
        uploading.cancel()
        var iterator = endings.makeAsyncIterator()
        let seen = await iterator.next() ?? nil
        #expect(seen as? HTTP3RequestBodyError == .clientReset(.requestCancelled), "\(String(describing: seen))")
    }
}
