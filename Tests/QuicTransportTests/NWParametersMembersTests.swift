import Foundation
import Glibc
import NIOCore
import QuicTestSupport
import QuicTransport
import Testing

/// Apple's `NWParameters` members that choose interfaces, share ports and mark packets: what
/// they set on real sockets, what reaches the wire, and tunnels over loopback with them.
@Suite("NWParameters' path members", .timeLimit(TestEnvironment.minutes(2)))
struct NWParametersMembersTests {
    static func option(_ fd: CInt, _ level: CInt, _ name: CInt) -> CInt { IPAndUDPStackTests.option(fd, level, name) }

    static func boundDevice(_ fd: CInt) -> String {
        var name = [UInt8](repeating: 0, count: 32)
        var length = socklen_t(name.count)
        #expect(getsockopt(fd, SOL_SOCKET, SO_BINDTODEVICE, &name, &length) == 0, "errno \(errno)")
        return String(decoding: name.prefix { $0 != 0 }, as: UTF8.self)
    }

    /// A pinned client group to `endpoint` with `parameters` adjusted by `configure`.
    static func client(to endpoint: NWEndpoint, trusting server: LoopbackServer, _ configure: (NWParameters) -> Void = { _ in }) -> NWConnectionGroup {
        let options = NWProtocolQUIC.Options(alpn: ["quic-echo"])
        options.tls.certificateVerification = .pinnedSHA256(server.certificate.sha256Fingerprint)
        let parameters = NWParameters(quic: options)
        configure(parameters)
        return NWConnectionGroup(with: NWMultiplexGroup(to: endpoint), using: parameters)
    }

    /// Starts `listener` and returns the state it settles in: `.ready` or `.failed`.
    static func settledState(of listener: NWListener) async throws -> NWListener.State {
        let states = listener.states
        listener.start(queue: DispatchQueue(label: "test.listener"))
        return try await within(10) { () -> NWListener.State in
            for await state in states {
                switch state {
                case .ready, .failed: return state
                default: continue
                }
            }
            return .cancelled
        }
    }

    /// A failed state's error as text, or the state.
    static func text(_ state: NWListener.State) -> String {
        if case .failed(let error) = state { return "failed: \(error)" }
        return "\(state)"
    }

    /// Starts `group` and returns how it ended: "ready" or its failure's text.
    static func outcome(of group: NWConnectionGroup) async throws -> String {
        let states = group.states
        group.start(queue: DispatchQueue(label: "test.group"))
        return try await within(20) { () -> String in
            for await state in states {
                switch state {
                case .ready: return "ready"
                case .failed(let error): return "failed: \(error)"
                default: continue
                }
            }
            return "ended"
        }
    }

    /// Apple's kernel's code points for each class (XNU `netsvctype_dscp_map`).
    @Test func eachServiceClassHasItsCodePoint() throws {
        let expected: [(NWParameters.ServiceClass, CInt)] = [
            (.bestEffort, 0), (.background, 10), (.interactiveVideo, 34), (.interactiveVoice, 46), (.responsiveData, 18), (.signaling, 24),
        ]
        for (serviceClass, dscp) in expected {
            let parameters = NWParameters.quic(alpn: ["x"])
            parameters.serviceClass = serviceClass
            #expect(parameters.serviceClass == serviceClass)
            let fd = try #require(QUICReuseportGroup.bind(try SocketAddress(ipAddress: "127.0.0.1", port: 0), count: 1, options: parameters.socketOptions).first)
            defer { close(fd) }
            #expect(Self.option(fd, CInt(IPPROTO_IP), IP_TOS) == dscp << 2, "\(serviceClass)")
        }
    }

