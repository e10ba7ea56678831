import Foundation
import Glibc
@testable import H3
import HTTPTypes
import QuicTestSupport
import QuicTransport
import NIOConcurrencyHelpers
import Testing

/// HTTP/3 discovery and the TCP fallback (RFC 7838, RFC 9460), in the library and through the
/// h3get/h3serve binaries, over real sockets on loopback.
@Suite("Discovery", .serialized, .timeLimit(TestEnvironment.minutes(3)))
struct DiscoveryTests {
    // MARK: Library

    /// An HTTP/3 server and an HTTPS-on-TCP server on one port number, both answering with
    /// `handler`, in this process.
    struct Servers {
        let port: UInt16
        let quic: HTTP3Server?
        let tcp: HTTPTCPServer

        static func start(quic withQUIC: Bool = true, handler: @escaping HTTP3Server.Handler) async throws -> Servers {
            let identity = try SelfSignedCertificate.generate()
            var port: UInt16 = 0
            var quic: HTTP3Server?
            if withQUIC {
                var configuration = HTTP3Server.Configuration()
                configuration.port = 0
                configuration.identity = identity
                configuration.qlogDirectory = nil
                let server = try HTTP3Server(configuration: configuration, handler: handler)
                port = try await server.start()
                quic = server
            }
            var configuration = HTTPTCPServer.Configuration(certificateChainPEM: identity.certificatePEM, privateKeyPEM: identity.privateKeyPEM)
            guard !withQUIC else {
                configuration.port = port
                let tcp = try HTTPTCPServer(configuration: configuration, handler: handler)
                return Servers(port: try await tcp.start(), quic: quic, tcp: tcp)
            }
            // TCP only: a port free for UDP too, so no other test's QUIC server (one still
            // closing, say) answers there; a port the OS hands out for TCP alone may be taken.
            for attempt in 1...20 {
                configuration.port = try UDPBlackhole.freePort()
                let tcp = try HTTPTCPServer(configuration: configuration, handler: handler)
                do {
                    return Servers(port: try await tcp.start(), quic: nil, tcp: tcp)
                } catch where attempt < 20 {
                    continue
                }
            }
            throw SetupError("no port free for both TCP and UDP")
        }

        func stop() async {
            await tcp.shutdown()
            quic?.shutdown(gracePeriod: .milliseconds(100))
        }
    }

    static func session(_ policy: HTTPVersionPolicy, cache: AltServiceCache? = AltServiceCache(), _ adjust: (inout HTTPSession.Configuration) -> Void = { _ in }) -> HTTPSession {
        var configuration = HTTPSession.Configuration()
        configuration.policy = policy
        configuration.certificateVerification = .insecure
        configuration.altServiceCache = cache
        configuration.http3.qlogDirectory = nil
        adjust(&configuration)
        return HTTPSession(configuration: configuration)
    }

    static func get(_ authority: String, _ path: String = "/") -> HTTPRequest {
        HTTPRequest(method: .get, scheme: "https", authority: authority, path: path)
    }

    static func answering(altSvc: String?) -> HTTP3Server.Handler {
        { request in
            var response = HTTP3ServerResponse(status: .ok, body: Array("hello \(request.head.path ?? "")".utf8))
            if let altSvc { response.head.headerFields[.altSvc] = altSvc }
            return response
        }
    }

    /// Answers with `Alt-Svc: h3=":PORT"; ma=60`, PORT taken from the request's authority.
    static let advertisingOwnPort: HTTP3Server.Handler = { request in
        let port = request.head.authority.flatMap { HTTP3Client.split(authority: $0)?.1 } ?? 443
        var response = HTTP3ServerResponse(status: .ok, body: Array("hello \(request.head.path ?? "")".utf8))
        response.head.headerFields[.altSvc] = "h3=\":\(port)\"; ma=60"
        return response
    }

