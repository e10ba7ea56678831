import Foundation
import NIOConcurrencyHelpers
import QuicTestSupport
import QuicTransport
import Testing

@Suite("NWTXTRecord (RFC 6763 §6)")
struct NWTXTRecordTests {
    @Test func keysCompareCaseInsensitivelyAndInvalidOnesAreRefused() {
        var record = NWTXTRecord(["Version": "2"])
        #expect(record["version"] == "2")
        let setFlag = record.setEntry(.none, for: "flag")
        let setWithEquals = record.setEntry(.string("x"), for: "a=b")
        let setEmpty = record.setEntry(.string("x"), for: "")
        #expect(setFlag && !setWithEquals && !setEmpty)
        record["VERSION"] = "3"
        #expect(record.count == 2)
        #expect(record.getEntry(for: "version") == .string("3"))
        #expect(record.dictionary == ["Version": "3", "flag": ""])
        let removed = record.removeEntry(key: "FLAG")
        let removedAgain = record.removeEntry(key: "flag")
        #expect(removed && !removedAgain)
        record["Version"] = nil
        #expect(record.isEmpty)
    }

    @Test func entriesFromBytes() {
        #expect(NWTXTRecord.Entry(nil) == .none)
        #expect(NWTXTRecord.Entry(Data()) == .empty)
        #expect(NWTXTRecord.Entry(Data("hi".utf8)) == .string("hi"))
        #expect(NWTXTRecord.Entry(Data([0xff, 0xfe])) == .data(Data([0xff, 0xfe])))
        #expect(NWTXTRecord.Entry.none.data == nil)
    }

    @Test func aServiceCarriesTheRecordInWireForm() throws {
        var record = NWTXTRecord(["a": "1"])
        record.setEntry(.none, for: "b")
        record.setEntry(.empty, for: "c")
        let service = NWListener.Service(name: "x", type: "_qecho._udp", txtRecord: record)
        // RFC 6763 §6.4: "a=1", "b" (no "="), "c=" as length-prefixed strings.
        #expect(service.txtRecord == Data([3]) + Data("a=1".utf8) + Data([1]) + Data("b".utf8) + Data([2]) + Data("c=".utf8))
        let parsed = try #require(service.txtRecordObject)
        #expect(parsed == record)
        #expect(parsed.getEntry(for: "b") == NWTXTRecord.Entry.none)
        #expect(parsed.getEntry(for: "c") == .empty)
    }
}

/// Bonjour through Avahi, against Avahi's own tools as the independent peer.
@Suite("Bonjour through Avahi", .serialized, .timeLimit(TestEnvironment.minutes(2)))
struct BonjourTests {
    static func uniqueName(_ prefix: String) -> String { "\(prefix)-\(UInt32.random(in: 0...UInt32.max))" }

    /// `avahi-browse -rpt TYPE`: one resolved line per instance and protocol,
    /// `=;IFACE;PROTO;NAME;TYPE;DOMAIN;HOST;ADDRESS;PORT;TXT`.
    static func avahiBrowse(_ type: String) async throws -> [[String]] {
        let tool = try TestEnvironment.systemTool("avahi-browse", package: "avahi-utils")
        let browse = try ChildProcess(tool, ["-rpt", type])
        #expect(try await browse.waitForExit(seconds: 20) == 0, "\(browse.standardError)")
        return browse.standardOutput.split(separator: "\n").map { $0.split(separator: ";", omittingEmptySubsequences: false).map(String.init) }
            .filter { $0.first == "=" }
    }

    @Test func aListenersServiceIsSeenByAvahiBrowseAndWithdrawnOnCancel() async throws {
        try await AvahiDaemon.ensureRunning()
        let name = Self.uniqueName("listener")
        let listener = try NWListener(
            service: NWListener.Service(name: name, type: "_qecho._udp", txtRecord: NWTXTRecord(["v": "1"])),
            using: .quic(alpn: ["quic-echo"])
        )
        listener.newConnectionGroupHandler = { $0.cancel() }
        let changes = NIOLockedValueBox<[NWListener.ServiceRegistrationChange]>([])
        listener.serviceRegistrationUpdateHandler = { change in changes.withLockedValue { $0.append(change) } }
        listener.start(queue: DispatchQueue(label: "listener"))
        try #require(try await eventually(within: 10) { changes.withLockedValue { $0.count } == 1 })
        guard case .add(let endpoint) = changes.withLockedValue({ $0[0] }) else { throw SetupError("no .add: \(changes)") }
        #expect(endpoint == .service(name: name, type: "_qecho._udp", domain: "local.", interface: nil))
        let port = try #require(listener.port)

        let lines = try await Self.avahiBrowse("_qecho._udp").filter { $0.count >= 10 && $0[3] == name }
        #expect(!lines.isEmpty, "avahi-browse did not list \(name)")
        for line in lines {
            #expect(line[8] == "\(port.rawValue)")
            #expect(line[9].contains("\"v=1\""), "TXT: \(line[9])")
        }

        listener.cancel()
        try #require(try await eventually(within: 10) { changes.withLockedValue { $0.count } == 2 })
        guard case .remove(let removed) = changes.withLockedValue({ $0[1] }) else { throw SetupError("no .remove: \(changes)") }
        #expect(removed == endpoint)
        try #require(try await eventually(within: 10) { try await Self.avahiBrowse("_qecho._udp").allSatisfy { $0.count < 4 || $0[3] != name } })
    }

