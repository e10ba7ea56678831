import H3
import NIOConcurrencyHelpers
import Vapor

extension Application {
    /// HTTP/3 for this application: its configuration, and the server that runs it beside
    /// Vapor's own HTTP server once `app.servers.use(.http3())` chose it.
    public var http3: HTTP3 { HTTP3(application: self) }

    /// The application's HTTP/3 settings and server, kept in its storage as `app.http` keeps
    /// the TCP server's.
    public struct HTTP3: Sendable {
        public let application: Application

        /// How the HTTP/3 server listens, which certificate it presents, and how it bridges to
        /// the application. Read when the server starts; change it before `app.server.start`.
        public var configuration: Configuration {
            get { application.storage[ConfigurationKey.self] ?? Configuration() }
            nonmutating set { application.storage[ConfigurationKey.self] = newValue }
        }

        /// The server that runs Vapor's HTTP server and the HTTP/3 server together; made once
        /// and kept, so `app.server` always answers with the same one.
        public var server: VaporHTTP3Server {
            if let existing = application.storage[ServerKey.self] { return existing }
            let new = VaporHTTP3Server(application: application)
            application.storage[ServerKey.self] = new
            return new
        }

        /// The UDP port HTTP/3 is served on, once the server has started; nil before and after.
        public var port: UInt16? { application.storage[ServerKey.self]?.http3Port }

        struct ConfigurationKey: StorageKey {
            typealias Value = Configuration
        }

        struct ServerKey: StorageKey {
            typealias Value = VaporHTTP3Server
        }
    }
}
