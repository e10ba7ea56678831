import ArgumentParser
import Foundation
import Logging
import QuicTransport

/// `quic-echo connect`: sends data through several streams, checks every echoed byte, and reports.
struct Connect: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Connect to an echo server and verify the echo.")

    @Argument(help: "Server host name or address.")
    var host: String

    @Argument(help: "Server UDP port.")
    var port: NWEndpoint.Port

    @Option(help: "Bidirectional streams to echo through.")
    var streams = 1

    @Option(help: "Unidirectional streams to echo through.")
    var uni = 0

    @Option(help: "Payload text (default: stdin when it is not a terminal, else a built-in text).")
    var data: String?

    @Option(help: "Read the payload from this file.")
    var file: String?

    @Option(name: .customLong("reset-code"), help: "Also reset one bidirectional and one unidirectional stream with this code, and expect the server to answer with the same code.")
    var resetCode: UInt64?

    @Option(help: "Send this many QUIC datagrams and expect each echoed.")
    var datagrams = 0

    @Option(help: "Trust this CA (PEM) instead of the system store.")
    var cacert: String?

    @Option(name: .customLong("pin-sha256"), help: "Accept only a certificate with this SHA-256 fingerprint (hex).")
    var pinSHA256: String?

    @Flag(name: [.customShort("k"), .customLong("insecure")], help: "Do not verify the server certificate.")
    var insecure = false

    @Option(help: "Server name for SNI and verification (default: the host when it is a name).")
    var sni: String?

    @Option(help: "Give up after this many seconds.")
    var timeout: Double = 10

    @OptionGroup var common: CommonOptions

    func validate() throws {
        if [cacert != nil, pinSHA256 != nil, insecure].filter({ $0 }).count > 1 {
            throw ValidationError("use only one of --cacert, --pin-sha256 and -k")
        }
        if data != nil && file != nil { throw ValidationError("use --data or --file, not both") }
        if streams < 0 || uni < 0 || datagrams < 0 { throw ValidationError("counts must not be negative") }
        if streams + uni == 0 && datagrams == 0 && resetCode == nil { throw ValidationError("nothing to send") }
    }

    func run() async throws {
        common.bootstrapLogging()
        let payload = try loadPayload()
        let options = try common.makeOptions()
        options.isDatagram = datagrams > 0
        options.tls.serverName = sni
        if let cacert {
            guard FileManager.default.isReadableFile(atPath: cacert) else { throw failure("cannot read CA file \(cacert)") }
            options.tls.certificateVerification = .caFile(cacert)
        } else if let pinSHA256 {
            do { options.tls.certificateVerification = try .pinnedSHA256(hex: pinSHA256) } catch { throw failure("\(error)") }
        } else if insecure {
            options.tls.certificateVerification = .insecure
        }

        let group = NWConnectionGroup(with: NWMultiplexGroup(to: .hostPort(host: .init(host), port: port)), using: NWParameters(quic: options))
        let collector = UnidirectionalCollector()
        group.newConnectionHandler = { stream in collector.accept(stream) }
        let datagramsReceived = group.datagrams
        let started = ContinuousClock.now
        group.start(queue: DispatchQueue(label: "quic-echo.client"))
        do {
            try await withDeadline(seconds: timeout) { try await group.waitUntilReady() }
        } catch {
            throw failure("cannot connect to \(host):\(port): \(error)")
        }
        let handshake = ContinuousClock.now - started
        let alpn = await group.negotiatedALPN ?? "?"

        var errors: [String] = []
        var bytes = 0
        do {
            bytes = try await withDeadline(seconds: timeout) {
                try await withThrowingTaskGroup(of: Int.self) { tasks in
                    for index in 0..<streams {
                        tasks.addTask { try await echoBidirectional(group, payload: payload, index: index) }
                    }
                    for index in 0..<uni {
                        tasks.addTask { try await echoUnidirectional(group, collector: collector, payload: payload, index: index) }
                    }
                    if let resetCode {
                        tasks.addTask { try await resetBidirectional(group, code: resetCode) }
                        tasks.addTask { try await resetUnidirectional(group, collector: collector, code: resetCode) }
                    }
                    if datagrams > 0 {
                        tasks.addTask { try await echoDatagrams(group, received: datagramsReceived, count: datagrams) }
                    }
                    var total = 0
                    for try await count in tasks { total += count }
                    return total
                }
            }
        } catch {
            errors.append("\(error)")
        }
        let statistics = await group.pathStatistics()
        let qlog = await group.qlogFilePath
        group.cancel()
        let rtt = statistics.map { String(format: "%.2f ms", Double($0.smoothedRTT.components.attoseconds) / 1e15 + Double($0.smoothedRTT.components.seconds) * 1e3) } ?? "?"
        print("""
            connected to \(host):\(port) alpn \(alpn) in \(format(handshake))
            streams: \(streams) bidirectional, \(uni) unidirectional\(resetCode.map { ", resets with code \($0)" } ?? ""), datagrams: \(datagrams)
            echoed \(bytes) bytes, smoothed RTT \(rtt)
            qlog: \(qlog ?? "(off; use --qlog-dir or QLOGDIR)")
            """)
        if !errors.isEmpty {
            for error in errors { FileHandle.standardError.write(Data("error: \(error)\n".utf8)) }
            throw ExitCode(1)
        }
        print("ok")
    }

    private func loadPayload() throws -> Data {
        if let data { return Data(data.utf8) }
        if let file {
            guard let contents = FileManager.default.contents(atPath: file) else { throw failure("cannot read \(file)") }
            return contents
        }
        if isatty(STDIN_FILENO) == 0 {
            return FileHandle.standardInput.readDataToEndOfFile()
        }
        return Data("hello from quic-echo over QUIC streams\n".utf8)
    }

    private func failure(_ message: String) -> any Error {
        FileHandle.standardError.write(Data("error: \(message)\n".utf8))
        return ExitCode(2)
    }

    private func format(_ duration: Duration) -> String {
        let (seconds, attoseconds) = duration.components
        return String(format: "%.1f ms", Double(seconds) * 1e3 + Double(attoseconds) / 1e15)
    }
}

