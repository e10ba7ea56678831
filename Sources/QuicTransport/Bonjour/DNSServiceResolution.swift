import Dispatch
#if canImport(Glibc)
import Glibc
#endif
import NIOCore

/// Resolves a Bonjour service instance to the addresses to connect to: `DNSServiceResolve` for
/// its SRV record (host and port, RFC 6763 §5), then `DNSServiceQueryRecord` for the host's A and
/// AAAA records, as Network.framework does when a connection to a `.service` endpoint starts.
///
/// Once one family answers it waits `familyGrace` for the other, then reports what it has;
/// with no answer within `timeout` it fails with `kDNSServiceErr_Timeout`.
// @unchecked Sendable: everything mutable is touched only on `work`.
final class DNSServiceResolution: @unchecked Sendable {
    /// Where the service is.
    struct Target {
        /// The host serving it, without the final dot (`vm.local`); the TLS server name.
        let host: String
        let port: UInt16
        /// Its addresses, IPv6 first, as `getaddrinfo` orders them.
        let addresses: [SocketAddress]
    }

    static let timeout: DispatchTimeInterval = .seconds(5)
    static let familyGrace: DispatchTimeInterval = .milliseconds(100)

    private let work = DispatchQueue(label: "quic.bonjour.resolve")
    private let completion: @Sendable (Result<Target, NWError>) -> Void
    private var operations: [DNSServiceOperation] = []
    private var host = ""
    private var port: UInt16 = 0
    private var interface: UInt32 = 0
    private var addresses: [SocketAddress] = []
    private var familiesAnswered: Set<UInt16> = []
    private var finished = false

    /// `completion` runs once, on a queue of the resolution's own, unless `cancel()` came first.
    init(completion: @escaping @Sendable (Result<Target, NWError>) -> Void) {
        self.completion = completion
    }

    func start(name: String, type: String, domain: String, interface: NWInterface?) {
        work.async {
            let library: DNSServiceLibrary
            switch DNSServiceLibrary.shared {
            case .success(let loaded): library = loaded
            case .failure: return self.finish(.failure(.dns(DNSServiceLibrary.errorServiceNotRunning)))
            }
            let operation = DNSServiceOperation(library: library, queue: self.work) { [weak self] reply in self?.handle(reply, library: library) }
            let code = operation.start { ref in
                name.withCString { name in
                    type.withCString { type in
                        domain.withCString { domain in
                            library.resolve(
                                ref, 0, UInt32(interface?.index ?? 0), name, type, domain, DNSServiceOperation.resolveReply,
                                operation.context
                            )
                        }
                    }
                }
            }
            guard code == 0 else { return self.finish(.failure(.dns(code))) }
            self.operations.append(operation)
            self.work.asyncAfter(deadline: .now() + Self.timeout) { self.finish(.failure(.dns(DNSServiceLibrary.errorTimeout))) }
        }
    }

    /// Stops resolving; the completion will not run.
    func cancel() {
        work.async {
            self.finished = true
            self.stopOperations()
        }
    }

    private func handle(_ reply: DNSServiceOperation.Reply, library: DNSServiceLibrary) {
        switch reply {
        case .resolve(let interface, let hostTarget, let port, _):
            guard host.isEmpty else { return }
            host = hostTarget
            self.port = port
            self.interface = interface
            stopOperations()
            // A (1) and AAAA (28) in class IN (1), RFC 1035 §3.2 and RFC 3596 §2.1.
            for recordType: UInt16 in [1, 28] {
                let operation = DNSServiceOperation(library: library, queue: work) { [weak self] reply in self?.handle(reply, library: library) }
                let code = operation.start { ref in
                    hostTarget.withCString { name in
                        library.queryRecord(ref, 0, interface, name, recordType, 1, DNSServiceOperation.recordReply, operation.context)
                    }
                }
                if code == 0 { operations.append(operation) }
            }
            if operations.isEmpty { finish(.failure(.dns(DNSServiceLibrary.errorUnknown))) }
        case .record(let flags, _, let type, let data):
            guard flags & DNSServiceLibrary.flagAdd != 0, let address = address(type: type, data: data) else { return }
            if !addresses.contains(address) { addresses.append(address) }
            let isFirstAnswer = familiesAnswered.isEmpty
            familiesAnswered.insert(type)
            if familiesAnswered.count == 2 {
                succeed()
            } else if isFirstAnswer {
                work.asyncAfter(deadline: .now() + Self.familyGrace) { self.succeed() }
            }
        case .failure(let code):
            finish(.failure(.dns(code)))
        case .browse, .register:
            break
        }
    }

    private func succeed() {
        let ordered = addresses.filter { $0.protocol == .inet6 } + addresses.filter { $0.protocol == .inet }
        let name = host.hasSuffix(".") ? String(host.dropLast()) : host
        finish(.success(Target(host: name, port: port, addresses: ordered)))
    }

    private func finish(_ result: Result<Target, NWError>) {
        guard !finished else { return }
        finished = true
        stopOperations()
        completion(result)
    }

    private func stopOperations() {
        for operation in operations { operation.cancel() }
        operations.removeAll()
    }

    /// The socket address an A or AAAA record's data gives, with the service's port. Linux
    /// note: a link-local IPv6 address gets no scope, so only routable ones are reachable.
    private func address(type: UInt16, data: [UInt8]) -> SocketAddress? {
        let text: String
        switch (type, data.count) {
        case (1, 4): text = data.map { String($0) }.joined(separator: ".")
        case (28, 16):
            text = stride(from: 0, to: 16, by: 2).map { String(UInt16(data[$0]) << 8 | UInt16(data[$0 + 1]), radix: 16) }
                .joined(separator: ":")
        default: return nil
        }
        return QUICSocketAddress(ip: text, port: port)?.nioAddress
    }
}
