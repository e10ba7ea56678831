import AsyncHTTPClient
import HTTPTypes
import NIOCore
import NIOPosix
import NIOHTTP1
import NIOHTTPTypesHTTP1
import NIOSSL
import QuicTransport

/// HTTP/2 or HTTP/1.1 over TLS on TCP through async-http-client: the fallback when HTTP/3 is
/// unknown, blocked or broken. ALPN decides between 2 and 1.1 (RFC 9113 §3.2).
final class HTTPTCPTransport: Sendable {
    /// A TCP response: the head, the streaming body, and the version it came over.
    struct Response: Sendable {
        let head: HTTPResponse
        let body: HTTPClientResponse.Body
        let version: HTTPVersionUsed
    }

    private let client: AsyncHTTPClient.HTTPClient
    private let connectTo: (host: String, port: UInt16)?

    /// - Throws: when `verification` cannot be expressed for TCP (a certificate pin or a custom
    ///   verifier, which async-http-client cannot consult) or the CA file does not load.
    /// - Parameter connectTo: where to connect for requests to `host` (curl's `--resolve`).
    init(verification: QuicTransport.CertificateVerification, host: String, connectTo: (host: String, port: UInt16)?) throws {
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.applicationProtocols = ["h2", "http/1.1"]
        switch verification {
        case .systemTrustStore:
            break
        case .caFile(let path):
            tls.trustRoots = .file(path)
        case .insecure:
            tls.certificateVerification = .none
        case .pinnedSHA256:
            throw HTTPSessionError.tcpUnavailable("a certificate pin is checked on HTTP/3 only, so the TCP fallback is refused")
        case .custom:
            throw HTTPSessionError.tcpUnavailable("a custom certificate verifier is consulted on HTTP/3 only, so the TCP fallback is refused")
        }
        var configuration = AsyncHTTPClient.HTTPClient.Configuration(
            tlsConfiguration: tls,
            redirectConfiguration: .disallow,
            timeout: .init(connect: .seconds(10), read: .seconds(60)),
            decompression: .disabled
        )
        configuration.httpVersion = .automatic
        // A refused connection or a rejected certificate is an answer, not something to retry
        // until the connect timeout.
        configuration.connectionPool.retryConnectionEstablishment = false
        self.connectTo = connectTo
        if let connectTo { configuration.dnsOverride = [host: connectTo.host] }
        client = AsyncHTTPClient.HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
    }

    /// Sends `request` and returns once the response head is in.
    func execute(_ request: HTTPRequest, body: [UInt8]?, host: String, port: UInt16) async throws -> Response {
        if let connectTo, connectTo.port != port {
            throw HTTPSessionError.tcpUnavailable("connecting to a different port applies to HTTP/3 only")
        }
        let authority = port == 443 ? URIHost.bracketed(host) : URIHost.authority(host, port)
        var outgoing = HTTPClientRequest(url: "https://\(authority)\(request.path ?? "/")")
        outgoing.method = HTTPMethod(request.method)
        outgoing.headers = HTTPHeaders(request.headerFields)
        if let body { outgoing.body = .bytes(ByteBuffer(bytes: body)) }
        let response: HTTPClientResponse
        do {
            response = try await client.execute(outgoing, deadline: .distantFuture)
        } catch {
            throw Self.classify(error)
        }
        var head = HTTPResponse(status: .init(code: Int(response.status.code), reasonPhrase: response.status.reasonPhrase))
        head.headerFields = HTTPFields(response.headers, splitCookie: false)
        let version: HTTPVersionUsed = response.version.major >= 2 ? .http2 : .http1_1
        return Response(head: head, body: response.body, version: version)
    }

    func shutdown() async {
        try? await client.shutdown()
    }


    /// Sorts a TCP failure by how far it got, naming the common ones the way curl's messages do.
    private static func classify(_ error: any Error) -> HTTPSessionError {
        if let stack = boringSSLErrorStack(error), stack.contains(where: isCertificateVerifyFailed) {
            return .tcpCertificateRejected("TLS handshake failed: certificate verification failed")
        }
        if error is NIOSSLError || error is BoringSSLError {
            return .tcpTLSFailed("TLS handshake failed: \(error)")
        }
        if let client = error as? HTTPClientError {
            if client == .connectTimeout { return .tcpCannotConnect("TCP connect timed out") }
            return .tcp("\(client)")
        }
        if let connection = error as? NIOConnectionError {
            if connection.dnsAAAAError != nil && connection.dnsAError != nil && connection.connectionErrors.isEmpty {
                return .tcpCannotResolve("cannot resolve \(connection.host)")
            }
            let reasons = connection.connectionErrors.map { "\($0.target): \($0.error)" }
            return .tcpCannotConnect(reasons.isEmpty ? "\(connection)" : reasons.joined(separator: "; "))
        }
        if let io = error as? IOError, [ECONNREFUSED, ENETUNREACH, EHOSTUNREACH, ETIMEDOUT].contains(io.errnoCode) {
            return .tcpCannotConnect(io.errnoCode == ECONNREFUSED ? "TCP connection refused" : "\(io)")
        }
        return .tcp("\(error)")
    }

    /// BoringSSL's error stack, when `error` is a TLS failure that carries one.
    private static func boringSSLErrorStack(_ error: any Error) -> NIOBoringSSLErrorStack? {
        switch error {
        case NIOSSLError.handshakeFailed(.sslError(let stack)), BoringSSLError.sslError(let stack): stack
        default: nil
        }
    }

    /// Whether BoringSSL's error is `SSL_R_CERTIFICATE_VERIFY_FAILED`: the chain did not verify.
    /// swift-nio-ssl keeps the packed error code private, so the reason is read from the one
    /// entry's text, the name `ERR_error_string_n` gives it.
    private static func isCertificateVerifyFailed(_ entry: BoringSSLInternalError) -> Bool {
        entry.description.contains(":CERTIFICATE_VERIFY_FAILED")
    }
}
