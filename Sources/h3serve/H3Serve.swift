import ArgumentParser
import Foundation
import H3
import HTTPTypes
import Logging
import QuicTransport

/// `h3serve`: serves a directory over HTTP/3 and logs one line per request.
@main
struct H3Serve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "h3serve",
        abstract: "Serve a directory over HTTP/3."
    )

    @Option(help: "Address to bind.")
    var host = "127.0.0.1"

    @Option(help: "UDP port (0 picks a free one).")
    var port: UInt16 = 4433

    @Option(help: "Directory to serve.")
    var root = "."

    @Option(help: "PEM certificate chain; without it a self-signed certificate is generated.")
    var cert: String?

    @Option(help: "PEM private key for --cert.")
    var key: String?

    @Option(name: .customLong("qlog-dir"), help: "Write one qlog trace per connection here (default: $QLOGDIR).")
    var qlogDirectory: String?

    @Flag(name: .shortAndLong, help: "Verbose logging.")
    var verbose = false

    func validate() throws {
        if (cert == nil) != (key == nil) { throw ValidationError("--cert and --key go together") }
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: root, isDirectory: &isDirectory), isDirectory.boolValue else {
            throw ValidationError("--root \(root) is not a directory")
        }
    }

    /// Writes a line to stdout at once; scripts wait for these lines.
    private func say(_ line: String) {
        FileHandle.standardOutput.write(Data((line + "\n").utf8))
    }

    func run() async throws {
        let verbose = self.verbose
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = verbose ? .debug : .notice
            return handler
        }
        var configuration = HTTP3Server.Configuration()
        configuration.host = host
        configuration.port = port
        configuration.certificateChainFile = cert
        configuration.privateKeyFile = key
        if let qlogDirectory { configuration.qlogDirectory = qlogDirectory }
        let files = HTTP3FileHandler(root: root)
        let server: HTTP3Server
        do {
            server = try HTTP3Server(configuration: configuration) { request in
                let started = ContinuousClock.now
                let response = files.respond(to: request)
                let elapsed = ContinuousClock.now - started
                let priority = request.head.headerFields[HTTPField.Name("priority")!] ?? "-"
                // Streamed bodies are counted by their content-length.
                let bytes = response.bodyStream == nil ? "\(response.body.count)" : response.head.headerFields[.contentLength] ?? "?"
                let line = "\(request.head.method) \(request.head.path ?? "/") \(response.head.status.code) \(bytes) priority=\(priority) \(elapsed)\n"
                FileHandle.standardError.write(Data(line.utf8))
                return response
            }
        } catch {
            FileHandle.standardError.write(Data("error: \(error)\n".utf8))
            throw ExitCode(1)
        }
        if let generated = server.generatedCertificate {
            say("certificate: self-signed for localhost, 127.0.0.1, ::1; sha256 \(generated.sha256FingerprintHex)")
        }
        let boundPort: UInt16
        do {
            boundPort = try await server.start()
        } catch {
            FileHandle.standardError.write(Data("error: cannot listen on \(host):\(port): \(error)\n".utf8))
            throw ExitCode(1)
        }
        say("serving \(root) on https://\(host):\(boundPort)/ (HTTP/3)")
        signal(SIGINT, SIG_IGN)
        signal(SIGTERM, SIG_IGN)
        let (stopped, stop) = AsyncStream<Void>.makeStream()
        let sources = [SIGINT, SIGTERM].map { DispatchSource.makeSignalSource(signal: $0) }
        for source in sources {
            source.setEventHandler { stop.yield() }
            source.resume()
        }
        for await _ in stopped { break }
        say("shutting down: GOAWAY sent, finishing requests in flight")
        await server.shutdownGracefully()
        _ = sources
    }
}
