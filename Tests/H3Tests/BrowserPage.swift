import Foundation
import QuicTestSupport
import QuicTransport

#if canImport(Glibc)
    import Glibc
#endif

/// A served root for a browser: pages whose script fetches a body and reports how it came.
///
/// The script works synchronously (synchronous `XMLHttpRequest`s, SHA-256 in JavaScript), so
/// everything is done before the load event: Chromium's `--dump-dom` and Firefox's
/// `--screenshot` both act only after it. It reports
/// `page=P;body=P;status=N;length=N;sha256=HEX;probes=N` twice: in the element `#result`, for
/// `--dump-dom`, and as the path of a last request, `/report/…`, for the server's log.
/// `page` is the navigation's `nextHopProtocol` and `body` the body's (`h3`, `h2`, `http_1.1`).
struct BrowserPage {
    let root: URL
    /// `--qlog-dir` for h3serve, inside the root.
    let traces: URL
    /// The body every page fetches: random bytes, so a reordered or repeated chunk changes it.
    let body: [UInt8]

    /// The page that fetches `/body.bin` once.
    static let direct = "page.html"
    /// The page that first fetches `/probe.txt` until it comes over `h3` (an Alt-Svc learnt
    /// from the page's own response takes effect in the background), at most 200 times 100 ms
    /// apart, then fetches `/body.bin`. `probes` reports how many it took.
    static let untilHTTP3 = "until-h3.html"
    /// An image every page shows, so that a request of another kind (and, in Chromium,
    /// another urgency) goes out with the page's.
    static let imagePath = "/image.svg"

    init(_ label: String, bodySize: Int = 1_500_000) throws {
        root = FileManager.default.temporaryDirectory.appendingPathComponent("\(label)-\(UUID())")
        traces = root.appendingPathComponent("qlog")
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        body = try randomBytes(bodySize)
        try Data(body).write(to: root.appendingPathComponent("body.bin"))
        try Data("probe\n".utf8).write(to: root.appendingPathComponent("probe.txt"))
        try Data(
            #"<svg xmlns="http://www.w3.org/2000/svg" width="8" height="8"><rect width="8" height="8"/></svg>"#.utf8
        )
        .write(to: root.appendingPathComponent(String(Self.imagePath.dropFirst())))
        try Self.html(waitsForHTTP3: false).write(
            to: root.appendingPathComponent(Self.direct),
            atomically: true,
            encoding: .utf8
        )
        try Self.html(waitsForHTTP3: true).write(
            to: root.appendingPathComponent(Self.untilHTTP3),
            atomically: true,
            encoding: .utf8
        )
    }

    var bodySHA256: String { get throws { Hex.encode(try SHA256.hash(body)) } }

    /// A fresh directory for the browser's profile (user data), inside the root.
    var profile: URL { root.appendingPathComponent("profile") }

    /// Removes the browser's profile, about 17 MB; the page and h3serve's traces stay for
    /// scripts/test's qlog check.
    func removeProfile() { try? FileManager.default.removeItem(at: profile) }

    /// What a page reported, from the first `page=…` report in `text` (Chromium's DOM or
    /// h3serve's log); nil when there is none. Reports are read by key, whatever else the
    /// line holds, so a change of the log's format leaves them readable.
    static func report(in text: String) -> [String: String]? {
        guard let match = text.firstMatch(of: /page=[A-Za-z0-9._\-]*(;[a-z0-9]+=[A-Za-z0-9._\-]*)+/) else { return nil }
        var fields: [String: String] = [:]
        for pair in match.output.0.split(separator: ";") {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            if parts.count == 2 { fields[String(parts[0])] = String(parts[1]) }
        }
        return fields
    }

