import Dispatch
#if canImport(Glibc)
import Glibc
#endif
import Logging
import NIOConcurrencyHelpers

/// Discovers Bonjour (DNS-SD) services on the local network, matching Network.framework's
/// `NWBrowser`: each result's `endpoint` is a `.service` endpoint that a connection group or a
/// connection can be made to, as peer-to-peer apps do.
///
/// Linux note: it browses through Avahi (`avahi-daemon` over D-Bus, with its DNS-SD library
/// `libdns_sd.so.1` loaded at run time). Without them the browser goes to `.failed` with an
/// `NWError.dns` code and logs what to install.
// @unchecked Sendable: the state, handler and queue live in `observable`; the results snapshot
// and the handler behind `lock`; everything else only on `work`.
public final class NWBrowser: @unchecked Sendable {
    /// What to browse for, matching Apple's `NWBrowser.Descriptor`.
    public enum Descriptor: Hashable, Sendable {
        /// Services of `type` (`_myapp._udp`) in `domain` (nil for the default, `local.`), with no
        /// metadata in the results.
        case bonjour(type: String, domain: String?)
        /// The same, and each result carries the service's TXT record as `.bonjour` metadata
        /// (each instance is resolved first, RFC 6763 §6).
        case bonjourWithTXTRecord(type: String, domain: String?)

        var type: String {
            switch self {
            case .bonjour(let type, _), .bonjourWithTXTRecord(let type, _): return type
            }
        }

        var domain: String? {
            switch self {
            case .bonjour(_, let domain), .bonjourWithTXTRecord(_, let domain): return domain
            }
        }
    }

    /// A browser's life cycle, matching Apple's `NWBrowser.State`.
    public enum State: Equatable, Sendable {
        /// Not started.
        case setup
        /// Browsing; results arrive through `browseResultsChangedHandler`.
        case ready
        /// Final: browsing could not start or stopped: avahi-daemon is unreachable, the library is
        /// missing (`kDNSServiceErr_ServiceNotRunning`), or the type is invalid.
        case failed(NWError)
        /// Final: `cancel()` stopped the browser.
        case cancelled
        /// Kept for Apple's exhaustive switches; not entered here.
        case waiting(NWError)
    }

    /// What the browser was made for, matching Apple's `descriptor`.
    public let descriptor: Descriptor
    /// The parameters it was made with, matching Apple's `parameters`; browsing does not use them.
    public let parameters: NWParameters

    private let logger = Logger(label: "quic.bonjour.browser")
    private let observable = ObservableState<State>(.setup) { state in
        switch state {
        case .failed, .cancelled: return true
        default: return false
        }
    }
    private let lock = NIOLock()
    private var _results: Set<Result> = []
    private var _changedHandler: (@Sendable (Set<Result>, Set<Result.Change>) -> Void)?

    // MARK: Confined to `work`
    private let work = DispatchQueue(label: "quic.bonjour.browser")
    private var browse: DNSServiceOperation?
    /// Every instance seen, by name, type and domain.
    private var instances: [InstanceKey: Instance] = [:]
    /// The results as last published, to compute the next batch's changes.
    private var published: [InstanceKey: Result] = [:]
    private var stopped = false

    private struct InstanceKey: Hashable {
        let name: String
        let type: String
        let domain: String
    }

    private struct Instance {
        /// Interface indexes the instance was seen on, in order.
        var interfaces: [UInt32] = []
        /// Its TXT record, once resolved (TXT browsing only).
        var txt: NWTXTRecord?
        /// The resolutions reading its TXT record, by interface.
        var resolutions: [UInt32: DNSServiceOperation] = [:]
    }

    /// A browser for `descriptor`, matching Apple's `init(for:using:)`.
    public init(for descriptor: Descriptor, using parameters: NWParameters) {
        self.descriptor = descriptor
        self.parameters = parameters
    }

    /// The current state, matching Apple's `state`.
    public var state: State { observable.current }

    /// Called on the start queue with each new state, matching Apple's `stateUpdateHandler`.
    public var stateUpdateHandler: (@Sendable (State) -> Void)? {
        get { observable.updateHandler }
        set { observable.updateHandler = newValue }
    }

    /// Called on the start queue with all current results and what changed, after each batch
    /// of DNS-SD replies, matching Apple's `browseResultsChangedHandler`.
    public var browseResultsChangedHandler: (@Sendable (Set<Result>, Set<Result.Change>) -> Void)? {
        get { lock.withLock { _changedHandler } }
        set { lock.withLock { _changedHandler = newValue } }
    }

    /// The services found so far, matching Apple's `browseResults`.
    public var browseResults: Set<Result> { lock.withLock { _results } }

    /// The queue given to `start(queue:)`, matching Apple's `queue`.
    public var queue: DispatchQueue? { observable.startQueue }

    /// State changes from now on; ends at `.failed` or `.cancelled`. Our addition.
    public var states: AsyncStream<State> { observable.stream }

    /// Starts browsing, matching Apple's `start(queue:)`; handlers run on `queue`.
    public func start(queue: DispatchQueue) {
        observable.setQueue(queue)
        work.async { self.startBrowsing() }
    }

    /// Stops browsing, matching Apple's `cancel()`; the state becomes `.cancelled`.
    public func cancel() {
        work.async {
            self.stopAll()
            self.observable.update(.cancelled)
            self.lock.withLock { self._changedHandler = nil }
        }
    }