    @Test func aServicePublishedByAvahiPublishIsFoundAndATunnelToItEchoes() async throws {
        try await AvahiDaemon.ensureRunning()
        let server = try await EchoServerProcess()
        defer { server.process.stop() }
        let name = Self.uniqueName("quic-echo")
        let publish = try ChildProcess(
            try TestEnvironment.systemTool("avahi-publish", package: "avahi-utils"),
            ["-s", name, "_qecho._udp", "\(server.port)", "role=echo"]
        )
        defer { publish.stop() }
        // avahi-publish says "Established under name '…'" on stderr once the daemon has it.
        try #require(await eventually(within: 10) { publish.standardError.contains("Established") }, "\(publish.standardError)")

        let browser = NWBrowser(for: .bonjourWithTXTRecord(type: "_qecho._udp", domain: nil), using: NWParameters())
        let found = NIOLockedValueBox<NWBrowser.Result?>(nil)
        let addedChanges = NIOLockedValueBox(0)
        browser.browseResultsChangedHandler = { results, changes in
            for case .added(let result) in changes {
                guard case .service(name, _, _, _) = result.endpoint else { continue }
                addedChanges.withLockedValue { $0 += 1 }
                found.withLockedValue { $0 = result }
            }
        }
        browser.start(queue: DispatchQueue(label: "browser"))
        try #require(try await eventually(within: 10) { found.withLockedValue { $0 } != nil })
        #expect(browser.state == .ready)
        let result = try #require(found.withLockedValue { $0 })
        #expect(result.endpoint == .service(name: name, type: "_qecho._udp", domain: "local.", interface: nil))
        guard case .bonjour(let txt) = result.metadata else { throw SetupError("no TXT record in \(result.metadata)") }
        #expect(txt["role"] == "echo")
        #expect(result.interfaces.contains { $0.type == .loopback })
        #expect(browser.browseResults.contains(result))

        let options = NWProtocolQUIC.Options(alpn: ["quic-echo"])
        options.tls.certificateVerification = try .pinnedSHA256(hex: server.fingerprint)
        let group = NWConnectionGroup(with: NWMultiplexGroup(to: result.endpoint), using: NWParameters(quic: options))
        group.start(queue: DispatchQueue(label: "group"))
        try await within(10) { try await group.waitUntilReady() }
        let stream = try #require(NWConnection(from: group))
        stream.start(queue: DispatchQueue(label: "stream"))
        try await stream.send(content: Data("found by Bonjour".utf8), isComplete: true)
        var echoed = Data()
        while true {
            let (content, isComplete) = try await stream.receive()
            echoed += content ?? Data()
            if isComplete { break }
        }
        #expect(String(decoding: echoed, as: UTF8.self) == "found by Bonjour")
        group.cancel()

        // avahi-publish gone: the browser reports the removal.
        publish.stop()
        try #require(try await eventually(within: 10) { !browser.browseResults.contains { $0.endpoint == result.endpoint } })
        browser.cancel()
        #expect(addedChanges.withLockedValue { $0 } == 1)
    }

    @Test func aServiceNobodyAdvertisesFailsTheGroupWithATimeout() async throws {
        try await AvahiDaemon.ensureRunning()
        let options = NWProtocolQUIC.Options(alpn: ["quic-echo"])
        let endpoint = NWEndpoint.service(name: Self.uniqueName("nobody"), type: "_qecho._udp", domain: "local.", interface: nil)
        let group = NWConnectionGroup(with: NWMultiplexGroup(to: endpoint), using: NWParameters(quic: options))
        group.start(queue: DispatchQueue(label: "group"))
        await #expect(throws: NWError.dns(-65568)) { try await within(15) { try await group.waitUntilReady() } }
    }
}
