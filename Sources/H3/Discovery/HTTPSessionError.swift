#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import AsyncHTTPClient
import HTTPTypes
import NIOConcurrencyHelpers
import NIOCore
import QuicTransport

/// A failure that is the session's own, as opposed to HTTP/3's (`HTTP3ClientError`): the TCP
/// fallback's, by how far it got, and the two together when both versions failed. New codes may
/// be added, so compare `code` with `==` and keep a default.
public struct HTTPSessionError: Error, Hashable, Sendable, CustomStringConvertible {
    /// What kind of failure an error is.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Base: Hashable, Sendable {
            case tcpCannotResolve, tcpCannotConnect, tcpTLSFailed, tcpCertificateRejected, tcp, tcpUnavailable, bothFailed
        }

        private let base: Base

        private init(_ base: Base) { self.base = base }

        /// The host name did not resolve for TCP.
        public static let tcpCannotResolve = Code(.tcpCannotResolve)
        /// No TCP connection: refused, unreachable, or not answered in time.
        public static let tcpCannotConnect = Code(.tcpCannotConnect)
        /// The TLS handshake over TCP failed for a reason other than the certificate.
        public static let tcpTLSFailed = Code(.tcpTLSFailed)
        /// The server's certificate was refused on the TCP path.
        public static let tcpCertificateRejected = Code(.tcpCertificateRejected)
        /// The TCP request failed once connected.
        public static let tcp = Code(.tcp)
        /// TCP cannot be used for this request at all.
        public static let tcpUnavailable = Code(.tcpUnavailable)
        /// HTTP/3 was tried and failed, and so did TCP: `http3Failure` and `tcpFailure` say how.
        public static let bothFailed = Code(.bothFailed)

        public var description: String { "\(base)" }
    }

    /// Both failures of `.bothFailed`, boxed because an error holds another.
    private indirect enum Causes: Hashable, Sendable {
        case both(http3: HTTP3ClientError, tcp: HTTPSessionError)
    }

    /// What kind of failure this is.
    public var code: Code
    /// What happened, in words: the reason behind the code.
    public var context: String?
    private var causes: Causes?

    init(code: Code, context: String? = nil) {
        self.code = code
        self.context = context
    }

    /// For `.bothFailed`, how HTTP/3 failed.
    public var http3Failure: HTTP3ClientError? {
        if case .both(let http3, _) = causes { http3 } else { nil }
    }

    /// For `.bothFailed`, how TCP failed.
    public var tcpFailure: HTTPSessionError? {
        if case .both(_, let tcp) = causes { tcp } else { nil }
    }

    static func tcpCannotResolve(_ reason: String) -> HTTPSessionError { HTTPSessionError(code: .tcpCannotResolve, context: reason) }
    static func tcpCannotConnect(_ reason: String) -> HTTPSessionError { HTTPSessionError(code: .tcpCannotConnect, context: reason) }
    static func tcpTLSFailed(_ reason: String) -> HTTPSessionError { HTTPSessionError(code: .tcpTLSFailed, context: reason) }
    static func tcpCertificateRejected(_ reason: String) -> HTTPSessionError {
        HTTPSessionError(code: .tcpCertificateRejected, context: reason)
    }
    static func tcp(_ reason: String) -> HTTPSessionError { HTTPSessionError(code: .tcp, context: reason) }
    static func tcpUnavailable(_ reason: String) -> HTTPSessionError { HTTPSessionError(code: .tcpUnavailable, context: reason) }

    static func bothFailed(http3: HTTP3ClientError, tcp: HTTPSessionError) -> HTTPSessionError {
        var error = HTTPSessionError(code: .bothFailed)
        error.causes = .both(http3: http3, tcp: tcp)
        return error
    }

    public var description: String {
        let reason = context ?? code.description
        switch code {
        case .tcpCannotResolve, .tcpCannotConnect: return "cannot connect: \(reason)"
        case .tcpUnavailable: return "no TCP fallback: \(reason)"
        case .bothFailed:
            return "HTTP/3 failed (\(http3Failure.map { "\($0)" } ?? "?")) and TCP failed (\(tcpFailure.map { "\($0)" } ?? "?"))"
        default: return reason
        }
    }
}
