import Foundation
import H3
import HTTPTypes
import NIOConcurrencyHelpers
import QuicTestSupport
import QuicTransport
import Testing

/// What h3get writes, and what it does when it cannot: curl's behaviour, from its own code
/// (h3get writes through file descriptors, without Foundation's `FileHandle`).
@Suite("h3get's output", .timeLimit(TestEnvironment.minutes(2)))
struct H3GetOutputTests {
    private static let text = String(repeating: "h3get writes what it receives, byte for byte.\n", count: 3000)  // 141 KB

    private static func withServer(_ body: (_ url: String) async throws -> Void) async throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("h3get-output-\(UUID())")
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: root) }
        try Data(text.utf8).write(to: root.appendingPathComponent("text.txt"))
        let (server, port) = try await startH3serve(root: root, ["--no-tcp"])
        defer { server.stop() }
        try await body("https://127.0.0.1:\(port)/text.txt")
    }

    private static func h3get(_ arguments: [String]) async throws -> (status: Int32, output: String, error: String) {
        try await runH3get(["-k", "--http3-only"] + arguments)
    }

    @Test func aBodyGoesToStandardOutputWhole() async throws {
        try await Self.withServer { url in
            let run = try await Self.h3get([url])
            #expect(run.status == 0, "\(run.error)")
            #expect(run.output == Self.text, "\(run.output.utf8.count) bytes written of \(Self.text.utf8.count)")
        }
    }

    /// curl exits 23 ("Failure writing output to destination") when the body cannot be written.
    @Test func aFailedWriteExitsWith23AndSaysWhy() async throws {
        try await Self.withServer { url in
            let full = try await Self.h3get(["-o", "/dev/full", url])
            #expect(full.status == 23, "\(full.error)")
            #expect(full.error.contains("cannot write /dev/full: No space left on device"), "\(full.error)")
            let missing = try await Self.h3get(["-o", "/nonexistent-\(UUID())/file", url])
            #expect(missing.status == 23, "\(missing.error)")
            #expect(missing.error.contains("No such file or directory"), "\(missing.error)")
        }
    }

    @Test func writeOutNamesVariablesAsCurlDoes() async throws {
        try await Self.withServer { url in
            let run = try await Self.h3get(["-o", "/dev/null", "-w", "%{response_code} %{size_download} 100%%%{no_such_thing}\\n", url])
            #expect(run.status == 0, "\(run.error)")
            #expect(run.output == "200 \(Self.text.utf8.count) 100%\n")
            #expect(run.error.contains("unknown --write-out variable: 'no_such_thing'"), "\(run.error)")
        }
    }

    /// Past `PositionalValues.minimumCount` the URLs reach the parser as one value; each is
    /// still fetched, in order, with the options around them.
    @Test func hundredsOfURLsAreFetchedInOrder() async throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("h3get-many-\(UUID())")
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: root) }
        try Data().write(to: root.appendingPathComponent("empty"))
        let (server, port) = try await startH3serve(root: root, ["--no-tcp"])
        defer { server.stop() }
        let urls = (0..<300).map { "https://127.0.0.1:\(port)/empty?\($0)" }
        let run = try await Self.h3get(Array(urls[..<150]) + ["-w", "%{response_code} %{url}\\n"] + Array(urls[150...]))
        #expect(run.status == 0, "\(run.error)")
        #expect(run.output == urls.map { "200 \($0)\n" }.joined())
    }

    /// curl's `--parallel-max`: h3get starts no URL more than that many past the oldest one not
    /// yet written, so a slow first URL holds the rest back rather than letting finished
    /// bodies pile up behind it, and a run of any length holds that many transfers.
    @Test func parallelMaxCountsFromTheOldestURLNotYetWritten() async throws {
        struct Seen { var inFlight = 0, most = 0, beforeTheSlowOneEnded = 0, slowOneEnded = false }
        let seen = NIOLockedValueBox(Seen())
        var configuration = HTTP3Server.Configuration()
        configuration.port = 0
        configuration.identity = try SelfSignedCertificate.generate()
        let server = try HTTP3Server(configuration: configuration) { request in
            let slow = request.head.path == "/slow"
            seen.withLockedValue { seen in
                seen.inFlight += 1
                seen.most = max(seen.most, seen.inFlight)
                if !slow && !seen.slowOneEnded { seen.beforeTheSlowOneEnded += 1 }
            }
            try await Task.sleep(for: slow ? .milliseconds(300) : .milliseconds(5))
            seen.withLockedValue { seen in
                seen.inFlight -= 1
                if slow { seen.slowOneEnded = true }
            }
            return HTTP3ServerResponse(status: .ok, body: Array("\(request.head.path ?? "")\n".utf8))
        }
        let port = try await server.start()
        defer { server.shutdown(gracePeriod: .zero) }
        let paths = ["/slow"] + (1...20).map { "/\($0)" }
        let run = try await Self.h3get(["--parallel-max", "3"] + paths.map { "https://127.0.0.1:\(port)\($0)" })
        #expect(run.status == 0, "\(run.error)")
        #expect(run.output == paths.map { "\($0)\n" }.joined())
        let result = seen.withLockedValue { $0 }
        #expect(result.most <= 3, "\(result.most) requests were in flight at once")
        #expect(result.beforeTheSlowOneEnded <= 2, "\(result.beforeTheSlowOneEnded) URLs were started behind the unwritten first")

        let refused = try await Self.h3get(["--parallel-max", "0", "https://127.0.0.1:\(port)/1"])
        #expect(refused.status != 0)
        #expect(refused.error.contains("--parallel-max takes 1 to 300"), "\(refused.error)")
    }
}
