import Foundation
import H3
import QuicTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The web's own clients against h3serve: headless Chromium (Google's QUIC) and Firefox ESR
/// (Mozilla's neqo) from Debian load a page over HTTP/3, and the page fetches a 1.5 MB body
/// over HTTP/3 and checks its SHA-256 (`BrowserPage`). h3serve runs with its default address,
/// a leaf from a CA made for the run, and `--port 0`.
@Suite("Browsers over HTTP/3", .serialized, .timeLimit(TestEnvironment.minutes(6)))
struct BrowserInteropTests {
    /// Chromium speaks QUIC to an origin only when forced to (`--origin-to-force-quic-on`):
    /// it refuses HTTP/3 learnt from Alt-Svc when the certificate is from a locally added CA,
    /// which is its policy. It trusts the leaf through its SPKI hash. The page's
    /// `nextHopProtocol`s come back in the DOM (`--dump-dom`), and the urgency in each
    /// request's `priority` field, as Chromium's net log records sending it, is what h3serve's
    /// qlog records receiving (RFC 9218 §4). Chromium tries `localhost` as ::1 first and does
    /// not fall back to 127.0.0.1 for a forced origin: this needs h3serve's default address to
    /// cover ::1 as well.
    @Test func chromiumLoadsAPageAndItsBodyOverHTTP3WithItsUrgency() async throws {
        let chromium = try TestEnvironment.systemTool("chromium", package: "chromium")
        let authority = try TestCertificateAuthority()
        let page = try BrowserPage("chromium")
        defer { page.removeProfile() }
        let (server, port) = try await startH3serve(
            root: page.root,
            [
                "--cert", authority.leafCertificate, "--key", authority.leafKey, "--qlog-dir", page.traces.path,
            ]
        )
        defer { server.stop() }
        let netLog = page.root.appendingPathComponent("netlog.json").path
        let run = try await BrowserRun.run(
            chromium,
            Self.chromiumArguments + [
                "--user-data-dir=\(page.profile.path)",
                "--enable-quic", "--origin-to-force-quic-on=localhost:\(port)",
                "--ignore-certificate-errors-spki-list=\(try authority.leafSPKISHA256Base64())",
                "--log-net-log=\(netLog)", "--dump-dom", "https://localhost:\(port)/\(BrowserPage.direct)",
            ],
            within: 90
        )
        #expect(
            run.finished,
            "chromium did not finish in 90 s; stderr: \(Self.withoutDBusNoise(run.process.standardError))"
        )

