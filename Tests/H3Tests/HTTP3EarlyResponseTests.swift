import Foundation
import H3
import HTTPTypes
import NIOConcurrencyHelpers
import QuicTestSupport
import QuicTransport
import Testing

/// Responses that are complete before their request body is (RFC 9114 §4.1.2): the server stops
/// reading with STOP_SENDING and H3_NO_ERROR and keeps the connection; the client takes the
/// response while it is still uploading; and a later request on the same connection works.
@Suite("HTTP/3 early responses", .serialized, .timeLimit(TestEnvironment.minutes(5)))
struct HTTP3EarlyResponseTests {
    /// Uploads of 16 MB each, refused after part of each arrived and before the rest did, on one
    /// connection. Each handler waits until the client has produced 6 MB, so the server holds at
    /// least 2 MB of it unread (the client runs at most its 4 MiB send buffer ahead of what the
    /// server acknowledged). Were that credit lost, the 16 MiB connection window would be gone
    /// by the eighth upload and the rest would stall: the handler waits as long as the upload
    /// moves, so load slows the test and only a stall fails it.
    @Test func uploadsAnsweredBeforeTheyEndKeepTheConnectionAndItsWindow() async throws {
        let uploads = 10
        let produced = (0..<uploads).map { _ in HTTP3LoopbackTests.Meter() }
        let (server, port, identity) = try await HTTP3LoopbackTests.startServer { request in
            guard let index = request.head.path?.split(separator: "/").last.flatMap({ Int($0) }) else {
                return HTTP3ServerResponse(status: .ok, body: Array("read nothing".utf8))
            }
            var body = request.body.makeAsyncIterator()
            let first = try await body.next()?.count ?? 0
            let ahead = await produced[index].reaches(6 << 20)
            return HTTP3ServerResponse(status: .contentTooLarge, body: Array("read \(first) bytes, client ahead: \(ahead)".utf8))
        }
        defer { server.shutdown() }
        let client = HTTP3LoopbackTests.client(trusting: identity)
        defer { client.shutdown() }
        let piece = [UInt8](repeating: 0x75, count: 256 << 10)
        for index in 0..<uploads {
            var sent = 0
            let upload = AsyncThrowingStream<[UInt8], any Error>(unfolding: {
                guard sent < 16 << 20 else { return nil }
                sent += piece.count
                produced[index].add(piece.count)
                return piece
            })
            let request = HTTPRequest(method: .post, scheme: "https", authority: "localhost:\(port)", path: "/upload/\(index)")
            let response = try await within(120) { try await client.execute(request, bodyStream: upload) }
            #expect(response.head.status == .contentTooLarge)
            let text = String(decoding: try await response.body.collect(), as: UTF8.self)
            #expect(text.hasSuffix("client ahead: true"), "upload \(index): \(text)")
        }
        let later = try await client.execute(HTTPRequest(method: .get, scheme: "https", authority: "localhost:\(port)", path: "/"))
        #expect(later.head.status == .ok)
        #expect(try await later.body.collect() == Array("read nothing".utf8))
        let accepted = await server.workerStatistics().map(\.connectionsAccepted).reduce(0, +)
        #expect(accepted == 1, "the uploads and the later request took \(accepted) connections")
    }

    /// A handler that streams its response may read the request body meanwhile: the server
    /// stops reading only once the response is complete.
    @Test func aStreamingResponseMayReadTheWholeRequestBody() async throws {
        let (server, port, identity) = try await HTTP3LoopbackTests.startServer { request in
            let (echo, continuation) = AsyncThrowingStream.makeStream(of: [UInt8].self)
            Task {
                do {
                    for try await chunk in request.body { continuation.yield(chunk) }
                    continuation.finish()
                } catch {
                    continuation.finish(throwing: error)
                }
            }
            var response = HTTP3ServerResponse(status: .ok)
            response.bodyStream = echo
            return response
        }
        defer { server.shutdown() }
        let client = HTTP3LoopbackTests.client(trusting: identity)
        defer { client.shutdown() }
        let body = (0..<(3 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 7) }
        let request = HTTPRequest(method: .put, scheme: "https", authority: "localhost:\(port)", path: "/echo")
        let response = try await client.execute(request, body: body)
        #expect(response.head.status == .ok)
        #expect(try await response.body.collect() == body)
    }

    /// aioquic uploads 2 MB to three paths h3serve's file server refuses (405) on one connection,
    /// at once: each gets its answer, the connection survives them all, and the server's trace
    /// shows it asked for the rest to stop with H3_NO_ERROR (0x100) instead of closing.
    @Test func aioquicUploadsRefusedEarlyByH3serveAllGetTheirAnswers() async throws {
        let python = try TestEnvironment.python()
        let (root, traces, _, _) = try makeServedRoot("early-405", file: "index.html", size: 10, multiplier: 1)
        let upload = root.appendingPathComponent("upload.bin")
        try Data(repeating: 0x61, count: 2 << 20).write(to: upload)
        let (server, port) = try await startH3serve(root: root, ["--qlog-dir", traces.path])
        defer { server.stop() }
        let paths = ["/upload", "/a", "/b"]
        let client = try ChildProcess(
            python,
            [TestEnvironment.aioquicScript("h3_client.py"), "-k", "--data-file", upload.path, "--timeout", "60"]
                + paths.map { "https://127.0.0.1:\(port)\($0)" }
        )
        #expect(try await client.waitForExit(seconds: 70) == 0, "\(client.standardError)")
        let statuses = client.standardOutput.split(separator: "\n").compactMap {
            (try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any])?["status"] as? Int
        }
        #expect(statuses == [405, 405, 405], "\(client.standardOutput)")
        let trace = try String(contentsOfFile: try await serverTrace(afterStopping: server, in: traces), encoding: .utf8)
        #expect(trace.contains("\"frame_type\":\"stop_sending\""), "the server never asked the client to stop")
        #expect(!trace.contains("\"application_code\":270"), "the server closed the connection with H3_MESSAGE_ERROR")
        #expect(trace.contains("\"owner\":\"remote\""), "the client, not the server, should have closed the connection")
    }
}