    @Test func discoveryLearnsAltSvcOverTCPAndUsesHTTP3Next() async throws {
        let live = try await Servers.start(handler: Self.advertisingOwnPort)
        defer { Task { await live.stop() } }
        let cache = AltServiceCache()
        // A loaded machine can take longer than 300 ms to finish a handshake; here HTTP/3 must win.
        let session = Self.session(.discovery, cache: cache) { $0.happyEyeballsDelay = .seconds(10) }
        defer { Task { await session.shutdown() } }
        let authority = "127.0.0.1:\(live.port)"
        let first = try await session.execute(Self.get(authority, "/one"))
        #expect(first.version == .http2)
        #expect(first.discovery == nil)
        #expect(try await first.body.collect() == Array("hello /one".utf8))
        #expect(cache.alternatives(for: .init(host: "127.0.0.1", port: live.port)).map(\.port) == [live.port])

        let second = try await session.execute(Self.get(authority, "/two"))
        #expect(second.version == .http3)
        #expect(second.discovery == .altSvcCache)
        #expect(try await second.body.collect() == Array("hello /two".utf8))
    }

    /// A server advertises on every response: the same value again within a second is taken
    /// as learnt, not parsed and cached again; a different value, or the same one a second
    /// later, is learnt at once. The cache's clock stands still unless the test moves it.
    @Test func aRepeatedAdvertisementIsLearntOnceAndAChangeAtOnce() async throws {
        let live = try await Servers.start { request in
            let port = request.head.authority.flatMap { HTTP3Client.split(authority: $0)?.1 } ?? 443
            var response = HTTP3ServerResponse(status: .ok, body: [])
            response.head.headerFields[.altSvc] = "h3=\":\(port)\"; ma=\(request.head.path == "/changed" ? 120 : 60)"
            return response
        }
        defer { Task { await live.stop() } }
        let clock = NIOLockedValueBox(Date(timeIntervalSince1970: 1_800_000_000))
        let cache = AltServiceCache(now: { clock.withLockedValue { $0 } })
        let session = Self.session(.http3Only, cache: cache)
        defer { Task { await session.shutdown() } }
        let authority = "127.0.0.1:\(live.port)"
        var learnt: [Bool] = []
        for (index, path) in ["/a", "/b", "/changed", "/changed", "/changed"].enumerated() {
            if index == 4 { clock.withLockedValue { $0 += 1.5 } }
            let response = try await session.execute(Self.get(authority, path))
            #expect(response.version == .http3)
            learnt.append(response.notes.contains { $0.hasPrefix("Alt-Svc learnt: h3=\":\(live.port)\"") })
        }
        #expect(learnt == [true, false, true, false, true], "\(learnt)")
        let entry = try #require(cache.entries[AltServiceCache.Origin(host: "127.0.0.1", port: live.port)]?.first)
        #expect(entry.alternative.maxAge == 120, "the changed value replaced the first")
        #expect(entry.expires == clock.withLockedValue { $0 } + 120, "learnt again, a second and a half later")
    }

    /// Over HTTP/3 the session reads Alt-Svc from the field section without building the
    /// response's head: two field lines count as one value joined by a comma, as `HTTPFields`
    /// joins them, and the head built later holds both lines and the same status.
    @Test func altSvcLinesOverHTTP3AreLearntWithoutTheHead() async throws {
        let live = try await Servers.start { _ in
            var response = HTTP3ServerResponse(status: .accepted, body: [])
            response.head.headerFields.append(HTTPField(name: .altSvc, value: "h3=\":4433\"; ma=60"))
            response.head.headerFields.append(HTTPField(name: .altSvc, value: "h3=\":4434\"; ma=60"))
            return response
        }
        defer { Task { await live.stop() } }
        let cache = AltServiceCache()
        let session = Self.session(.http3Only, cache: cache)
        defer { Task { await session.shutdown() } }
        let response = try await session.execute(Self.get("127.0.0.1:\(live.port)"))
        #expect(response.version == .http3)
        #expect(response.status == .accepted)
        #expect(cache.alternatives(for: .init(host: "127.0.0.1", port: live.port)).map(\.port) == [4433, 4434])
        #expect(response.head.status == .accepted)
        #expect(response.head.headerFields[values: .altSvc] == ["h3=\":4433\"; ma=60", "h3=\":4434\"; ma=60"])
    }