    private func startBrowsing() {
        guard !stopped, browse == nil else { return }
        let library: DNSServiceLibrary
        switch DNSServiceLibrary.shared {
        case .success(let loaded): library = loaded
        case .failure(let problem):
            logger.error("\(problem)")
            observable.update(.failed(.dns(DNSServiceLibrary.errorServiceNotRunning)))
            return
        }
        let operation = DNSServiceOperation(library: library, queue: work) { [weak self] reply in self?.handle(reply) }
        let code = operation.start { ref in
            descriptor.type.withCString { type in
                withOptionalCString(descriptor.domain) { domain in
                    library.browse(ref, 0, 0, type, domain, DNSServiceOperation.browseReply, operation.context)
                }
            }
        }
        guard code == 0 else {
            logger.error("cannot browse for \(descriptor.type)", metadata: ["error": "\(NWError.dns(code))"])
            observable.update(.failed(.dns(code)))
            return
        }
        browse = operation
        observable.update(.ready)
    }

    private func handle(_ reply: DNSServiceOperation.Reply) {
        switch reply {
        case .browse(let flags, let interface, let name, let type, let domain):
            let key = InstanceKey(name: name, type: Self.trimmedType(type), domain: domain)
            if flags & DNSServiceLibrary.flagAdd != 0 {
                var instance = instances[key] ?? Instance()
                if !instance.interfaces.contains(interface) { instance.interfaces.append(interface) }
                if case .bonjourWithTXTRecord = descriptor, instance.resolutions[interface] == nil {
                    instance.resolutions[interface] = resolveTXT(key, interface: interface)
                }
                instances[key] = instance
            } else if var instance = instances[key] {
                instance.interfaces.removeAll { $0 == interface }
                instance.resolutions.removeValue(forKey: interface)?.cancel()
                instances[key] = instance.interfaces.isEmpty ? nil : instance
            }
            if flags & DNSServiceLibrary.flagMoreComing == 0 { publish() }
        case .failure(let code):
            logger.error("browsing failed", metadata: ["error": "\(NWError.dns(code))"])
            stopAll()
            observable.update(.failed(.dns(code)))
        case .register, .resolve, .record:
            break
        }
    }

    /// Resolves one instance on one interface to read its TXT record (RFC 6763 §6), and keeps
    /// listening: a changed record arrives as another reply.
    private func resolveTXT(_ key: InstanceKey, interface: UInt32) -> DNSServiceOperation? {
        guard case .success(let library) = DNSServiceLibrary.shared else { return nil }
        let operation = DNSServiceOperation(library: library, queue: work) { [weak self] reply in
            guard let self, case .resolve(_, _, _, let txt) = reply, var instance = self.instances[key] else { return }
            instance.txt = NWTXTRecord(wireBytes: txt)
            self.instances[key] = instance
            self.publish()
        }
        let code = operation.start { ref in
            key.name.withCString { name in
                key.type.withCString { type in
                    key.domain.withCString { domain in
                        library.resolve(ref, 0, interface, name, type, domain, DNSServiceOperation.resolveReply, operation.context)
                    }
                }
            }
        }
        if code != 0 { logger.notice("cannot resolve \(key.name)", metadata: ["error": "\(NWError.dns(code))"]) }
        return code == 0 ? operation : nil
    }

    /// Hands the current results and their changes since the last batch to the handler. With
    /// TXT records asked for, an instance shows once its record has been read.
    private func publish() {
        var current: [InstanceKey: Result] = [:]
        for (key, instance) in instances {
            let metadata: Result.Metadata
            if case .bonjourWithTXTRecord = descriptor {
                guard let txt = instance.txt else { continue }
                metadata = .bonjour(txt)
            } else {
                metadata = .none
            }
            current[key] = Result(
                endpoint: .service(name: key.name, type: key.type, domain: key.domain, interface: nil),
                metadata: metadata,
                interfaces: instance.interfaces.compactMap(Self.interface(index:))
            )
        }
        var changes: Set<Result.Change> = []
        for key in Set(current.keys).union(published.keys) {
            let change = Result.Change(between: published[key], current[key])
            if change != .identical { changes.insert(change) }
        }
        published = current
        guard !changes.isEmpty else { return }
        let results = Set(current.values)
        let batch = changes
        let handler = lock.withLock {
            _results = results
            return _changedHandler
        }
        if let handler { observable.callback { handler(results, batch) } }
    }

    private func stopAll() {
        stopped = true
        browse?.cancel()
        browse = nil
        for instance in instances.values { for operation in instance.resolutions.values { operation.cancel() } }
        instances.removeAll()
    }

    /// A DNS-SD type without the trailing dot the daemon adds (`_myapp._udp.`), as Apple writes it.
    static func trimmedType(_ type: String) -> String { type.hasSuffix(".") ? String(type.dropLast()) : type }

    static func interface(index: UInt32) -> NWInterface? {
        var name = [CChar](repeating: 0, count: Int(IF_NAMESIZE) + 1)
        guard index != 0, if_indextoname(index, &name) != nil else { return nil }
        return NWInterface(name: String(decoding: name.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))
    }
}

/// Runs `body` with `string` as a C string, or with nil.
func withOptionalCString<T>(_ string: String?, _ body: (UnsafePointer<CChar>?) -> T) -> T {
    guard let string else { return body(nil) }
    return string.withCString { body($0) }
}