/// Runs `body`, failing with a timeout error after `seconds`.
func withDeadline<T: Sendable>(seconds: Double, _ body: @escaping @Sendable () async throws -> T) async throws -> T {
    try await withThrowingTaskGroup(of: T.self) { tasks in
        tasks.addTask { try await body() }
        tasks.addTask {
            try await Task.sleep(for: .milliseconds(Int(seconds * 1000)))
            throw EchoError("timed out after \(seconds) s")
        }
        let result = try await tasks.next()!
        tasks.cancelAll()
        return result
    }
}

struct EchoError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

private func streamPayload(_ payload: Data, prefix: String) -> Data { Data(prefix.utf8) + payload }

/// Sends the payload with FIN on a new bidirectional stream and checks the echo byte for byte.
private func echoBidirectional(_ group: NWConnectionGroup, payload: Data, index: Int) async throws -> Int {
    let stream = NWConnection(from: group)
    stream.start(queue: DispatchQueue(label: "quic-echo.stream"))
    let sent = streamPayload(payload, prefix: "bidi-\(index):")
    async let sending: Void = stream.send(content: sent, isComplete: true)
    let echoed = try await stream.receiveMessage()
    try await sending
    guard echoed == sent else {
        throw EchoError("bidirectional stream \(index): echo differs (sent \(sent.count) bytes, got \(echoed.count))")
    }
    return echoed.count
}

/// Sends on a new unidirectional stream and waits for the server's unidirectional echo.
private func echoUnidirectional(_ group: NWConnectionGroup, collector: UnidirectionalCollector, payload: Data, index: Int) async throws -> Int {
    let options = NWProtocolQUIC.Options()
    options.direction = .unidirectional
    let stream = NWConnection(from: group, using: options)
    stream.start(queue: DispatchQueue(label: "quic-echo.stream"))
    let sent = streamPayload(payload, prefix: "uni-\(index):")
    try await stream.send(content: sent, isComplete: true)
    let echoed = try await collector.message(withPrefix: "uni-\(index):")
    guard echoed == sent else {
        throw EchoError("unidirectional stream \(index): echo differs (sent \(sent.count) bytes, got \(echoed.count))")
    }
    return echoed.count
}

/// Resets the sending side of a bidirectional stream with `code` and expects the server's reset to carry it.
private func resetBidirectional(_ group: NWConnectionGroup, code: UInt64) async throws -> Int {
    let stream = NWConnection(from: group)
    stream.start(queue: DispatchQueue(label: "quic-echo.stream"))
    let probe = Data("reset-probe".utf8)
    try await stream.send(content: probe, isComplete: false)
    var echoed = Data()
    while echoed.count < probe.count {
        let (content, _) = try await stream.receive(minimumIncompleteLength: 1, maximumLength: 65_536)
        echoed += content ?? Data()
    }
    stream.reset(applicationError: code)
    do {
        while true {
            let (_, isComplete) = try await stream.receive(minimumIncompleteLength: 1, maximumLength: 65_536)
            if isComplete { throw EchoError("bidirectional reset: the server finished the stream instead of resetting it") }
        }
    } catch let NWError.quic(error) where error.kind == .streamReset {
        guard error.applicationErrorCode == code else {
            throw EchoError("bidirectional reset: server reset with code \(error.applicationErrorCode ?? 0), expected \(code)")
        }
    }
    return 0
}

/// Resets a unidirectional stream with `code` and expects the paired server stream to be reset with it.
private func resetUnidirectional(_ group: NWConnectionGroup, collector: UnidirectionalCollector, code: UInt64) async throws -> Int {
    let options = NWProtocolQUIC.Options()
    options.direction = .unidirectional
    let stream = NWConnection(from: group, using: options)
    stream.start(queue: DispatchQueue(label: "quic-echo.stream"))
    try await stream.send(content: Data("uni-reset:".utf8), isComplete: false)
    let metadata = stream.metadata(definition: NWProtocolQUIC.definition) as! NWProtocolQUIC.Metadata
    // Let the server see the stream before it is reset.
    try await collector.firstBytes(withPrefix: "uni-reset:")
    metadata.applicationError = code
    stream.cancel()
    let seen = try await collector.resetCode(withPrefix: "uni-reset:")
    guard seen == code else { throw EchoError("unidirectional reset: server reset with code \(seen), expected \(code)") }
    return 0
}

/// Sends `count` datagrams and waits until each comes back unchanged.
private func echoDatagrams(_ group: NWConnectionGroup, received: AsyncStream<Data>, count: Int) async throws -> Int {
    var expected = Set((0..<count).map { Data("dgram-\($0)".utf8) })
    for datagram in expected { try await group.send(datagram: datagram) }
    var bytes = 0
    for await datagram in received {
        if expected.remove(datagram) != nil { bytes += datagram.count }
        if expected.isEmpty { return bytes }
    }
    throw EchoError("datagrams: \(expected.count) of \(count) never came back")
}