    @Test func aGarbageAltSvcIsIgnoredWithANote() async throws {
        let servers = try await Servers.start(quic: false, handler: Self.answering(altSvc: "h3=\":443\"; ma=\"never"))
        defer { Task { await servers.stop() } }
        let cache = AltServiceCache()
        let session = Self.session(.discovery, cache: cache)
        defer { Task { await session.shutdown() } }
        let response = try await session.execute(Self.get("127.0.0.1:\(servers.port)"))
        #expect(response.version == .http2)
        #expect(try await response.body.collect() == Array("hello /".utf8))
        #expect(response.notes.contains { $0.hasPrefix("Alt-Svc ignored: invalid Alt-Svc value") }, "\(response.notes)")
        #expect(cache.entries.isEmpty)
    }

    @Test func assumedHTTP3FallsBackAtOnceWhenUDPIsRefused() async throws {
        let servers = try await Servers.start(quic: false, handler: Self.answering(altSvc: nil))
        defer { Task { await servers.stop() } }
        let session = Self.session(.assumesHTTP3Capable) { $0.happyEyeballsDelay = .seconds(10) }
        defer { Task { await session.shutdown() } }
        let response = try await session.execute(Self.get("127.0.0.1:\(servers.port)"))
        // ICMP port unreachable ends the HTTP/3 attempt; TCP does not wait for the 10 s delay,
        // which would have given the reason "did not finish within 10 s".
        #expect(response.version == .http2)
        #expect(response.discovery == .assumed)
        #expect(response.fallbackReason?.contains("HTTP/3 to 127.0.0.1:\(servers.port) failed") == true, "\(response.fallbackReason ?? "nil")")
    }

    @Test func assumedHTTP3RacesTCPWhenTheHandshakeStalls() async throws {
        let servers = try await Servers.start(quic: false, handler: Self.answering(altSvc: nil))
        defer { Task { await servers.stop() } }
        // A UDP socket that swallows the Initial: no ICMP, no answer — a firewall that drops QUIC.
        let blackhole = try UDPBlackhole(port: servers.port)
        defer { blackhole.close() }
        let session = Self.session(.assumesHTTP3Capable) { $0.happyEyeballsDelay = .milliseconds(200) }
        defer { Task { await session.shutdown() } }
        let response = try await session.execute(Self.get("127.0.0.1:\(servers.port)"))
        #expect(response.version == .http2)
        #expect(response.fallbackReason?.contains("did not finish within") == true, "\(response.fallbackReason ?? "nil")")
        #expect(try await response.body.collect() == Array("hello /".utf8))
    }

