import Foundation
import Logging
import QuicTransport

/// Seed inputs for every target, made from real traffic where there is any: a full in-memory
/// handshake between our client core and server endpoint (real ngtcp2 and GnuTLS) gives the
/// datagrams each way and a real session-ticket file.
package enum FuzzSeeds {
    /// Writes `directory/TARGET/NAME` for every seed; returns how many.
    package static func write(into directory: URL) throws -> Int {
        let handshake = try RecordedHandshake()
        var seeds: [FuzzTarget: [String: [UInt8]]] = [
            .serverDatagram: [
                "our-client-first-flight": DatagramSequence.encode(Array(handshake.toServer.prefix(1))),
                "our-client-handshake": DatagramSequence.encode(handshake.toServer),
            ],
            .clientDatagram: ["our-server-handshake": DatagramSequence.encode(handshake.toClient)],
            .sessionTicket: ["ticket-file": Array(handshake.ticketFile.utf8)],
            .frames: [
                // A control stream: type, SETTINGS (QPACK capacity 0, blocked 0), GOAWAY 8,
                // PRIORITY_UPDATE for request 4 with "u=1, i".
                "control-stream": [0x01, 0x00, 0x04, 0x04, 0x01, 0x00, 0x07, 0x00, 0x07, 0x01, 0x08]
                    + [0x80, 0x0F, 0x07, 0x00, 0x07, 0x04] + Array("u=1, i".utf8),
                // A request stream: HEADERS of 3 bytes, DATA of 5, split after the first frame.
                "request-stream": [0x0A, 0x01, 0x03, 0x00, 0x00, 0xD1, 0x00, 0x05] + Array("hello".utf8),
                "qpack-encoder-stream": [0x03, 0x02, 0x3F, 0xE1, 0x1F],
            ],
            .altSvc: [
                "h3": Array(#"h3=":443"; ma=86400"#.utf8),
                "several": Array(#"h3="alt.example:8443"; ma=60; persist=1, h3-29=":443", h2=":443""#.utf8),
                "clear": Array("clear".utf8),
                "percent": Array(#"w%3Dx%3Ay=":1""#.utf8),
            ],
            .altSvcCache: [
                "curl-line": Array(#"h2 example.com 443 h3 alt.example.com 8443 "20301231 23:59:59" 0 0"#.utf8),
                "ipv6-line": Array(#"h2 [::1] 443 h3 [::1] 443 "20301231 23:59:59" 1 0"#.utf8),
            ],
            .httpsRecord: ["alpn-port-hints": httpsAnswer()],
            .priority: [
                "urgent-incremental": Array("u=1, i".utf8),
                "default": Array("u=3".utf8),
                "unknown-members": Array("u=7, i=?0, x=\"y\", z".utf8),
            ],
            .requestPath: [
                "file": Array("/inside.txt".utf8),
                "directory-index": Array("/sub/".utf8),
                "dot-dot": Array("/../outside.txt".utf8),
                "encoded-dot-dot": Array("/%2e%2e/outside.txt?x=1".utf8),
                "symlink-out": Array("/escape.txt".utf8),
                "symlink-up": Array("/up/outside.txt".utf8),
                "listing-root": Array("/".utf8),
                "listing-symlink-up": Array("/up/".utf8),
                "listing-climb": Array("/%2e%2e/".utf8),
            ],
        ]
        var written = 0
        for (target, files) in seeds {
            let folder = directory.appendingPathComponent(target.rawValue)
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
            for (name, bytes) in files {
                try Data(bytes).write(to: folder.appendingPathComponent(name))
                written += 1
            }
        }
        return written
    }

    /// The regular files named, and those inside the directories named, sorted by path.
    package static func files(in locations: [URL]) -> [URL] {
        locations.flatMap { location -> [URL] in
            var isDirectory: ObjCBool = false
            guard FileManager.default.fileExists(atPath: location.path, isDirectory: &isDirectory) else { return [] }
            guard isDirectory.boolValue else { return [location] }
            let names = (try? FileManager.default.contentsOfDirectory(atPath: location.path)) ?? []
            return names.filter { !$0.hasPrefix(".") }.sorted().map { location.appendingPathComponent($0) }
        }
    }

    /// A DNS response with one HTTPS record for example.com: priority 1, target ".",
    /// alpn h3 and h2, port 8443, one ipv4hint and one ipv6hint (RFC 9460 §2.2, §7).
    static func httpsAnswer() -> [UInt8] {
        let name: [UInt8] = [7] + Array("example".utf8) + [3] + Array("com".utf8) + [0]
        var parameters: [UInt8] = [0, 1, 0, 6, 2] + Array("h3".utf8) + [2] + Array("h2".utf8)
        parameters += [0, 3, 0, 2, 0x20, 0xFB]
        parameters += [0, 4, 0, 4, 192, 0, 2, 1]
        parameters += [0, 6, 0, 16, 0x20, 0x01, 0x0D, 0xB8] + [UInt8](repeating: 0, count: 11) + [1]
        let rdata: [UInt8] = [0, 1, 0] + parameters
        var message: [UInt8] = [0x12, 0x34, 0x81, 0x80, 0, 1, 0, 1, 0, 0, 0, 0]
        message += name + [0, 65, 0, 1]
        message += [0xC0, 0x0C, 0, 65, 0, 1, 0, 0, 0x0E, 0x10, UInt8(rdata.count >> 8), UInt8(rdata.count & 0xFF)] + rdata
        return message
    }
}

/// A full handshake between our client core and our server endpoint on a virtual clock, with
/// every datagram kept, and the session ticket the client stored.
private struct RecordedHandshake {
    var toServer: [[UInt8]] = []
    var toClient: [[UInt8]] = []
    var ticketFile = ""

    init() throws {
        let logger = Logger(label: "fuzz-seeds", factory: { _ in SwiftLogNoOpLogHandler() })
        let identity = try SelfSignedCertificate.generate()
        var quic = QUICConfiguration()
        quic.alpn = ["quic-echo"]
        let endpoint = QUICEndpointCore(
            configuration: .init(quic: quic, credentials: try .server(certificateChainPEM: identity.certificatePEM, privateKeyPEM: identity.privateKeyPEM)),
            logger: logger
        )
        let verification = CertificateVerification.pinnedSHA256(identity.sha256Fingerprint)
        let ticketPath = FileManager.default.temporaryDirectory.appendingPathComponent("quic-fuzz-tickets-\(getpid())").path
        defer { try? FileManager.default.removeItem(atPath: ticketPath) }
        let store = QUICSessionTicketStore(path: ticketPath)
        var tls = QUICClientTLS(credentials: try .client(verification: verification), verification: verification, serverName: "localhost", verificationName: "localhost")
        tls.ticketStore = store
        tls.ticketKey = "localhost:443"
        let clientAddress = QUICSocketAddress(ip: "192.0.2.1", port: 50_000)!
        let serverAddress = QUICSocketAddress(ip: "192.0.2.2", port: 443)!
        var now: UInt64 = 1_000_000_000
        let client = try QUICConnectionCore(clientWith: quic, tls: tls, path: QUICPath(local: clientAddress, remote: serverAddress), now: now, logger: logger)
        let scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: 65_536, alignment: 16)
        defer { scratch.deallocate() }
        var server: QUICConnectionCore?
        for _ in 0..<50 where store.entry(for: "localhost:443") == nil {
            var outbound: [[UInt8]] = []
            _ = client.writePackets(now: now, scratch: scratch) { bytes, segment, _, _ in outbound += Self.split(bytes, segment) }
            toServer += outbound
            for datagram in outbound {
                let disposition = datagram.withUnsafeBytes { endpoint.receive(datagram: $0, path: QUICPath(local: serverAddress, remote: clientAddress), now: now) }
                if case .delivered(let core, _, _) = disposition { server = core }
            }
            var inbound: [[UInt8]] = []
            if let server {
                _ = server.writePackets(now: now, scratch: scratch) { bytes, segment, _, _ in inbound += Self.split(bytes, segment) }
                endpoint.handle(server.takeEvents(), of: server)
            }
            toClient += inbound
            for datagram in inbound {
                datagram.withUnsafeBytes { client.receive(datagram: $0, path: QUICPath(local: clientAddress, remote: serverAddress), now: now) }
            }
            _ = client.takeEvents()
            now += 5_000_000
        }
        guard store.entry(for: "localhost:443") != nil else { throw SeedError.noTicket }
        ticketFile = try String(contentsOfFile: ticketPath, encoding: .utf8)
    }

    static func split(_ batch: UnsafeRawBufferPointer, _ segment: Int) -> [[UInt8]] {
        stride(from: 0, to: batch.count, by: max(1, segment)).map { Array(batch[$0..<min(batch.count, $0 + segment)]) }
    }

    enum SeedError: Error { case noTicket }
}