    /// Reuse, the service class and the required interface reach the socket, on IPv4 and IPv6.
    @Test func theMembersReachTheSocket() throws {
        let parameters = NWParameters.quic(alpn: ["x"])
        parameters.allowLocalEndpointReuse = true
        parameters.serviceClass = .interactiveVoice
        parameters.requiredInterface = NWInterface(name: "lo")
        let options = parameters.socketOptions
        let v4 = try #require(QUICReuseportGroup.bind(try SocketAddress(ipAddress: "127.0.0.1", port: 0), count: 1, options: options).first)
        defer { close(v4) }
        #expect(Self.option(v4, SOL_SOCKET, SO_REUSEADDR) == 1)
        #expect(Self.option(v4, SOL_SOCKET, SO_REUSEPORT) == 1)
        #expect(Self.option(v4, CInt(IPPROTO_IP), IP_TOS) == 46 << 2)
        #expect(Self.boundDevice(v4) == "lo")

        let v6 = try #require(QUICReuseportGroup.bind(try SocketAddress(ipAddress: "::1", port: 0), count: 1, options: options).first)
        defer { close(v6) }
        #expect(Self.option(v6, CInt(IPPROTO_IPV6), IPV6_TCLASS) == 46 << 2)
        #expect(Self.boundDevice(v6) == "lo")

        let plain = try #require(QUICReuseportGroup.bind(try SocketAddress(ipAddress: "127.0.0.1", port: 0), count: 1).first)
        defer { close(plain) }
        #expect(Self.option(plain, SOL_SOCKET, SO_REUSEADDR) == 0)
        #expect(Self.option(plain, CInt(IPPROTO_IP), IP_TOS) == 0)
        #expect(Self.boundDevice(plain) == "")
    }

    /// The client's packets carry the class's code point on the wire, above the ECN bits QUIC
    /// sets, as a plain UDP receiver with `IP_RECVTOS` / `IPV6_RECVTCLASS` reads them.
    @Test(arguments: ["127.0.0.1", "::1"]) func theCodePointIsOnTheWire(host: String) async throws {
        let receiver = try WorkerEventLoopTests.Peer(host: host)
        let port = receiver.address.port
        let options = NWProtocolQUIC.Options(alpn: ["x"])
        let parameters = NWParameters(quic: options)
        parameters.serviceClass = .interactiveVideo
        let group = NWConnectionGroup(with: NWMultiplexGroup(to: .hostPort(host: .init(host), port: .init(integerLiteral: port))), using: parameters)
        group.start(queue: DispatchQueue(label: "test.dscp"))
        defer { group.cancel() }

        let datagram = try #require(receiver.receive(), "nothing arrived within 5 s")
        #expect(datagram.bytes.count >= 1200, "the client's Initial, padded (RFC 9000 §14.1)")
        #expect(datagram.trafficClass >> 2 == 34, "AF41 for interactive video; the byte was \(datagram.trafficClass)")
        // ngtcp2 marks its first packets ECT(0) to test the path (RFC 9000 §13.4.2), so this
        // byte came through the ECN control message, which must carry the code point too.
        #expect(datagram.ecn == 2, "ECT(0) beside the code point; the byte was \(datagram.trafficClass)")
    }

    /// Two listeners that allow reuse bind one port, and a client's tunnel reaches one of them;
    /// without reuse the second one fails with EADDRINUSE, as before.
    @Test func twoListenersShareAPortWithReuse() async throws {
        let certificate = try SelfSignedCertificate.generate()
        func listener(on port: NWEndpoint.Port, reuse: Bool) async throws -> (NWListener, NWListener.State) {
            let options = NWProtocolQUIC.Options(alpn: ["quic-echo"])
            options.tls.identity = certificate
            let parameters = NWParameters(quic: options)
            parameters.allowLocalEndpointReuse = reuse
            parameters.requiredLocalEndpoint = .hostPort(host: .ipv4(.loopback), port: port)
            let listener = try NWListener(using: parameters)
            let groups = listener.connectionGroups
            Task { for await group in groups { Task { await LoopbackServer.echo(group) } } }
            return (listener, try await Self.settledState(of: listener))
        }
        let (first, firstState) = try await listener(on: .any, reuse: true)
        defer { first.cancel() }
        #expect(firstState == .ready)
        let port = try #require(first.port)
        let (second, secondState) = try await listener(on: port, reuse: true)
        defer { second.cancel() }
        #expect(secondState == .ready, "the second listener binds the same port")
        #expect(second.port == port)

        let (third, thirdState) = try await listener(on: port, reuse: false)
        defer { third.cancel() }
        #expect(thirdState == .failed(.posix(.EADDRINUSE)), "a listener that does not allow reuse still may not join")

        let options = NWProtocolQUIC.Options(alpn: ["quic-echo"])
        options.tls.certificateVerification = .pinnedSHA256(certificate.sha256Fingerprint)
        let group = NWConnectionGroup(with: NWMultiplexGroup(to: .hostPort(host: .ipv4(.loopback), port: port)), using: NWParameters(quic: options))
        try await startAndWaitUntilReady(group)
        defer { group.cancel() }
        #expect(try await roundTrip(Data("shared port".utf8), on: group) == Data("shared port".utf8))
    }