    /// The page: `waitsForHTTP3` makes it probe until a request goes over `h3` before it
    /// fetches the body.
    private static func html(waitsForHTTP3: Bool) -> String {
        """
        <!doctype html>
        <html><head><meta charset="utf-8"><title>h3 interop</title></head>
        <body><img src="\(imagePath)" alt=""><pre id="result">pending</pre>
        <script>
        \(sha256JavaScript)
        function get(url) {
          var request = new XMLHttpRequest();
          request.open('GET', url, false);
          request.overrideMimeType('text/plain; charset=x-user-defined');
          request.send();
          return request;
        }
        function protocolOf(url) {
          var entries = performance.getEntriesByName(url);
          return entries.length ? entries[entries.length - 1].nextHopProtocol : 'none';
        }
        function clean(value) { return String(value).replace(/[^A-Za-z0-9.-]/g, '_') || 'empty'; }
        var result = { page: 'none', body: 'none', status: 0, length: 0, sha256: 'none', probes: 0 };
        try {
          var navigation = performance.getEntriesByType('navigation')[0];
          result.page = navigation ? navigation.nextHopProtocol : 'none';
          if (\(waitsForHTTP3)) {
            var deadline = Date.now() + 20000;
            while (result.probes < 200 && Date.now() < deadline) {
              result.probes++;
              var probe = new URL('/probe.txt?n=' + result.probes, location.href).href;
              get(probe);
              if (protocolOf(probe) === 'h3') break;
              for (var until = Date.now() + 100; Date.now() < until;) {}
            }
          }
          var url = new URL('/body.bin', location.href).href;
          var response = get(url);
          var text = response.responseText, bytes = new Uint8Array(text.length);
          for (var i = 0; i < text.length; i++) bytes[i] = text.charCodeAt(i) & 0xff;
          result.status = response.status;
          result.length = bytes.length;
          result.sha256 = sha256hex(bytes);
          result.body = protocolOf(url);
        } catch (error) {
          result.error = error;
        }
        var report = Object.keys(result).map(function (key) { return key + '=' + clean(result[key]); }).join(';');
        document.getElementById('result').textContent = report;
        var beacon = new XMLHttpRequest();
        beacon.open('GET', '/report/' + report, false);
        beacon.send();
        </script>
        </body></html>

        """
    }