        let output = "\(run.process.standardOutput.suffix(1500)) \(Self.withoutDBusNoise(run.process.standardError))"
        let report = try #require(
            BrowserPage.report(in: run.process.standardOutput), "no report in chromium's DOM: \(output)")
        try Self.expectBody(report, of: page, pageProtocol: "h3", server: server)

        // Each request's priority field, as sent and as received.
        let sent = try Self.priorityFieldsSent(inNetLog: netLog)
        let received = try await Self.priorityFieldsReceived(afterStopping: server, traces: page.traces)
        for path in ["/\(BrowserPage.direct)", "/body.bin", BrowserPage.imagePath] {
            let sentValue = try #require(sent[path], "chromium's net log shows no priority field for \(path): \(sent)")
            let receivedValue = try #require(
                received[path],
                "h3serve's qlog shows no priority field for \(path): \(received)"
            )
            #expect(
                HTTPPriority(fieldValue: receivedValue).urgency == HTTPPriority(fieldValue: sentValue).urgency,
                "\(path): sent '\(sentValue)', the server's qlog has '\(receivedValue)'"
            )
        }
    }

    /// Firefox told where HTTP/3 is by its testing pref (`alt-svc-mapping-for-testing`), so it
    /// goes to QUIC at once; it trusts the CA from its profile's NSS store. h3serve serves no
    /// TCP here: Firefox races TCP against a mapped HTTP/3 origin, and on a loaded machine TCP
    /// won the first load (the page came over h2, the body over h3). Firefox's `--screenshot`
    /// exits after the load event, so the page reports through a last request's path, read
    /// from h3serve's request log.
    @Test func firefoxLoadsThroughTheAltSvcTestingMapping() async throws {
        let firefox = try TestEnvironment.systemTool("firefox-esr", package: "firefox-esr")
        let authority = try TestCertificateAuthority()
        let page = try BrowserPage("firefox-mapped")
        defer { page.removeProfile() }
        let (server, port) = try await startH3serve(
            root: page.root,
            [
                "--no-tcp", "--cert", authority.leafCertificate, "--key", authority.leafKey,
            ]
        )
        defer { server.stop() }
        let profile = try await Self.firefoxProfile(
            at: page.profile,
            trusting: authority,
            prefs: [
                "network.http.http3.alt-svc-mapping-for-testing": "\"localhost;h3=:\(port)\""
            ]
        )
        let report = try await Self.runFirefox(
            firefox,
            profile: profile,
            url: "https://localhost:\(port)/\(BrowserPage.direct)",
            server: server
        )
        try Self.expectBody(report, of: page, pageProtocol: "h3", server: server)
    }

    /// Firefox with no hint learns HTTP/3 the way the web does: the page comes over TCP, whose
    /// response carries h3serve's `Alt-Svc: h3=":PORT"` (RFC 7838), Firefox sets up QUIC in the
    /// background, and the page's later requests go over `h3`. The page probes until one does
    /// (at most 200 probes, 100 ms apart), then fetches the body.
    @Test func firefoxLearnsHTTP3FromAltSvcOverTCP() async throws {
        let firefox = try TestEnvironment.systemTool("firefox-esr", package: "firefox-esr")
        let authority = try TestCertificateAuthority()
        let page = try BrowserPage("firefox-alt-svc")
        defer { page.removeProfile() }
        let (server, port) = try await startH3serve(
            root: page.root,
            ["--cert", authority.leafCertificate, "--key", authority.leafKey]
        )
        defer { server.stop() }
        let profile = try await Self.firefoxProfile(at: page.profile, trusting: authority, prefs: [:])
        let report = try await Self.runFirefox(
            firefox,
            profile: profile,
            url: "https://localhost:\(port)/\(BrowserPage.untilHTTP3)",
            server: server
        )
        // The page itself came over TCP: this is discovery, not a mapping.
        #expect(report["page"] == "h2", "the page came over \(report["page"] ?? "?"), expected h2: \(report)")
        #expect(Int(report["probes"] ?? "") ?? 0 >= 1, "\(report)")
        try Self.expectBody(report, of: page, pageProtocol: nil, server: server)
    }

    // MARK: - Helpers

    /// Headless, no sandbox as root, and none of Chromium's first-run and background traffic.
    static var chromiumArguments: [String] {
        (getuid() == 0 ? ["--no-sandbox"] : []) + [
            "--headless", "--disable-gpu", "--no-first-run", "--no-default-browser-check", "--disable-extensions",
            "--disable-background-networking", "--disable-component-update", "--disable-sync", "--password-store=basic",
            "--virtual-time-budget=30000",
        ]
    }

    /// Chromium's stderr without the lines about D-Bus, which it cannot reach here: what is
    /// left names a failed load (`Page load failed: net::ERR_QUIC_HANDSHAKE_FAILED`).
    static func withoutDBusNoise(_ text: String) -> String {
        String(text.split(separator: "\n").filter { !$0.contains("dbus") }.joined(separator: "\n").suffix(1500))
    }

    /// The body came over `h3`, whole and unchanged; the page over `pageProtocol` unless nil.
    /// h3serve's log names every request the page made.
    static func expectBody(
        _ report: [String: String],
        of page: BrowserPage,
        pageProtocol: String?,
        server: ChildProcess
    ) throws {
        if let pageProtocol {
            #expect(report["page"] == pageProtocol, "the page came over \(report["page"] ?? "?"): \(report)")
        }
        #expect(report["body"] == "h3", "the body came over \(report["body"] ?? "?"): \(report)")
        #expect(report["status"] == "200", "\(report)")
        #expect(report["length"] == String(page.body.count), "\(report)")
        #expect(report["sha256"] == (try page.bodySHA256), "the body's SHA-256 in the page: \(report)")
        #expect(report["error"] == nil, "the page's script failed: \(report)")
        #expect(server.standardError.contains("/body.bin"), "h3serve's log: \(server.standardError.suffix(1500))")
    }

    /// A Firefox profile in `profile` that trusts `authority`'s CA (NSS `certutil`), with HTTP/3 on and
    /// `prefs` added. Firefox stays on HTTP/2 for a CA that is not a public one unless
    /// `disable_when_third_party_roots_found` is off.
    static func firefoxProfile(
        at profile: URL,
        trusting authority: TestCertificateAuthority,
        prefs: [String: String]
    ) async throws -> URL {
        let certutil = try TestEnvironment.systemTool("certutil", package: "libnss3-tools")
        try FileManager.default.createDirectory(at: profile, withIntermediateDirectories: true)
        for arguments in [
            ["-N", "-d", "sql:\(profile.path)", "--empty-password"],
            ["-A", "-d", "sql:\(profile.path)", "-n", "test-ca", "-t", "C,,", "-i", authority.caCertificate],
        ] {
            let run = try ChildProcess(certutil, arguments)
            let status = try await run.waitForExit()
            guard status == 0 else {
                throw SetupError("certutil \(arguments.joined(separator: " ")): \(run.standardError)")
            }
        }
        let all: [String: String] = [
            "network.http.http3.enable": "true",
            "network.http.http3.disable_when_third_party_roots_found": "false",
            "browser.shell.checkDefaultBrowser": "false",
            "datareporting.policy.dataSubmissionEnabled": "false",
            "toolkit.telemetry.reportingpolicy.firstRun": "false",
            "app.update.disabledForTesting": "true",
            "network.captive-portal-service.enabled": "false",
            "network.connectivity-service.enabled": "false",
        ].merging(prefs) { $1 }
        let userJS = all.sorted { $0.key < $1.key }.map { "user_pref(\"\($0.key)\", \($0.value));\n" }.joined()
        try userJS.write(to: profile.appendingPathComponent("user.js"), atomically: true, encoding: .utf8)
        return profile
    }

    /// Loads `url` in headless Firefox with `--screenshot`, which exits after the load event,
    /// and returns the page's report from h3serve's log. Firefox is stopped as soon as the
    /// report is in the log, or after 120 s.
    ///
    /// Once here, Firefox on a fresh profile exited at once with status 0 without asking the
    /// server for anything; only then is it started a second time. A run that reached the
    /// server is never repeated.
    static func runFirefox(
        _ firefox: URL,
        profile: URL,
        url: String,
        server: ChildProcess
    ) async throws -> [String: String] {
        let screenshot = profile.deletingLastPathComponent().appendingPathComponent("screenshot.png").path
        let path = String(url.drop { $0 != "/" }.dropFirst(2).drop { $0 != "/" })
        var attempts: [String] = []
        for _ in 0..<2 {
            let run = try await BrowserRun.run(
                firefox,
                [
                    "--headless", "--no-remote", "--profile", profile.path, "--screenshot", screenshot, url,
                ],
                within: 120
            ) { BrowserPage.report(in: server.standardError) != nil }
            if let report = BrowserPage.report(in: server.standardError) { return report }
            attempts.append(
                "firefox \(run.finished ? "exited" : "timed out"): \(run.process.standardError.suffix(1000))"
            )
            if server.standardError.contains(path) { break }
        }
        throw SetupError(
            "no report in h3serve's log: \(server.standardError.suffix(1500)) \(attempts.joined(separator: "; "))"
        )
    }

    /// The `priority` field of each request path in Chromium's net log, as it sent them: each
    /// `HTTP3_HEADERS_SENT` event lists a request's fields as `name: value` strings.
    static func priorityFieldsSent(inNetLog path: String) throws -> [String: String] {
        let log = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: path))) as? [String: Any]
        let types = (log?["constants"] as? [String: Any])?["logEventTypes"] as? [String: Int]
        guard let headersSent = types?["HTTP3_HEADERS_SENT"], let events = log?["events"] as? [[String: Any]] else {
            throw SetupError("\(path) is not a net log with HTTP3_HEADERS_SENT events")
        }
        var fields: [String: String] = [:]
        for event in events where event["type"] as? Int == headersSent {
            let lines = (event["params"] as? [String: Any])?["headers"] as? [String] ?? []
            func value(_ name: String) -> String? {
                lines.first { $0.hasPrefix(name + ": ") }.map { String($0.dropFirst(name.count + 2)) }
            }
            if let requestPath = value(":path"), let priority = value("priority"), fields[requestPath] == nil {
                fields[requestPath] = priority
            }
        }
        return fields
    }

    /// The `priority` field of each request path in h3serve's qlog traces (`http:frame_parsed`
    /// HEADERS), once h3serve has stopped and written them.
    static func priorityFieldsReceived(afterStopping server: ChildProcess, traces: URL) async throws -> [String: String]
    {
        server.terminate()
        _ = try await server.waitForExit()
        var fields: [String: String] = [:]
        let names = try FileManager.default.contentsOfDirectory(atPath: traces.path).filter {
            $0.hasSuffix("_server.sqlog")
        }
        for name in names {
            for event in try QLogEvent.read(traces.appendingPathComponent(name).path)
            where event.name == "http:frame_parsed" {
                guard let frame = event.data["frame"] as? [String: Any], frame["frame_type"] as? String == "headers",
                    let headers = frame["headers"] as? [[String: String]],
                    let requestPath = headers.first(where: { $0["name"] == ":path" })?["value"],
                    let priority = headers.first(where: { $0["name"] == "priority" })?["value"]
                else { continue }
                fields[requestPath] = fields[requestPath] ?? priority
            }
        }
        return fields
    }
}
