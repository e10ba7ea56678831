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

    /// curl's common `-w` variables, each measured or read from the response.
    @Test func writeOutHasCurlsCommonVariables() async throws {
        try await Self.withServer { url in
            let format = "%{http_code}|%{response_code}|%{http_version}|%{size_download}|%{num_headers}|%{content_type}|%{scheme}|%{method}"
                + "|%{exitcode}|%{errormsg}|%{url_effective}|%header{content-length}|%header{no-such}|%{size_header}"
                + "|%{time_starttransfer}|%{time_total}|%{speed_download}|%{size_upload}"
            let run = try await Self.h3get(["-o", "/dev/null", "-w", format, url])
            #expect(run.status == 0, "\(run.error)")
            let values = run.output.split(separator: "|", omittingEmptySubsequences: false).map(String.init)
            try #require(values.count == 18, "\(run.output)")
            let size = Self.text.utf8.count
            #expect(Array(values[0..<13]) == ["200", "200", "3", "\(size)", values[4], "text/plain; charset=utf-8", "HTTPS", "GET", "0", "", url, "\(size)", ""])
            #expect((Int(values[4]) ?? 0) >= 3, "content-type, accept-ranges, content-length at least")
            // The header block as -i prints it: "HTTP/3 200\r\n", the fields, a blank line.
            let headers = try await Self.h3get(["-I", url])
            #expect(Int(values[13]) == headers.output.utf8.count, "\(values[13]) vs \(headers.output)")
            let (start, total) = (Double(values[14]) ?? -1, Double(values[15]) ?? -1)
            #expect(start > 0 && start <= total && values[15].split(separator: ".").last?.count == 6, "\(values)")
            #expect((Double(values[16]) ?? 0) > 0 && values[17] == "0", "\(values)")
        }
    }

    /// The connection's figures over HTTP/3: its addresses, and times that follow one another
    /// from the transfer's start; a second URL on the same connection opened none.
    @Test func writeOutHasTheConnectionsAddressesAndTimes() async throws {
        try await Self.withServer { url in
            let port = try #require(URLComponents(string: url)?.port)
            let format = "%{num_connects} %{remote_ip} %{remote_port} %{local_ip} %{local_port} %{time_namelookup} %{time_connect}"
                + " %{time_appconnect} %{time_pretransfer} %{time_starttransfer} %{time_total}\\n"
            let run = try await Self.h3get(["--parallel-max", "1", "-o", "/dev/null", "-o", "/dev/null", "-w", format, url, url])
            #expect(run.status == 0, "\(run.error)")
            let lines = run.output.split(separator: "\n").map { $0.split(separator: " ").map(String.init) }
            try #require(lines.count == 2 && lines.allSatisfy { $0.count == 11 }, "\(run.output)")
            let (first, second) = (lines[0], lines[1])
            #expect(Array(first[0..<4]) == ["1", "127.0.0.1", "\(port)", "127.0.0.1"], "\(run.output)")
            #expect((UInt16(first[4]) ?? 0) > 0 && first[4] == second[4], "one local port for both: \(run.output)")
            let times = first[5...].compactMap(Double.init)
            #expect(times.count == 6 && times == times.sorted() && times[1] > 0 && times[1] == times[2], "\(run.output)")
            #expect(second[0] == "0" && second[5] == "0.000000" && second[6] == "0.000000", "reused: \(run.output)")
        }
    }

    /// A transfer that fails still writes `-w`, as curl's: code 000 and the reason.
    @Test func writeOutOfAFailedTransferSaysWhy() async throws {
        let run = try await Self.h3get(["-s", "-w", "%{http_code} %{exitcode} [%{time_total}]", "https://127.0.0.1:9/"])
        #expect(run.status == 7, "\(run.error)")
        #expect(run.output == "000 7 []", "\(run.output)")
        #expect(!run.error.contains("unknown --write-out variable"), "\(run.error)")
    }

    /// `-i` writes the header block before the body, where the body goes; `-D` writes it to a
    /// file, or to stdout with `-`.
    @Test func includeAndDumpHeaderWriteTheHeadersAsCurlDoes() async throws {
        try await Self.withServer { url in
            let included = try await Self.h3get(["-i", url])
            #expect(included.status == 0, "\(included.error)")
            #expect(included.output.hasPrefix("HTTP/3 200\r\ncontent-type: text/plain; charset=utf-8\r\n"), "\(included.output.prefix(200))")
            let block = try #require(included.output.range(of: "\r\n\r\n"))
            #expect(included.output[block.upperBound...] == Self.text[...])
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent("dump-\(UUID())")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            let dump = directory.appendingPathComponent("headers")
            try Data("old contents".utf8).write(to: dump)
            let dumped = try await Self.h3get(["-D", dump.path, "-o", "/dev/null", url])
            #expect(dumped.status == 0 && dumped.output.isEmpty, "\(dumped.error)")
            let headers = try String(contentsOf: dump, encoding: .utf8)
            #expect(headers == String(included.output[..<block.upperBound]), "\(headers)")
            let toStdout = try await Self.h3get(["-D", "-", url])
            #expect(toStdout.output == included.output)
            let unwritable = try await Self.h3get(["-D", "/nonexistent-\(UUID())/h", url])
            #expect(unwritable.status == 23 && unwritable.error.contains("No such file or directory"), "\(unwritable.error)")
        }
    }
}
