import ArgumentParser
import CommandLineSupport
import Dispatch
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif
import Logging
import QuicTransport

/// `quic-echo serve`: echoes every stream and datagram back, and answers resets with the same code.
struct Serve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Serve the echo protocol.")

    @OptionGroup var listen: ServerListenOptions

    @Option(name: .customLong("max-connections"), help: "Most tunnels served at once.")
    var maxConnections = 1024

    /// On by default: a test peer that offers datagrams costs nothing until one arrives, and a
    /// client asking for them then finds them (`--no-datagrams` tests a peer without).
    @Flag(inversion: .prefixedNo, help: "Offer QUIC datagrams (RFC 9221 max_datagram_frame_size) and echo them; on by default.")
    var datagrams = true

    @Option(help: "Workers, each with its own thread and UDP socket on the port; the kernel steers packets to them by connection ID.")
    var workers = 1

    @OptionGroup var common: CommonOptions

    @OptionGroup var loadBalancer: LoadBalancerOptions

    func validate() throws {
        if maxConnections < 1 { throw ValidationError("--max-connections must be at least 1") }
        try validateWorkerCount(workers)
    }

    func run() async throws {
        common.bootstrapLogging()
        let logger = Logger(label: "quic-echo")
        let options = try common.makeOptions()
        options.isDatagram = datagrams
        options.requiresAddressValidation = listen.retry
        options.addressValidationThreshold = listen.retryThreshold
        options.acceptsEarlyData = listen.earlyData
        options.tls.certificateChainFile = listen.cert
        options.tls.privateKeyFile = listen.key
        options.loadBalancer = try loadBalancer.configuration()
        options.disablesActiveMigration = loadBalancer.disablesActiveMigration
        let parameters = NWParameters(quic: options)
        let port = NWEndpoint.Port(integerLiteral: listen.port)
        parameters.requiredLocalEndpoint = .hostPort(host: .init(listen.host), port: port)

        let listener: NWListener
        do {
            listener = try NWListener(using: parameters, on: port)
        } catch {
            writeToStandardError("error: \(error)\n")
            throw ExitCode(1)
        }
        listener.maximumConcurrentTunnels = maxConnections
        listener.maximumTunnelsPerAddress = listen.maxConnectionsPerAddress
        listener.workers = workers
        if let generated = listener.generatedCertificate {
            writeToStandardOutput("certificate: self-signed for localhost, 127.0.0.1, ::1; sha256 \(generated.sha256FingerprintHex)\n")
        }
        let groups = listener.connectionGroups
        let states = listener.states
        listener.start(queue: DispatchQueue(label: "quic-echo.listener"))
        for await state in states {
            if case .ready = state {
                // Written unbuffered: scripts wait for this line to learn the port.
                writeToStandardOutput("listening on \(URIHost.authority(listen.host, listener.port?.rawValue ?? 0)) alpn \(common.alpn)\n")
                break
            }
            if case .failed(let error) = state {
                writeToStandardError("error: cannot listen on \(URIHost.authority(listen.host, port.rawValue)): \(error)\n")
                throw ExitCode(1)
            }
        }
        let server = EchoServer(logger: logger)
        signal(SIGINT, SIG_IGN)
        signal(SIGTERM, SIG_IGN)
        let stop = DispatchSource.makeSignalSource(signal: SIGTERM)
        let interrupt = DispatchSource.makeSignalSource(signal: SIGINT)
        for source in [stop, interrupt] {
            source.setEventHandler { listener.cancel() }
            source.resume()
        }
        // Discarding: a plain task group keeps every finished child until someone awaits it,
        // which here would be one per tunnel ever served.
        await withDiscardingTaskGroup { tasks in
            for await group in groups {
                tasks.addTask { await server.serve(group) }
            }
        }
        // The listener closed every tunnel; their closing periods end within a few PTOs.
        let remaining = await listener.liveConnections.remainingAfterStop(within: .seconds(5))
        writeToStandardOutput("stopped: \(remaining) connections still in memory\n")
        // Used after the wait, so the sources live until then (optimised builds free unused ones).
        stop.cancel()
        interrupt.cancel()
    }
}
