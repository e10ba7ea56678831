import CQuicShims
import QuicTestSupport
@testable import QuicTransport
import Testing

/// In-memory client/server pairs: real ngtcp2 and GnuTLS, simulated link, virtual clock.
@Suite("QUICConnectionCore in memory")
struct QUICConnectionCoreTests {
    /// Events are copied several times on their way to the driver and stored in arrays, most of
    /// them a stream ID or two: the rare large payloads (a path, a close reason) are boxed, so
    /// an event stays small. A path inline made each one 265 bytes.
    @Test func eventsStaySmall() {
        #expect(MemoryLayout<QUICPath>.size > 200, "the case this guards against")
        #expect(MemoryLayout<QUICConnectionEvent>.size <= 40, "\(MemoryLayout<QUICConnectionEvent>.size) bytes")
    }

    /// Echoes every client stream back, resets with the peer's code, echoes datagrams.
    static func echo(_ core: QUICConnectionCore, _ event: QUICConnectionEvent) {
        switch event {
        case .streamReadable(let id):
            let read = core.read(streamID: id, maximumLength: .max)
            if let code = read.resetCode {
                core.resetStream(streamID: id, code: code)
                return
            }
            if !read.bytes.isEmpty || read.isFinished {
                read.bytes.withUnsafeBytes { try? core.send(streamID: id, bytes: $0, fin: read.isFinished, token: nil) }
            }
        case .datagramReceived(let bytes):
            try? core.sendDatagram(bytes)
        default:
            break
        }
    }

    @Test func handshakeNegotiatesALPNAndCipher() throws {
        let pair = try InMemoryPair()
        try pair.run(until: { pair.client.isHandshakeCompleted && pair.serverConnection?.isHandshakeCompleted == true })
        #expect(pair.client.negotiatedALPN == "quic-echo")
        #expect(pair.serverConnection?.negotiatedALPN == "quic-echo")
        #expect(pair.client.cipherName == "AES-128-GCM")
        #expect(pair.client.negotiatedVersion == NGTCP2_PROTO_VER_V1)
        #expect(pair.clientEvents.contains(.handshakeCompleted))
    }

    @Test func streamIDsFollowRFC9000Numbering() throws {
        let pair = try InMemoryPair()
        try pair.run(until: { pair.client.isHandshakeCompleted })
        let bidi = try (0..<3).map { _ in try #require(try pair.client.openStream(bidirectional: true)) }
        let uni = try (0..<2).map { _ in try #require(try pair.client.openStream(bidirectional: false)) }
        #expect(bidi == [0, 4, 8])
        #expect(uni == [2, 6])
    }

    @Test(arguments: [0.0, 0.05, 0.2])
    func bulkEchoSurvivesLoss(lossRate: Double) throws {
        let pair = try InMemoryPair(seed: 42)
        pair.serverApplication = Self.echo
        pair.lossRate = lossRate
        try pair.run(until: { pair.client.isHandshakeCompleted })
        let payload = (0..<300_000).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) }
        let stream = try #require(try pair.client.openStream(bidirectional: true))
        try payload.withUnsafeBytes { try pair.client.send(streamID: stream, bytes: $0, fin: true, token: 1) }
        let echoed = try pair.readClientStreamToEnd(stream)
        #expect(echoed == payload)
        #expect(pair.clientEvents.contains(.streamSendCompleted(streamID: stream, token: 1, error: nil)))
        if lossRate > 0 { #expect(pair.droppedPackets > 0) }
    }

    /// Right after a write on a fast path, ngtcp2's expiry is due within a millisecond (here it
    /// is already past), though nothing waits to be sent. The core puts a deadline that near off
    /// to ngtcp2's pacing overhead, so a driver's timer does not wake its loop for nothing; the
    /// data went at once, and ACKs and loss recovery still run, at most that millisecond late.
    @Test func aWriteOnAFastPathSetsNoDeadlineWithinThePacingOverhead() throws {
        let pair = try InMemoryPair()
        pair.oneWayDelay = 50_000
        pair.serverApplication = Self.echo
        try pair.run(until: { pair.client.isHandshakeCompleted && pair.serverConnection?.isHandshakeCompleted == true })
        pair.advance(by: 100_000_000)  // every handshake ACK delivered; the path's RTT known
        let stream = try #require(try pair.client.openStream(bidirectional: true))
        let payload = [UInt8](repeating: 7, count: 1000)
        try payload.withUnsafeBytes { try pair.client.send(streamID: stream, bytes: $0, fin: true, token: nil) }
        let scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: 65_536, alignment: 16)
        defer { scratch.deallocate() }
        var written = 0
        _ = pair.client.writePackets(now: pair.now, scratch: scratch) { bytes, _, _, _ in written += bytes.count }
        #expect(written > payload.count)
        let rawExpiry = ngtcp2_conn_get_expiry(pair.client.conn)
        #expect(rawExpiry < pair.now + QUICPacketWriter.pacingOverhead, "the case this test is for: ngtcp2 due within a millisecond of the write")
        #expect(pair.client.nextDeadline >= pair.now + QUICPacketWriter.pacingOverhead)
    }