    @Test func http3OnlyNeverFallsBack() async throws {
        let servers = try await Servers.start(quic: false, handler: Self.answering(altSvc: nil))
        defer { Task { await servers.stop() } }
        let session = Self.session(.http3Only)
        defer { Task { await session.shutdown() } }
        await #expect(throws: HTTP3ClientError.self) {
            _ = try await session.execute(Self.get("127.0.0.1:\(servers.port)"))
        }
    }

    @Test func aPinRefusesTheTCPFallbackInsteadOfSkippingIt() async throws {
        let servers = try await Servers.start(quic: false, handler: Self.answering(altSvc: nil))
        defer { Task { await servers.stop() } }
        let session = Self.session(.discovery) { $0.certificateVerification = .pinnedSHA256([UInt8](repeating: 1, count: 32)) }
        defer { Task { await session.shutdown() } }
        let refused = await #expect(throws: HTTPSessionError.self) {
            _ = try await session.execute(Self.get("127.0.0.1:\(servers.port)"))
        }
        #expect(refused?.code == .tcpUnavailable, "\(String(describing: refused))")
    }

    @Test func anHTTPSRecordGivesHTTP3OnTheFirstRequest() async throws {
        let servers = try await Servers.start(handler: Self.answering(altSvc: nil))
        defer { Task { await servers.stop() } }
        let record = HTTPSRecordTests.rdata(priority: 1, target: ".", params: [
            (1, [2] + Array("h3".utf8)), (3, [UInt8(servers.port >> 8), UInt8(servers.port & 0xff)]), (4, [127, 0, 0, 1]),
        ])
        let dns = try await HTTPSRecordTests.startDNS([("h3.test", record)])
        defer { dns.stop() }
        let cache = AltServiceCache()
        let session = Self.session(.discovery, cache: cache) {
            $0.httpsRecordResolver = HTTPSRecordResolver(server: ("127.0.0.1", dns.port))
            $0.happyEyeballsDelay = .seconds(10)
        }
        defer { Task { await session.shutdown() } }
        let response = try await session.execute(Self.get("h3.test", "/first"))
        #expect(response.version == .http3)
        #expect(response.discovery == .httpsRecord)
        #expect(try await response.body.collect() == Array("hello /first".utf8))
        #expect(cache.entries.isEmpty, "nothing learnt from Alt-Svc")
    }

    @Test func anHTTPSRecordToADeadPortFallsBackAndIsMarkedBroken() async throws {
        let servers = try await Servers.start(quic: false, handler: Self.answering(altSvc: nil))
        defer { Task { await servers.stop() } }
        let deadPort = try UDPBlackhole.freePort()
        let record = HTTPSRecordTests.rdata(priority: 1, target: ".", params: [
            (1, [2] + Array("h3".utf8)), (3, [UInt8(deadPort >> 8), UInt8(deadPort & 0xff)]), (4, [127, 0, 0, 1]),
        ])
        let dns = try await HTTPSRecordTests.startDNS([("_\(servers.port)._https.dead.test", record)])
        defer { dns.stop() }
        // TCP's head start outlasts any run, so only the attempt's failure (ICMP port
        // unreachable) starts TCP, which is what marks the alternative broken. With the default
        // 300 ms, a busy machine let TCP win first, and nothing was marked.
        let session = Self.session(.discovery) {
            $0.httpsRecordResolver = HTTPSRecordResolver(server: ("127.0.0.1", dns.port))
            $0.connectTo = ("127.0.0.1", servers.port)
            $0.happyEyeballsDelay = .seconds(600)
        }
        defer { Task { await session.shutdown() } }
        let first = try await session.execute(Self.get("dead.test:\(servers.port)"))
        #expect(first.version == .http2)
        #expect(first.discovery == .httpsRecord)
        #expect(first.fallbackReason?.contains("HTTP/3 to 127.0.0.1:\(deadPort) failed") == true, "\(first.fallbackReason ?? "nil")")
        let second = try await session.execute(Self.get("dead.test:\(servers.port)"))
        #expect(second.version == .http2)
        #expect(second.discovery == nil, "the broken alternative is skipped")
        #expect(second.notes.contains { $0.contains("marked broken") }, "\(second.notes)")
    }

    /// The configured DNS server is not there: the look-up fails with its own error, not the
    /// system resolver's, and the request goes on over TCP with a note saying why.
    @Test func anUnreachableDNSServerMeansTCPAndANote() async throws {
        let servers = try await Servers.start(quic: false, handler: Self.answering(altSvc: nil))
        defer { Task { await servers.stop() } }
        let session = Self.session(.discovery) {
            $0.httpsRecordResolver = HTTPSRecordResolver(server: ("127.0.0.1", 9), timeout: .seconds(1))
            $0.connectTo = ("127.0.0.1", servers.port)
        }
        defer { Task { await session.shutdown() } }
        let response = try await session.execute(Self.get("nodns.test:\(servers.port)"))
        #expect(response.version == .http2)
        #expect(response.notes.contains { $0.hasPrefix("HTTPS record look-up failed") && $0.contains("127.0.0.1:9") }, "\(response.notes)")
    }

    @Test func http1ClientsGetTheSameFilesAndTheAdvertisement() async throws {
        // curl is the independent HTTP/1.1 client here; the TCP listener must not need ALPN h2.
        let curl = try TestEnvironment.systemTool("curl", package: "curl")
        let servers = try await Servers.start(handler: Self.answering(altSvc: "h3=\":1\""))
        defer { Task { await servers.stop() } }
        let run = try ChildProcess(curl, ["-sk", "--http1.1", "-i", "https://127.0.0.1:\(servers.port)/x"])
        #expect(try await run.waitForExit() == 0, "\(run.standardError)")
        #expect(run.standardOutput.hasPrefix("HTTP/1.1 200"), "\(run.standardOutput)")
        #expect(run.standardOutput.lowercased().contains("alt-svc: h3=\":1\""))
        #expect(run.standardOutput.hasSuffix("hello /x"))
    }

    // MARK: h3get and h3serve

    static func makeRoot() throws -> URL {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("discovery-\(UUID())")
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        try Data("discovered\n".utf8).write(to: root.appendingPathComponent("index.html"))
        return root
    }

    @Test func h3getLearnsUsesAndForgetsHTTP3ThroughTheCacheFile() async throws {
        let root = try Self.makeRoot()
        let cacheFile = root.appendingPathComponent("altsvc.txt").path
        _ = FileManager.default.createFile(atPath: cacheFile, contents: Data())
        let (server, port) = try await startH3serve(root: root, ["--port", "0"])
        let url = "https://127.0.0.1:\(port)/index.html"
        // URLSession's policy: HTTP/3 only once discovered.
        let writeOut = ["--http3-after-discovery", "-w", "%{http_version}", "-o", "/dev/null"]

        // 1. Nothing known: TCP, and the advertisement is written to the file.
        let first = try await runH3get(["-k", "--alt-svc", cacheFile] + writeOut + [url])
        #expect(first.status == 0, "\(first.error)")
        #expect(first.output == "2")
        let saved = try String(contentsOfFile: cacheFile, encoding: .utf8)
        #expect(saved.contains("h2 127.0.0.1 \(port) h3 127.0.0.1 \(port) \""), "\(saved)")

        // 2. The same file: HTTP/3, and -v says why.
        let second = try await runH3get(["-k", "-v", "--alt-svc", cacheFile] + writeOut + [url])
        #expect(second.status == 0, "\(second.error)")
        #expect(second.output == "3")
        #expect(second.error.contains("HTTP/3 tried because: Alt-Svc cache"), "\(second.error)")
        server.stop()
        _ = try? await server.waitForExit()

        // 3. The server now says `clear`: the response still comes over HTTP/3, and the entry goes.
        let (clearing, _) = try await startH3serve(root: root, ["--port", "\(port)", "--alt-svc", "clear"])
        defer { clearing.stop() }
        let third = try await runH3get(["-k", "--alt-svc", cacheFile] + writeOut + [url])
        #expect(third.status == 0, "\(third.error)")
        #expect(third.output == "3")
        let cleared = try String(contentsOfFile: cacheFile, encoding: .utf8)
        #expect(!cleared.contains(" h3 "), "\(cleared)")
        let fourth = try await runH3get(["-k", "--alt-svc", cacheFile] + writeOut + [url])
        #expect(fourth.output == "2")
    }

    @Test func h3getUsesTheAltSvcFileCurlWrote() async throws {
        let curl = try TestEnvironment.systemTool("curl", package: "curl")
        let root = try Self.makeRoot()
        let cacheFile = root.appendingPathComponent("curl-altsvc.txt").path
        let (server, port) = try await startH3serve(root: root, ["--port", "0"])
        defer { server.stop() }
        let url = "https://127.0.0.1:\(port)/index.html"
        // Debian's curl speaks HTTP/2 only, but it records the h3 advertisement in its file.
        let learn = try ChildProcess(curl, ["-sk", "--alt-svc", cacheFile, "-o", "/dev/null", url])
        #expect(try await learn.waitForExit() == 0, "\(learn.standardError)")
        let written = try String(contentsOfFile: cacheFile, encoding: .utf8)
        #expect(written.contains("generated by libcurl"), "\(written)")
        let run = try await runH3get(["-k", "-v", "--alt-svc", cacheFile, "-w", "%{http_version}", "-o", "/dev/null", url])
        #expect(run.status == 0, "\(run.error)")
        #expect(run.output == "3")
        #expect(run.error.contains("HTTP/3 tried because: Alt-Svc cache"), "\(run.error)")
    }

    @Test func h3getSpeaksHTTP3ToAnHTTP3OnlyServerWithoutBeingTold() async throws {
        let root = try Self.makeRoot()
        let (server, port) = try await startH3serve(root: root, ["--port", "0", "--no-tcp"])
        defer { server.stop() }
        let url = "https://127.0.0.1:\(port)/index.html"
        for flags in [[], ["--http3"], ["--http3-only"]] {
            let run = try await runH3get(["-k", "-v", "-w", "%{http_version}"] + flags + [url])
            #expect(run.status == 0, "\(flags): \(run.error)")
            #expect(run.output == "discovered\n3", "\(flags)")
            #expect(!run.error.contains("fell back"), "\(flags): \(run.error)")
        }
        // URLSession's way waits for discovery, and there is none here: TCP, refused.
        let discovering = try await runH3get(["-k", "--http3-after-discovery", url])
        #expect(discovering.status == 7, "\(discovering.error)")
        #expect(discovering.error.contains("TCP connection refused"), "\(discovering.error)")
        // Every mode asks the certificate to be trusted: curl's exit code for a refused one.
        let untrusted = try await runH3get(["--http3-only", url])
        #expect(untrusted.status == 60, "\(untrusted.error)")
        #expect(untrusted.error.contains("certificate verification failed"), "\(untrusted.error)")
    }

    @Test(arguments: [[], ["--http3-only"], ["--http3-after-discovery"]])
    func h3getFollowsAnAltSvcFileInEveryMode(flags: [String]) async throws {
        let root = try Self.makeRoot()
        let (server, port) = try await startH3serve(root: root, ["--port", "0", "--no-tcp"])
        defer { server.stop() }
        // The origin's own port has nothing behind it; the cache says HTTP/3 is on the server's.
        let originPort = try UDPBlackhole.freePort()
        let cacheFile = root.appendingPathComponent("altsvc.txt").path
        try Data("h2 127.0.0.1 \(originPort) h3 127.0.0.1 \(port) \"20991231 00:00:00\" 0 0\n".utf8).write(to: URL(fileURLWithPath: cacheFile))
        let run = try await runH3get(["-k", "-v", "--alt-svc", cacheFile, "-w", "%{http_version}"] + flags + ["https://127.0.0.1:\(originPort)/index.html"])
        #expect(run.status == 0, "\(flags): \(run.error)")
        #expect(run.output == "discovered\n3", "\(flags)")
        #expect(run.error.contains("HTTP/3 tried because: Alt-Svc cache"), "\(flags): \(run.error)")
    }

    @Test func h3getFallsBackWhenUDPIsBlockedUnlessHTTP3Only() async throws {
        let root = try Self.makeRoot()
        let (server, port) = try await startH3serve(root: root, ["--port", "0", "--no-quic"])
        defer { server.stop() }
        let url = "https://127.0.0.1:\(port)/index.html"

        // The default, curl's --http3: HTTP/3 first, and TCP once it fails; -v says why.
        let assumed = try await runH3get(["-k", "-v", "-w", "%{http_version}", url])
        #expect(assumed.status == 0, "\(assumed.error)")
        #expect(assumed.output == "discovered\n2")
        #expect(assumed.error.contains("HTTP/3 tried because: assumed"), "\(assumed.error)")
        #expect(assumed.error.contains("fell back to TCP: HTTP/3 to 127.0.0.1:\(port) failed"), "\(assumed.error)")

        let only = try await runH3get(["-k", "--http3-only", url])
        #expect(only.status == 7, "\(only.error)")
        #expect(only.error.contains("cannot connect"), "\(only.error)")
        #expect(only.output.isEmpty)

        // Without -k the TCP path verifies too: curl's exit code for a refused certificate,
        // which says more than HTTP/3's refused port.
        let untrusted = try await runH3get([url])
        #expect(untrusted.status == 60, "\(untrusted.error)")
        #expect(untrusted.error.contains("certificate verification failed"), "\(untrusted.error)")
    }

    @Test func h3getUsesAnHTTPSRecordOnTheFirstRequest() async throws {
        let root = try Self.makeRoot()
        let (server, port) = try await startH3serve(root: root, ["--port", "0", "--no-alt-svc", "--no-tcp"])
        defer { server.stop() }
        let record = HTTPSRecordTests.rdata(priority: 1, target: ".", params: [
            (1, [2] + Array("h3".utf8)), (3, [UInt8(port >> 8), UInt8(port & 0xff)]), (4, [127, 0, 0, 1]),
        ])
        let dns = try await HTTPSRecordTests.startDNS([("h3.test", record)])
        defer { dns.stop() }
        let cacheFile = root.appendingPathComponent("altsvc.txt").path
        let run = try await runH3get([
            "-k", "-v", "--http3-after-discovery", "--alt-svc", cacheFile, "--dns-server", "127.0.0.1:\(dns.port)", "-w", "%{http_version}",
            "https://h3.test/index.html",
        ])
        #expect(run.status == 0, "\(run.error)")
        #expect(run.output == "discovered\n3")
        #expect(run.error.contains("HTTP/3 tried because: HTTPS record"), "\(run.error)")
        #expect(!run.error.contains("Alt-Svc learnt"), "\(run.error)")
    }

    @Test func h3serveAndH3getRejectBadFlagsClearly() async throws {
        let root = try Self.makeRoot()
        for (arguments, message) in [
            (["--no-quic", "--no-tcp"], "leave nothing to serve"),
            (["--alt-svc", "h3=\":1"], "--alt-svc"),
            (["--alt-svc", "clear", "--no-alt-svc"], "contradict"),
        ] {
            let run = try ChildProcess(try TestEnvironment.executable("h3serve"), ["--root", root.path] + arguments)
            #expect(try await run.waitForExit() != 0)
            #expect(run.standardError.contains(message), "\(arguments): \(run.standardError)")
        }
        for (arguments, message) in [
            (["--http3-only", "--http3-after-discovery"], "only one of"),
            (["--http3", "--http3-only"], "only one of"),
            (["--dns-server", "nowhere"], "--dns-server takes HOST:PORT"),
        ] {
            let run = try await runH3get(arguments + ["https://127.0.0.1:1/"])
            #expect(run.status != 0)
            #expect(run.error.contains(message), "\(arguments): \(run.error)")
        }
    }
}

/// A bound UDP socket that reads nothing: datagrams to it vanish without an ICMP error.
struct UDPBlackhole {
    let descriptor: Int32

    init(port: UInt16) throws {
        descriptor = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard result == 0 else { throw SetupError("cannot bind UDP 127.0.0.1:\(port): \(String(cString: strerror(errno)))") }
    }

    func close() { _ = Glibc.close(descriptor) }

    /// A UDP port that was free a moment ago (bound and released), so nothing answers on it.
    static func freePort() throws -> UInt16 {
        let probe = try UDPBlackhole(port: 0)
        defer { probe.close() }
        var address = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(probe.descriptor, $0, &length) }
        }
        return UInt16(bigEndian: address.sin_port)
    }
}
