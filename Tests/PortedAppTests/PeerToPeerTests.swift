import Foundation
import NIOConcurrencyHelpers
import QuicTestSupport
import QuicTransport
import Testing

@Suite("A peer-to-peer app ported as is", .serialized, .timeLimit(TestEnvironment.minutes(2)))
struct PeerToPeerTests {
    @Test func twoPeersFindEachOtherThroughBonjourAndTalkOverQUIC() async throws {
        try await AvahiDaemon.ensureRunning()
        let (aliceCertificate, aliceKey) = try OpenSSLCertificate.make()
        let (bobCertificate, bobKey) = try OpenSSLCertificate.make()
        let trusted = [
            try PortedAppTests.derCertificate(inPEMFile: aliceCertificate), try PortedAppTests.derCertificate(inPEMFile: bobCertificate),
        ]
        // A passcode of this run only: peers of other runs on the same network are ignored.
        let passcode = String(UInt32.random(in: 0...UInt32.max))
        let alice = PeerToPeerApp(
            name: "alice-\(passcode)", passcode: passcode, certificateFile: aliceCertificate, keyFile: aliceKey, trustedCertificates: trusted
        )
        let bob = PeerToPeerApp(name: "bob-\(passcode)", passcode: passcode, certificateFile: bobCertificate, keyFile: bobKey, trustedCertificates: trusted)
        defer {
            alice.stop()
            bob.stop()
        }
        let failures = NIOLockedValueBox<[String]>([])
        for app in [alice, bob] { app.onFailure = { failure in failures.withLockedValue { $0.append(failure) } } }

        // Each finds the other, and only the other, from its advertisement alone.
        let bobSeenByAlice: NWBrowser.Result = try await PortedAppTests.waitFor { done in
            alice.onPeerFound = { done($0) }
            bob.start()
            alice.start()
        }
        let aliceSeenByBob: NWBrowser.Result = try await PortedAppTests.waitFor { done in
            bob.queue.async {
                if let first = bob.discoveredPeers.first { done(first) } else { bob.onPeerFound = { done($0) } }
            }
        }
        #expect(failures.withLockedValue { $0 } == [])
        guard case .service(let bobName, let type, _, _) = bobSeenByAlice.endpoint else { throw SetupError("\(bobSeenByAlice.endpoint)") }
        #expect(bobName == bob.name)
        #expect(type == PeerToPeerApp.serviceType)
        guard case .service(let aliceName, _, _, _) = aliceSeenByBob.endpoint else { throw SetupError("\(aliceSeenByBob.endpoint)") }
        #expect(aliceName == alice.name)
        // Bob's own registration callback and Alice's browse reply race: each comes from the daemon.
        #expect(await eventually(within: 5) { bob.queue.sync { bob.advertisedEndpoint } == bobSeenByAlice.endpoint })

        // A connection to each browse result's endpoint: a QUIC tunnel, a stream, an answer.
        let bobsAnswer: Result<String, NWError> = try await PortedAppTests.waitFor { done in
            alice.queue.async { alice.send("hello from alice", to: bobSeenByAlice.endpoint) { done($0) } }
        }
        #expect(try bobsAnswer.get() == "\(bob.name) heard: hello from alice")
        let alicesAnswer: Result<String, NWError> = try await PortedAppTests.waitFor { done in
            bob.queue.async { bob.send("hello from bob", to: aliceSeenByBob.endpoint) { done($0) } }
        }
        #expect(try alicesAnswer.get() == "\(alice.name) heard: hello from bob")
        #expect(bob.queue.sync { bob.answeredMessages } == 1)
        #expect(alice.queue.sync { alice.answeredMessages } == 1)
    }
}
