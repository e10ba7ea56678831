#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Dispatch
import Logging
import NIOConcurrencyHelpers

extension NWListener {
    /// A Bonjour service a listener advertises, matching Network.framework's
    /// `NWListener.Service` (RFC 6763: an instance `name` of `type` in `domain`).
    public struct Service: Hashable, Sendable {
        /// The instance name; nil advertises under the host's name, as Avahi names it.
        public let name: String?
        /// The service type, `_myapp._udp` (RFC 6763 §7).
        public let type: String
        /// The domain; nil for the default, `local.`.
        public let domain: String?
        /// The TXT record in its wire form (RFC 6763 §6), or nil for an empty one.
        public let txtRecord: Data?
        /// Whether a name already taken fails the registration instead of picking another name,
        /// matching Apple's `noAutoRename`.
        public var noAutoRename = false

        /// A service to advertise, with a TXT record in wire form, matching Apple's initialiser.
        public init(name: String? = nil, type: String, domain: String? = nil, txtRecord: Data? = nil) {
            self.name = name
            self.type = type
            self.domain = domain
            self.txtRecord = txtRecord
        }

        /// A service to advertise with `txtRecord`'s entries, matching Apple's initialiser.
        public init(name: String? = nil, type: String, domain: String? = nil, txtRecord: NWTXTRecord) {
            self.init(name: name, type: type, domain: domain, txtRecord: Data(txtRecord.wireBytes))
        }

        /// The TXT record as entries, matching Apple's `txtRecordObject`.
        public var txtRecordObject: NWTXTRecord? { txtRecord.map { NWTXTRecord(wireBytes: Array($0)) } }
    }

    /// A change in what a listener advertises, matching Apple's `ServiceRegistrationChange`.
    public enum ServiceRegistrationChange: Sendable {
        /// The service is advertised as this `.service` endpoint (after any rename).
        case add(NWEndpoint)
        /// The service, as this endpoint, is no longer advertised.
        case remove(NWEndpoint)
    }

    /// A listener on any free port that advertises `service`, matching Apple's
    /// `init(service:using:)`. The service is registered with Avahi once the port is bound.
    public convenience init(service: Service, using parameters: NWParameters) throws {
        try self.init(using: parameters)
        self.service = service
    }

    /// The Bonjour service the listener advertises, matching Apple's `service`. Setting it while
    /// the listener is ready replaces the advertisement (a changed TXT record, say); nil stops it.
    /// Linux note: registered through Avahi; when that fails (no avahi-daemon, or a name taken
    /// with `noAutoRename`) the listener goes to `.failed` with `NWError.dns`.
    public var service: Service? {
        get { advertiser.service }
        set { advertiser.service = newValue }
    }

    /// Called on the start queue as the advertisement is added and removed, matching Apple's
    /// `serviceRegistrationUpdateHandler`.
    public var serviceRegistrationUpdateHandler: (@Sendable (ServiceRegistrationChange) -> Void)? {
        get { advertiser.updateHandler }
        set { advertiser.updateHandler = newValue }
    }
}

/// Registers a listener's `service` with the DNS-SD daemon while the listener is ready.
// @unchecked Sendable: `service`, `updateHandler`, `port` and the callbacks sit behind `lock`;
// the registration and its endpoint live only on `work`.
final class NWListenerAdvertiser: @unchecked Sendable {
    private let lock = NIOLock()
    private var _service: NWListener.Service?
    private var _updateHandler: (@Sendable (NWListener.ServiceRegistrationChange) -> Void)?
    private var port: UInt16?
    private var deliver: ((@escaping @Sendable () -> Void) -> Void)?
    private var onFailure: ((NWError) -> Void)?
    private let logger = Logger(label: "quic.bonjour.listener")

    private let work = DispatchQueue(label: "quic.bonjour.listener")
    private var registration: DNSServiceOperation?
    private var registered: NWEndpoint?

    var service: NWListener.Service? {
        get { lock.withLock { _service } }
        set {
            let running = lock.withLock {
                _service = newValue
                return port != nil
            }
            if running { work.async { self.register() } }
        }
    }

    var updateHandler: (@Sendable (NWListener.ServiceRegistrationChange) -> Void)? {
        get { lock.withLock { _updateHandler } }
        set { lock.withLock { _updateHandler = newValue } }
    }

    /// The listener is bound to `port`: advertise the service, if there is one. `deliver` runs
    /// a handler on the listener's queue; `onFailure` fails the listener.
    func start(port: UInt16, deliver: @escaping (@escaping @Sendable () -> Void) -> Void, onFailure: @escaping (NWError) -> Void) {
        lock.withLock {
            self.port = port
            self.deliver = deliver
            self.onFailure = onFailure
        }
        work.async { self.register() }
    }

    /// The listener stopped: withdraw the advertisement.
    func stop() {
        lock.withLock { port = nil }
        work.async { self.register() }
    }

    /// Makes the registration match `service` and `port`: withdraws the old one, and registers
    /// the new one when there is a port and a service.
    private func register() {
        let (service, port) = lock.withLock { (_service, self.port) }
        registration?.cancel()
        registration = nil
        if let old = registered {
            registered = nil
            report(.remove(old))
        }
        guard let service, let port else { return }
        let library: DNSServiceLibrary
        switch DNSServiceLibrary.shared {
        case .success(let loaded): library = loaded
        case .failure(let problem):
            logger.error("\(problem)")
            fail(.dns(DNSServiceLibrary.errorServiceNotRunning))
            return
        }
        let operation = DNSServiceOperation(library: library, queue: work) { [weak self] reply in
            guard let self else { return }
            switch reply {
            case .register(let name, let type, let domain):
                let endpoint = NWEndpoint.service(name: name, type: NWBrowser.trimmedType(type), domain: domain, interface: nil)
                if let old = self.registered { self.report(.remove(old)) }
                self.registered = endpoint
                self.report(.add(endpoint))
            case .failure(let code):
                self.logger.error("cannot advertise \(service.type)", metadata: ["error": "\(NWError.dns(code))"])
                self.registration?.cancel()
                self.registration = nil
                self.fail(.dns(code))
            case .browse, .resolve, .record:
                break
            }
        }
        let txt = service.txtRecord.map(Array.init) ?? [0]
        let flags = service.noAutoRename ? DNSServiceLibrary.flagNoAutoRename : 0
        let code = operation.start { ref in
            withOptionalCString(service.name) { name in
                service.type.withCString { type in
                    withOptionalCString(service.domain) { domain in
                        txt.withUnsafeBytes { bytes in
                            library.register(
                                ref, flags, 0, name, type, domain, nil, port.bigEndian, UInt16(bytes.count), bytes.baseAddress,
                                DNSServiceOperation.registerReply, operation.context
                            )
                        }
                    }
                }
            }
        }
        guard code == 0 else {
            logger.error("cannot advertise \(service.type)", metadata: ["error": "\(NWError.dns(code))"])
            fail(.dns(code))
            return
        }
        registration = operation
    }

    private func report(_ change: NWListener.ServiceRegistrationChange) {
        let (handler, deliver) = lock.withLock { (_updateHandler, self.deliver) }
        guard let handler, let deliver else { return }
        deliver { handler(change) }
    }

    private func fail(_ error: NWError) {
        lock.withLock { onFailure }?(error)
    }
}