    /// FIPS 180-4 SHA-256 in plain JavaScript: `crypto.subtle.digest` only answers
    /// asynchronously, after the load event.
    private static let sha256JavaScript = """
        function sha256hex(bytes) {
          var K = [0x428a2f98,0x71374491,0xb5c0fbcf,0xe9b5dba5,0x3956c25b,0x59f111f1,0x923f82a4,0xab1c5ed5,
            0xd807aa98,0x12835b01,0x243185be,0x550c7dc3,0x72be5d74,0x80deb1fe,0x9bdc06a7,0xc19bf174,
            0xe49b69c1,0xefbe4786,0x0fc19dc6,0x240ca1cc,0x2de92c6f,0x4a7484aa,0x5cb0a9dc,0x76f988da,
            0x983e5152,0xa831c66d,0xb00327c8,0xbf597fc7,0xc6e00bf3,0xd5a79147,0x06ca6351,0x14292967,
            0x27b70a85,0x2e1b2138,0x4d2c6dfc,0x53380d13,0x650a7354,0x766a0abb,0x81c2c92e,0x92722c85,
            0xa2bfe8a1,0xa81a664b,0xc24b8b70,0xc76c51a3,0xd192e819,0xd6990624,0xf40e3585,0x106aa070,
            0x19a4c116,0x1e376c08,0x2748774c,0x34b0bcb5,0x391c0cb3,0x4ed8aa4a,0x5b9cca4f,0x682e6ff3,
            0x748f82ee,0x78a5636f,0x84c87814,0x8cc70208,0x90befffa,0xa4506ceb,0xbef9a3f7,0xc67178f2];
          var h = [0x6a09e667,0xbb67ae85,0x3c6ef372,0xa54ff53a,0x510e527f,0x9b05688c,0x1f83d9ab,0x5be0cd19];
          var n = bytes.length, total = ((n + 9 + 63) >> 6) << 6, m = new Uint8Array(total);
          m.set(bytes); m[n] = 0x80;
          var dv = new DataView(m.buffer);
          dv.setUint32(total - 8, Math.floor(n / 0x20000000)); dv.setUint32(total - 4, (n * 8) >>> 0);
          var w = new Int32Array(64);
          for (var off = 0; off < total; off += 64) {
            for (var i = 0; i < 16; i++) w[i] = dv.getInt32(off + 4 * i);
            for (i = 16; i < 64; i++) {
              var a = w[i - 15], b = w[i - 2];
              var s0 = ((a >>> 7) | (a << 25)) ^ ((a >>> 18) | (a << 14)) ^ (a >>> 3);
              var s1 = ((b >>> 17) | (b << 15)) ^ ((b >>> 19) | (b << 13)) ^ (b >>> 10);
              w[i] = (w[i - 16] + s0 + w[i - 7] + s1) | 0;
            }
            var A = h[0], B = h[1], C = h[2], D = h[3], E = h[4], F = h[5], G = h[6], H = h[7];
            for (i = 0; i < 64; i++) {
              var S1 = ((E >>> 6) | (E << 26)) ^ ((E >>> 11) | (E << 21)) ^ ((E >>> 25) | (E << 7));
              var t1 = (H + S1 + ((E & F) ^ (~E & G)) + K[i] + w[i]) | 0;
              var S0 = ((A >>> 2) | (A << 30)) ^ ((A >>> 13) | (A << 19)) ^ ((A >>> 22) | (A << 10));
              var t2 = (S0 + ((A & B) ^ (A & C) ^ (B & C))) | 0;
              H = G; G = F; F = E; E = (D + t1) | 0; D = C; C = B; B = A; A = (t1 + t2) | 0;
            }
            h[0] = (h[0] + A) | 0; h[1] = (h[1] + B) | 0; h[2] = (h[2] + C) | 0; h[3] = (h[3] + D) | 0;
            h[4] = (h[4] + E) | 0; h[5] = (h[5] + F) | 0; h[6] = (h[6] + G) | 0; h[7] = (h[7] + H) | 0;
          }
          return h.map(function (x) { return ('0000000' + (x >>> 0).toString(16)).slice(-8); }).join('');
        }
        """
}

/// A headless browser run to its end, bounded: the browser is its own process group (Foundation
/// starts every child in one), so it and every process it started are killed together after.
struct BrowserRun {
    let process: ChildProcess
    /// Whether it exited by itself (or `done` held) before the bound.
    let finished: Bool

    /// Runs `browser` with `arguments` until it exits or `done` holds, at most `seconds`; then
    /// kills its process group and waits until no process of the group is left.
    static func run(
        _ browser: URL,
        _ arguments: [String],
        within seconds: Double,
        until done: @escaping () -> Bool = { false }
    ) async throws -> BrowserRun {
        let process = try ChildProcess(browser, arguments)
        let group = process.processIdentifier
        let finished = await eventually(within: seconds) { !process.isRunning || done() }
        kill(-group, SIGKILL)
        process.stop()
        _ = try? await process.waitForExit(seconds: 15)
        let gone = await eventually(within: 15) { processes(inGroup: group).isEmpty }
        if !gone {
            throw SetupError("\(browser.lastPathComponent): processes \(processes(inGroup: group)) outlived SIGKILL")
        }
        return BrowserRun(process: process, finished: finished)
    }

    /// The processes whose process group is `group` (field 5 of /proc/PID/stat).
    static func processes(inGroup group: Int32) -> [Int32] {
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
        return entries.compactMap(Int32.init).filter { pid in
            guard let stat = try? String(decoding: readProcFile("/proc/\(pid)/stat"), as: UTF8.self),
                let close = stat.lastIndex(of: ")")
            else { return false }
            // After "pid (comm)": state, ppid, pgrp.
            let fields = stat[stat.index(after: close)...].split(separator: " ")
            return fields.count > 2 && Int32(fields[2]) == group && !fields[0].hasPrefix("Z")
        }
    }
}
