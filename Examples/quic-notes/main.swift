// quic-notes: a small RPC over QUIC streams with Apple's 2025 structured API and `Coder`.
//
//   swift run quic-notes                          # a server and a client in one process
//   swift run quic-notes serve [PORT]             # only the server
//   swift run quic-notes ask HOST PORT SHA256 TEXT...   # a client; the server prints its SHA256
//
// Each request is one bidirectional stream carrying Codable messages: the client sends
// `Request`s, the server answers each with a `Reply`, and FIN ends the conversation.
import Foundation
import QuicTransport

struct Request: Codable, Sendable {
    var text: String
}

struct Reply: Codable, Sendable {
    var words: Int
    var shout: String
}

/// One message type each way: the stream carries `Note`s, a request or a reply.
enum Note: Codable, Sendable {
    case request(Request)
    case reply(Reply)
}

let alpn = ["quic-notes"]

func serve(port: NWEndpoint.Port, ready: @escaping @Sendable (NWEndpoint.Port, String) -> Void) async throws {
    let listener = try NetworkListener(for: .hostPort(host: "127.0.0.1", port: port)) { QUIC(alpn: alpn) }
    let fingerprint = listener.generatedCertificate?.sha256FingerprintHex ?? ""
    try await listener.onStateUpdate { listener, state in
        if state == .ready, let port = listener.port { ready(port, fingerprint) }
    }.run { connection in
        try await connection.inboundStreams(prepending: { stream in Coder(Note.self, using: .json) { stream } }) { stream in
            for try await message in stream.messages {
                guard case .request(let request) = message.content else { continue }
                let words = request.text.split(separator: " ").count
                try await stream.send(Note.reply(Reply(words: words, shout: request.text.uppercased())))
            }
            try await stream.finish()
        }
    }
}

func ask(host: String, port: NWEndpoint.Port, fingerprintHex: String, texts: [String]) async throws {
    let pin = try TLS.PeerAuthentication.pinnedSHA256(hex: fingerprintHex)
    try await withNetworkConnection(to: .hostPort(host: NWEndpoint.Host(host), port: port)) {
        QUIC(alpn: alpn).idleTimeout(10_000).tls.peerAuthentication(pin)
    } _: { connection in
        let stream = try await connection.openStream { stream in Coder(Note.self, using: .json) { stream } }
        for (index, text) in texts.enumerated() {
            try await stream.send(Note.request(Request(text: text)), lastMessage: index == texts.count - 1)
        }
        for try await message in stream.messages {
            if case .reply(let reply) = message.content {
                print("reply on stream \(stream.streamID): \(reply.words) word(s), \"\(reply.shout)\"")
            }
        }
    }
}

let arguments = Array(CommandLine.arguments.dropFirst())
switch arguments.first {
case "serve":
    let port = arguments.count > 1 ? NWEndpoint.Port(rawValue: UInt16(arguments[1]) ?? 0) ?? .any : .any
    try await serve(port: port) { port, fingerprint in
        print("serving quic-notes on 127.0.0.1:\(port) sha256 \(fingerprint)")
    }
case "ask":
    guard arguments.count >= 5, let port = UInt16(arguments[2]).flatMap(NWEndpoint.Port.init(rawValue:)) else {
        FileHandle.standardError.write(Data("usage: quic-notes ask HOST PORT SHA256 TEXT...\n".utf8))
        exit(2)
    }
    try await ask(host: arguments[1], port: port, fingerprintHex: arguments[3], texts: Array(arguments[4...]))
case nil:
    let (started, ready) = AsyncStream<(NWEndpoint.Port, String)>.makeStream()
    let server = Task { try await serve(port: .any) { ready.yield(($0, $1)) } }
    guard let (port, fingerprint) = await started.first(where: { _ in true }) else { exit(1) }
    print("server on 127.0.0.1:\(port)")
    try await ask(host: "localhost", port: port, fingerprintHex: fingerprint, texts: ["hello quic", "structured concurrency on linux", "bye"])
    server.cancel()
    _ = await server.result
default:
    FileHandle.standardError.write(Data("usage: quic-notes [serve [PORT] | ask HOST PORT SHA256 TEXT...]\n".utf8))
    exit(2)
}