    /// ngtcp2 0.12 paces at the initial RTT (333 ms) until it has a sample, so the client's
    /// first Initial alone held its Finished about 26 ms after the server's reply was in, and
    /// the server's flight held its answer as long (`QUICConnectionCore.updatePacing`). On a
    /// 2 ms round trip the server's handshake completes when the client's Finished arrives,
    /// one and a half round trips in.
    @Test func pacingHoldsNoHandshakePacketBeforeTheFirstRTTSample() throws {
        let pair = try InMemoryPair()
        pair.oneWayDelay = 1_000_000
        let start = pair.now
        try pair.run(until: { pair.serverConnection?.isHandshakeCompleted == true })
        let elapsed = pair.now - start
        #expect(elapsed <= 4_000_000, "the server's handshake completed \(elapsed / 1000) µs in, more than two round trips")
    }

    @Test func resetCodeReachesThePeerAndComesBack() throws {
        let pair = try InMemoryPair()
        pair.serverApplication = Self.echo
        try pair.run(until: { pair.client.isHandshakeCompleted })
        let stream = try #require(try pair.client.openStream(bidirectional: true))
        try ([1, 2, 3] as [UInt8]).withUnsafeBytes { try pair.client.send(streamID: stream, bytes: $0, fin: false, token: nil) }
        try pair.run(until: { pair.client.readableBytes(streamID: stream) == 3 })
        pair.client.resetStream(streamID: stream, code: 42)
        var resetCode: UInt64?
        try pair.run(until: {
            resetCode = pair.client.read(streamID: stream, maximumLength: .max).resetCode
            return resetCode != nil
        })
        #expect(resetCode == 42)
    }