    /// A tunnel bound to `lo` by name, or by type, runs; one that requires an interface that
    /// does not exist, or whose path leaves by a prohibited one, fails saying so.
    @Test func interfaceRequirementsBindAndRefuse() async throws {
        let server = try await LoopbackServer()
        server.echo()
        let endpoint = NWEndpoint.hostPort(host: .ipv4(.loopback), port: server.port)

        let byName = Self.client(to: endpoint, trusting: server) { $0.requiredInterface = NWInterface(name: "lo") }
        #expect(try await Self.outcome(of: byName) == "ready")
        #expect(try await roundTrip(Data("via lo".utf8), on: byName) == Data("via lo".utf8))
        #expect(byName.currentPath?.usesInterfaceType(.loopback) == true)
        byName.cancel()

        let byType = Self.client(to: endpoint, trusting: server) { $0.requiredInterfaceType = .loopback }
        #expect(try await Self.outcome(of: byType) == "ready")
        byType.cancel()

        let missing = Self.client(to: endpoint, trusting: server) { $0.requiredInterface = NWInterface(name: "nosuch0") }
        let missingOutcome = try await Self.outcome(of: missing)
        #expect(missingOutcome.contains("no interface named nosuch0"), "\(missingOutcome)")

        let noCellular = Self.client(to: endpoint, trusting: server) { $0.requiredInterfaceType = .cellular }
        let cellularOutcome = try await Self.outcome(of: noCellular)
        #expect(cellularOutcome.contains("no interface of the required type cellular"), "\(cellularOutcome)")

        let prohibitedType = Self.client(to: endpoint, trusting: server) { $0.prohibitedInterfaceTypes = [.loopback] }
        let typeOutcome = try await Self.outcome(of: prohibitedType)
        #expect(typeOutcome.contains("leaves by lo, a prohibited interface"), "\(typeOutcome)")

        let prohibitedName = Self.client(to: endpoint, trusting: server) { $0.prohibitedInterfaces = [NWInterface(name: "lo")] }
        let nameOutcome = try await Self.outcome(of: prohibitedName)
        #expect(nameOutcome.contains("leaves by lo, a prohibited interface"), "\(nameOutcome)")

        // Allowed: prohibiting other kinds leaves loopback usable.
        let otherTypes = Self.client(to: endpoint, trusting: server) { $0.prohibitedInterfaceTypes = [.cellular, .wifi] }
        #expect(try await Self.outcome(of: otherTypes) == "ready")
        otherTypes.cancel()
    }

    /// A listener on an address of a prohibited interface fails at start.
    @Test func aListenerOnAProhibitedInterfaceFails() async throws {
        let parameters = NWParameters.quic(alpn: ["x"])
        parameters.requiredLocalEndpoint = .hostPort(host: "127.0.0.1", port: .any)
        parameters.prohibitedInterfaceTypes = [.loopback]
        let listener = try NWListener(using: parameters)
        defer { listener.cancel() }
        let state = try await Self.settledState(of: listener)
        #expect(Self.text(state).contains("127.0.0.1 belongs to lo, a prohibited interface"), "\(state)")
    }

    /// What Linux cannot do is kept as set and changes nothing: a tunnel with all of it runs.
    @Test func theStoredMembersKeepTheirValuesAndChangeNothing() async throws {
        let server = try await LoopbackServer()
        server.echo()
        let group = Self.client(to: .hostPort(host: .ipv4(.loopback), port: server.port), trusting: server) { parameters in
            #expect(!parameters.includePeerToPeer && parameters.multipathServiceType == .disabled)
            #expect(parameters.expiredDNSBehavior == .systemDefault && parameters.requiredInterfaceType == .other)
            #expect(parameters.prohibitedInterfaceTypes == nil && parameters.prohibitedInterfaces == nil && parameters.requiredInterface == nil)
            parameters.includePeerToPeer = true
            parameters.multipathServiceType = .aggregate
            parameters.expiredDNSBehavior = .prohibit
            parameters.preferNoProxies = true
            parameters.prohibitExpensivePaths = true
            parameters.prohibitConstrainedPaths = true
            #expect(parameters.includePeerToPeer && parameters.multipathServiceType == .aggregate)
            #expect(parameters.expiredDNSBehavior == .prohibit && parameters.preferNoProxies)
            #expect(parameters.prohibitExpensivePaths && parameters.prohibitConstrainedPaths)
        }
        try await startAndWaitUntilReady(group)
        defer { group.cancel() }
        #expect(try await roundTrip(Data("unchanged".utf8), on: group) == Data("unchanged".utf8))
    }
}
