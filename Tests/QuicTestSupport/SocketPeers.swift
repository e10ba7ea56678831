import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Independent TCP, TLS and UDP peers for the non-QUIC `NWConnection` and `NWListener` tests:
/// Python's standard library and GnuTLS's `gnutls-serv`, none of our code.
package enum SocketPeers {
    /// Debian's Python 3, whose standard library (socketserver, ssl) is the peer.
    package static func python() throws -> URL { try TestEnvironment.systemTool("python3", package: "python3") }

    /// The end of a Python echo server script: serves its `Echo` handler on a free port of
    /// 127.0.0.1 and prints `LISTENING <port>`.
    private static let serveEcho = """

        class Server(socketserver.ThreadingTCPServer):
            allow_reuse_address = True
            daemon_threads = True
        server = Server(("127.0.0.1", 0), Echo)
        print("LISTENING", server.server_address[1], flush=True)
        server.serve_forever()
        """

    /// A TCP echo server on 127.0.0.1 (Python's socketserver): echoes each connection's bytes
    /// and finishes its side after the client's FIN.
    package static func tcpEcho() async throws -> (process: ChildProcess, port: UInt16) {
        let script = """
            import socket, socketserver
            class Echo(socketserver.BaseRequestHandler):
                def handle(self):
                    while True:
                        data = self.request.recv(65536)
                        if not data: break
                        self.request.sendall(data)
                    self.request.shutdown(socket.SHUT_WR)
            """ + serveEcho
        return try await started(script)
    }

    /// A UDP echo server on 127.0.0.1: sends each datagram back to its sender.
    package static func udpEcho() async throws -> (process: ChildProcess, port: UInt16) {
        let script = """
            import socket
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.bind(("127.0.0.1", 0))
            print("LISTENING", s.getsockname()[1], flush=True)
            while True:
                data, peer = s.recvfrom(65536)
                s.sendto(data, peer)
            """
        return try await started(script)
    }

    /// A UDP client: sends `datagrams` to 127.0.0.1:`port` from one socket and prints `ECHO <hex>`
    /// for each datagram it gets back.
    package static func udpClient(port: UInt16, datagrams: [String]) throws -> ChildProcess {
        let script = """
            import socket, sys
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.settimeout(10)
            for text in sys.argv[2:]:
                s.sendto(text.encode(), ("127.0.0.1", int(sys.argv[1])))
                data, _ = s.recvfrom(65536)
                print("ECHO", data.decode(), flush=True)
            print("DONE", flush=True)
            """
        return try ChildProcess(try python(), ["-c", script, String(port)] + datagrams)
    }

    /// A TLS client (Python's ssl, on OpenSSL): trusts `caFile`, offers `alpn`, sends `size`
    /// bytes, reads the echo, and prints `ALPN <protocol>`, `VERSION <version>` and `ECHO OK`
    /// when the echo matches.
    package static func tlsClient(port: UInt16, caFile: String, alpn: String, size: Int) throws -> ChildProcess {
        let script = """
            import socket, ssl, sys, os
            port, ca, alpn, size = int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
            context = ssl.create_default_context(cafile=ca)
            context.set_alpn_protocols([alpn])
            payload = os.urandom(size)
            with socket.create_connection(("127.0.0.1", port), timeout=20) as raw:
                with context.wrap_socket(raw, server_hostname="localhost") as tls:
                    print("ALPN", tls.selected_alpn_protocol(), flush=True)
                    print("VERSION", tls.version(), flush=True)
                    tls.sendall(payload)
                    received = b""
                    while len(received) < size:
                        chunk = tls.recv(65536)
                        if not chunk: break
                        received += chunk
                    print("ECHO", "OK" if received == payload else "MISMATCH %d" % len(received), flush=True)
            """
        return try ChildProcess(try python(), ["-c", script, String(port), caFile, alpn, String(size)])
    }

    /// A TLS echo server on 127.0.0.1 (Python's ssl, on OpenSSL) presenting `certificate` and
    /// accepting `alpn`: echoes each connection's bytes until the client finishes.
    package static func tlsEcho(certificate: String, key: String, alpn: String) async throws -> (process: ChildProcess, port: UInt16) {
        let script = """
            import socket, socketserver, ssl, sys
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(sys.argv[1], sys.argv[2])
            context.set_alpn_protocols([sys.argv[3]])
            class Echo(socketserver.BaseRequestHandler):
                def handle(self):
                    with context.wrap_socket(self.request, server_side=True) as tls:
                        while True:
                            data = tls.recv(65536)
                            if not data: break
                            tls.sendall(data)
            """ + serveEcho
        return try await started(script, arguments: [certificate, key, alpn])
    }

    /// GnuTLS's `gnutls-serv --echo` on a free TCP port, presenting `certificate` and accepting
    /// `alpn`. Its echo is line by line: give it text lines, not binary payloads.
    package static func gnutlsEchoServer(certificate: String, key: String, alpn: String) async throws -> (process: ChildProcess, port: UInt16) {
        try await gnutlsEchoServer(["--x509certfile", certificate, "--x509keyfile", key, "--alpn", alpn])
    }

    /// GnuTLS's `gnutls-serv --echo` with no certificate, authenticating clients by the external
    /// pre-shared key `keyHex` under `identity` (RFC 8446 §4.2.11, RFC 4279), with or without
    /// ECDHE. Line by line, as `gnutlsEchoServer`.
    package static func gnutlsPSKEchoServer(identity: String, keyHex: String) async throws -> (process: ChildProcess, port: UInt16) {
        let passwords = FileManager.default.temporaryDirectory.appendingPathComponent("gnutls-psk-passwd-\(UUID()).txt")
        try "\(identity):\(keyHex)\n".write(to: passwords, atomically: true, encoding: .utf8)
        return try await gnutlsEchoServer(["--pskpasswd", passwords.path, "--priority", preSharedKeyPriority])
    }

    /// GnuTLS's `gnutls-cli` sending `input` to 127.0.0.1:`port` under the pre-shared key
    /// `keyHex` named `identity`, with no certificate check. It writes what comes back to its
    /// standard output and exits when the server closes. TLS 1.3: Debian's gnutls-cli 3.7.9
    /// crashes after a TLS 1.2 PSK handshake (in `gnutls_psk_server_get_username`), so
    /// `opensslPSKClient` is the TLS 1.2 peer.
    package static func gnutlsPSKClient(port: UInt16, identity: String, keyHex: String, input: String) throws -> ChildProcess {
        let client = try TestEnvironment.systemTool("gnutls-cli", package: "gnutls-bin")
        return try ChildProcess(client, [
            "--logfile", "/dev/null", "--pskusername", identity, "--pskkey", keyHex, "--priority", preSharedKeyPriority,
            "--port", String(port), "127.0.0.1",
        ], input: Data(input.utf8))
    }

    /// OpenSSL's `s_client` in TLS 1.2 sending `input` to 127.0.0.1:`port` under the
    /// pre-shared key `keyHex` named `identity`. A server certificate fails the handshake
    /// (`-verify_return_error`, and no CA is given), so only the key can authenticate. It prints
    /// what comes back to standard output and the cipher suite to standard error, and stays
    /// connected until stopped.
    package static func opensslPSKClient(port: UInt16, identity: String, keyHex: String, input: String) throws -> ChildProcess {
        let client = try TestEnvironment.systemTool("openssl", package: "openssl")
        return try ChildProcess(client, [
            "s_client", "-brief", "-ign_eof", "-verify_return_error", "-tls1_2", "-psk", keyHex, "-psk_identity", identity,
            "-connect", "127.0.0.1:\(port)",
        ], input: Data(input.utf8))
    }

    /// GnuTLS's priority string with its PSK key exchanges added.
    private static let preSharedKeyPriority = "NORMAL:+ECDHE-PSK:+DHE-PSK:+PSK"

    private static func gnutlsEchoServer(_ arguments: [String]) async throws -> (process: ChildProcess, port: UInt16) {
        let server = try TestEnvironment.systemTool("gnutls-serv", package: "gnutls-bin")
        let port = try freeTCPPort()
        let process = try ChildProcess(server, ["--echo", "--crlf", "--port", String(port)] + arguments)
        // gnutls-serv says it is listening on standard error.
        let deadline = ContinuousClock.now + .seconds(15)
        while !process.standardError.contains("listening") {
            guard process.isRunning, ContinuousClock.now < deadline else {
                process.stop()
                throw SetupError("gnutls-serv did not start: \(process.standardError)")
            }
            try await Task.sleep(for: .milliseconds(20))
        }
        return (process, port)
    }

    /// A TCP port nothing listens on now (bound and released).
    package static func freeTCPPort() throws -> UInt16 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw SetupError("socket: \(errno)") }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0 }
        }
        guard bound else { throw SetupError("bind: \(errno)") }
        return UInt16(bigEndian: address.sin_port)
    }

    private static func started(_ script: String, arguments: [String] = []) async throws -> (process: ChildProcess, port: UInt16) {
        let process = try ChildProcess(try python(), ["-c", script] + arguments)
        let line = try await process.waitForLine(containing: "LISTENING")
        guard let port = UInt16(line.split(separator: " ").last ?? "") else { throw SetupError("cannot read the port from '\(line)'") }
        return (process, port)
    }
}