    @Test func stopSendingMakesThePeerResetWithTheSameCode() throws {
        let pair = try InMemoryPair()
        try pair.run(until: { pair.client.isHandshakeCompleted })
        let stream = try #require(try pair.client.openStream(bidirectional: true))
        try ([9] as [UInt8]).withUnsafeBytes { try pair.client.send(streamID: stream, bytes: $0, fin: true, token: nil) }
        try pair.run(until: { pair.serverEvents.contains(.streamOpened(streamID: stream)) })
        pair.client.stopSending(streamID: stream, code: 77)
        // ngtcp2 answers STOP_SENDING with RESET_STREAM carrying the same code (RFC 9000 §3.5);
        // the server's stream then closes with that code.
        try pair.run(until: {
            pair.serverEvents.contains { if case .streamClosed(stream, _) = $0 { true } else { false } }
        })
        #expect(pair.serverEvents.contains(.streamClosed(streamID: stream, code: 77)), "\(pair.serverEvents)")
        let server = try #require(pair.serverConnection)
        #expect(throws: QUICStreamError.self) {
            try ([1] as [UInt8]).withUnsafeBytes { try server.send(streamID: stream, bytes: $0, fin: false, token: nil) }
        }
    }

    @Test func datagramsEchoWhenBothSidesEnableThem() throws {
        var configuration = InMemoryPair.defaultConfiguration()
        configuration.maxDatagramFrameSize = 65_535
        let pair = try InMemoryPair(clientConfiguration: configuration, serverConfiguration: configuration)
        pair.serverApplication = Self.echo
        try pair.run(until: { pair.client.isHandshakeCompleted })
        #expect(pair.client.isDatagramNegotiated)
        try pair.client.sendDatagram([7, 7, 7])
        try pair.run(until: { pair.clientEvents.contains(.datagramReceived([7, 7, 7])) })
    }

    @Test func datagramsAreRefusedWhenThePeerDidNotOfferThem() throws {
        var configuration = InMemoryPair.defaultConfiguration()
        configuration.maxDatagramFrameSize = 65_535
        let pair = try InMemoryPair(clientConfiguration: configuration)
        try pair.run(until: { pair.client.isHandshakeCompleted })
        #expect(!pair.client.isDatagramNegotiated)
        #expect(throws: QUICStreamError.datagramsNotNegotiated) { try pair.client.sendDatagram([1]) }
    }

    @Test func idleTimeoutClosesBothSidesOnTheVirtualClock() throws {
        var configuration = InMemoryPair.defaultConfiguration()
        configuration.idleTimeoutMilliseconds = 2_000
        let pair = try InMemoryPair(clientConfiguration: configuration, serverConfiguration: configuration)
        try pair.run(until: { pair.client.isHandshakeCompleted })
        pair.advance(by: 1_000_000_000)
        #expect(pair.client.closeReason == nil)
        pair.advance(by: 5_000_000_000)
        #expect(pair.client.closeReason == .idleTimeout)
        #expect(pair.serverConnection?.closeReason == .idleTimeout)
    }

    @Test func applicationCloseCarriesCodeAndReason() throws {
        let pair = try InMemoryPair()
        try pair.run(until: { pair.client.isHandshakeCompleted })
        // Once the handshake is confirmed (HANDSHAKE_DONE), the close travels in 1-RTT as an
        // application close; before that RFC 9000 §10.2.3 turns it into APPLICATION_ERROR.
        pair.advance(by: 100_000_000)
        pair.client.close(applicationErrorCode: 0x2a, reason: "bye", now: pair.now)
        try pair.run(until: { pair.serverConnection?.closeReason != nil })
        #expect(pair.serverConnection?.closeReason == .peerApplicationClose(code: 0x2a, reason: "bye"))
        #expect(pair.client.closeReason == .localApplicationClose(code: 0x2a, reason: "bye"))
    }

    @Test func wrongALPNFailsTheHandshakeOnBothSides() throws {
        var serverConfiguration = InMemoryPair.defaultConfiguration()
        serverConfiguration.alpn = ["h3"]
        let pair = try InMemoryPair(serverConfiguration: serverConfiguration)
        try pair.run(until: { pair.client.closeReason != nil })
        let description = pair.client.closeReason?.description ?? ""
        #expect(description.contains("no_application_protocol"), "\(description)")
        #expect(!pair.client.isHandshakeCompleted)
    }

    @Test func retryValidatesTheAddressBeforeCreatingState() throws {
        let pair = try InMemoryPair(requiresRetry: true)
        pair.serverApplication = Self.echo
        try pair.run(until: { pair.client.isHandshakeCompleted })
        #expect(pair.server.connections.count == 1)
        let stream = try #require(try pair.client.openStream(bidirectional: true))
        try ([5, 6] as [UInt8]).withUnsafeBytes { try pair.client.send(streamID: stream, bytes: $0, fin: true, token: nil) }
        #expect(try pair.readClientStreamToEnd(stream) == [5, 6])
    }

    @Test func garbageDatagramsGetNoReplyAndCreateNoConnection() throws {
        let pair = try InMemoryPair()
        var random = SeededGenerator(seed: 7)
        for _ in 0..<500 {
            let size = Int(random.next() % 1_199) + 1
            let bytes = (0..<size).map { _ in UInt8(truncatingIfNeeded: random.next()) }
            switch pair.inject(toServer: bytes) {
            case .dropped: break
            case .answered(let what, _): Issue.record("garbage was answered: \(what)")
            case .delivered: Issue.record("garbage reached a connection")
            case .forward(let worker): Issue.record("one worker forwarded garbage to worker \(worker)")
            }
        }
        #expect(pair.server.connections.isEmpty)
    }

    /// Found by the server-datagram fuzz target (Fuzz/regressions/server-datagram): a long header
    /// of version 0 may carry a connection ID of up to 255 bytes (RFC 8999 §5.1), ngtcp2 passes
    /// it, and building our 20-byte ID from it stopped the whole server process.
    @Test func connectionIDsLongerThan20BytesNeitherStopTheServerNorStartAConnection() throws {
        let pair = try InMemoryPair()
        for (version, length) in [([0, 0, 0, 0] as [UInt8], 32), ([0, 0, 0, 0], 255), ([0x1a, 0x2a, 0x3a, 0x4a], 255)] {
            var packet: [UInt8] = [0xc9] + version + [UInt8(length)] + [UInt8](repeating: 0xab, count: length)
            packet += [255] + [UInt8](repeating: 0xcd, count: 255)
            packet += [UInt8](repeating: 0, count: max(0, 1200 - packet.count))
            switch pair.inject(toServer: packet) {
            case .dropped: #expect(version == [0, 0, 0, 0], "an unknown version is owed Version Negotiation")
            case .answered(let what, _): #expect(what.contains("version negotiation") && version != [0, 0, 0, 0], "\(what)")
            case .delivered, .forward: Issue.record("a \(length)-byte connection ID was routed")
            }
        }
        try pair.run(until: { pair.client.isHandshakeCompleted })
    }

    @Test func unknownVersionGetsVersionNegotiation() throws {
        let pair = try InMemoryPair()
        var packet = [UInt8](repeating: 0, count: 1200)
        packet[0] = 0xc0
        packet[1...4] = [0x1a, 0x2a, 0x3a, 0x4a]
        packet[5] = 8
        packet[14] = 8
        guard case .answered(let what, _) = pair.inject(toServer: packet) else {
            Issue.record("no Version Negotiation")
            return
        }
        #expect(what.contains("version negotiation"))
    }

    @Test func shortHeaderForAForgottenConnectionGetsAStatelessReset() throws {
        let pair = try InMemoryPair()
        let id = pair.server.idFactory.makeConnectionID()
        var packet: [UInt8] = [0x40] + id.bytes
        packet += [UInt8](repeating: 0xab, count: 40)
        guard case .answered(let what, _) = pair.inject(toServer: packet) else {
            Issue.record("no stateless reset")
            return
        }
        #expect(what == "stateless reset")
    }

    /// The endpoint remembers the route its last datagram took; a connection it forgets must
    /// stop receiving at once, even when it was that route.
    @Test func aForgottenConnectionStopsReceivingEvenRightAfterItsLastDatagram() throws {
        let pair = try InMemoryPair()
        try pair.run(until: { pair.client.isHandshakeCompleted && pair.serverConnection?.isHandshakeCompleted == true })
        let server = try #require(pair.serverConnection)
        func nextClientDatagram() throws -> [UInt8] {
            let stream = try #require(try pair.client.openStream(bidirectional: true))
            try [UInt8](repeating: 7, count: 100).withUnsafeBytes { try pair.client.send(streamID: stream, bytes: $0, fin: true, token: nil) }
            let scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: 65_536, alignment: 16)
            defer { scratch.deallocate() }
            var datagrams: [[UInt8]] = []
            _ = pair.client.writePackets(now: pair.now, scratch: scratch) { bytes, _, _, _ in datagrams.append(Array(bytes)) }
            return try #require(datagrams.first)
        }
        guard case .delivered(let core, _, false) = pair.inject(toServer: try nextClientDatagram()) else {
            Issue.record("a datagram of a live connection was not delivered")
            return
        }
        #expect(core === server)
        pair.server.remove(server)
        switch pair.inject(toServer: try nextClientDatagram()) {
        case .delivered: Issue.record("a forgotten connection still received a datagram")
        case .answered(let what, _): #expect(what == "stateless reset")
        case .dropped, .forward: break
        }
    }

    @Test func cipherSuitesCanBeRestricted() throws {
        var configuration = InMemoryPair.defaultConfiguration()
        configuration.cipherSuites = [.chacha20Poly1305]
        let pair = try InMemoryPair(clientConfiguration: configuration, serverConfiguration: configuration)
        try pair.run(until: { pair.client.isHandshakeCompleted })
        #expect(pair.client.cipherName == "CHACHA20-POLY1305")
        #expect(pair.serverConnection?.cipherName == "CHACHA20-POLY1305")
    }

    @Test func unreadDataHoldsTheSenderBackUntilTheApplicationReads() throws {
        var serverConfiguration = InMemoryPair.defaultConfiguration()
        serverConfiguration.initialMaxStreamDataBidirectionalRemote = 64 * 1024
        serverConfiguration.maxStreamWindow = 64 * 1024
        let pair = try InMemoryPair(serverConfiguration: serverConfiguration)
        try pair.run(until: { pair.client.isHandshakeCompleted })
        let stream = try #require(try pair.client.openStream(bidirectional: true))
        let chunk = [UInt8](repeating: 0x5a, count: 16 * 1024)
        for token in 1...64 {
            try chunk.withUnsafeBytes { try pair.client.send(streamID: stream, bytes: $0, fin: token == 64, token: UInt64(token)) }
        }
        func completed() -> Int {
            pair.clientEvents.filter { if case .streamSendCompleted(stream, _, nil) = $0 { true } else { false } }.count
        }
        pair.advance(by: 2_000_000_000)
        // Nothing was read, so only the 64 KiB window could go out: four chunks of 16 KiB.
        #expect(completed() == 4)
        let server = try #require(pair.serverConnection)
        var received = 0
        try pair.run(until: {
            let read = server.read(streamID: stream, maximumLength: .max)
            received += read.bytes.count
            return read.isFinished
        })
        #expect(received == 64 * 16 * 1024)
        #expect(completed() == 64)
    }

    /// A peer that opens many streams and sends on all of them to an application that reads
    /// nothing gets the connection's flow-control window (RFC 9000 §4.1), not our memory: what
    /// the server holds unread stays within `initialMaxData` however many streams there are.
    @Test func unreadDataOnManyStreamsStaysWithinTheConnectionWindow() throws {
        let window: UInt64 = 256 * 1024
        var serverConfiguration = InMemoryPair.defaultConfiguration()
        serverConfiguration.initialMaxData = window
        serverConfiguration.maxConnectionWindow = window
        let pair = try InMemoryPair(serverConfiguration: serverConfiguration)
        try pair.run(until: { pair.client.isHandshakeCompleted })
        let chunk = [UInt8](repeating: 0xa5, count: 16 * 1024)
        var streams: [Int64] = []
        for _ in 0..<16 {
            let stream = try #require(try pair.client.openStream(bidirectional: true))
            for token in 1...16 {
                try chunk.withUnsafeBytes { try pair.client.send(streamID: stream, bytes: $0, fin: token == 16, token: UInt64(token)) }
            }
            streams.append(stream)
        }
        pair.advance(by: 2_000_000_000)
        // 4 MiB offered on 16 streams; only one connection window's worth may be held unread.
        let server = try #require(pair.serverConnection)
        var held = 0
        for stream in streams { held += server.read(streamID: stream, maximumLength: .max).bytes.count }
        #expect(held > 0 && held <= Int(window), "the server held \(held) bytes unread against a window of \(window)")
        var received = held
        try pair.run(until: {
            for stream in streams { received += server.read(streamID: stream, maximumLength: .max).bytes.count }
            return received == 16 * 16 * chunk.count
        })
    }

    @Test func aStatelessResetFromTheServerEndsTheClient() throws {
        let pair = try InMemoryPair()
        try pair.run(until: { pair.client.isHandshakeCompleted })
        pair.advance(by: 100_000_000)
        // The server's first connection ID is the client's destination; its token was in the handshake.
        guard case .connectionIDIssued(let serverID)? = pair.serverEvents.first else {
            Issue.record("no server connection ID")
            return
        }
        let token = pair.server.idFactory.statelessResetToken(for: serverID)
        var packet = [UInt8](repeating: 0, count: 64)
        var random = [UInt8](repeating: 0x5c, count: 24)
        let length = ngtcp2_pkt_write_stateless_reset(&packet, packet.count, token, &random, random.count)
        #expect(length == random.count + token.count)  // ngtcp2 turns the first random byte into the header byte.
        Array(packet.prefix(length)).withUnsafeBytes {
            pair.client.receive(datagram: $0, path: QUICPath(local: InMemoryPair.clientAddress, remote: InMemoryPair.serverAddress), now: pair.now)
        }
        #expect(pair.client.closeReason == .statelessReset)
    }

    /// End to end: the token the server issued in the handshake and in NEW_CONNECTION_ID frames
    /// is the one its endpoint derives again once the connection is lost (RFC 9000 §10.3), so
    /// the client ends at once instead of waiting for its idle timeout.
    @Test func aServerThatLostTheConnectionResetsTheClientWithTheTokenItIssued() throws {
        let pair = try InMemoryPair()
        try pair.run(until: { pair.client.isHandshakeCompleted })
        pair.advance(by: 100_000_000)
        pair.loseServerConnection()
        let stream = try #require(try pair.client.openStream(bidirectional: true))
        try [UInt8](repeating: 1, count: 100).withUnsafeBytes { try pair.client.send(streamID: stream, bytes: $0, fin: true, token: 1) }
        try pair.run(until: { pair.client.closeReason != nil }, limit: 2_000_000_000)
        #expect(pair.client.closeReason == .statelessReset)
    }

    @Test func aPeerClosingWithNoErrorIsNotTakenForAStatelessReset() throws {
        let pair = try InMemoryPair()
        try pair.run(until: { pair.client.isHandshakeCompleted })
        pair.serverConnection?.close(applicationErrorCode: 0, reason: "", now: pair.now)
        try pair.run(until: { pair.client.closeReason != nil })
        #expect(pair.client.closeReason != .statelessReset)
    }
}
