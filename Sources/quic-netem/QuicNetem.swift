import ArgumentParser
import Foundation
import Glibc

/// `quic-netem`: a user-space UDP relay that impairs the path between a QUIC client and server,
/// for kernels without netem. Clients talk to `--listen`; each client gets its own socket
/// towards `--upstream`, so the server sees one address per client, and `--rebind-every`
/// replaces it mid-flow as a NAT rebinding would (RFC 9000 §9.3).
@main
struct QuicNetem: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "quic-netem",
        abstract: "Relay UDP between a client and a server with delay, jitter, loss, reordering, duplication, corruption, a rate limit, blackholes and NAT rebinding.",
        discussion: """
            Impairments apply to both directions unless --direction says otherwise, and draw on one
            seeded generator, so a run with the same --seed and the same traffic repeats. On SIGINT or
            SIGTERM it prints what it did per direction and exits.
            """
    )

    @Option(help: "HOST:PORT to receive client datagrams on (port 0 picks one).")
    var listen = "127.0.0.1:0"

    @Option(help: "HOST:PORT of the server.")
    var upstream: String

    @Option(help: "One-way delay in milliseconds.")
    var delay: Double = 0

    @Option(help: "Extra delay drawn uniformly from 0...JITTER ms per datagram (reorders when larger than the gap between datagrams).")
    var jitter: Double = 0

    @Option(help: "Probability (0-1) of dropping a datagram.")
    var loss: Double = 0

    @Option(name: .customLong("burst-loss"), help: "P,LEN: with probability P a datagram starts a burst of LEN consecutive drops.")
    var burstLoss: String?

    @Option(help: "Probability of holding a datagram back by --reorder-delay so later ones overtake it.")
    var reorder: Double = 0

    @Option(name: .customLong("reorder-delay"), help: "How long a reordered datagram is held back, ms.")
    var reorderDelay: Double = 10

    @Option(help: "Probability of sending a datagram twice.")
    var duplicate: Double = 0

    @Option(help: "Probability of flipping one byte of a datagram.")
    var corrupt: Double = 0

    @Option(help: "Rate limit in Mbit/s per direction (0: none); datagrams queue behind it.")
    var rate: Double = 0

    @Option(help: "Queue limit in datagrams per direction behind the rate limit; past it, tail drop.")
    var queue = 1000

    @Option(help: "START:DURATION in seconds from the first datagram: drop everything in that window (repeatable).")
    var blackhole: [String] = []

    @Option(name: .customLong("rebind-every"), help: "Give each client a new source port towards the server every this many seconds.")
    var rebindEvery: Double?

    @Option(name: .customLong("rebind-linger"), help: "After a rebinding, keep delivering what the server still sends to the old port for this many seconds, as a NAT's old mapping lives until it times out (0: drop it at once).")
    var rebindLinger: Double = 0

    @Option(help: "Which traffic to impair: both, up (client to server) or down.")
    var direction = "both"

    @Option(help: "Seed for every random choice.")
    var seed: UInt64 = 1

    func validate() throws {
        guard SocketAddress(parsing: listen) != nil else { throw ValidationError("--listen takes HOST:PORT, not '\(listen)'") }
        guard SocketAddress(parsing: upstream) != nil else { throw ValidationError("--upstream takes HOST:PORT, not '\(upstream)'") }
        for (name, value) in [("loss", loss), ("reorder", reorder), ("duplicate", duplicate), ("corrupt", corrupt)] where !(0...1).contains(value) {
            throw ValidationError("--\(name) is a probability between 0 and 1, not \(value)")
        }
        if rebindLinger < 0 { throw ValidationError("--rebind-linger must not be negative") }
        if delay < 0 || jitter < 0 || rate < 0 || queue < 1 { throw ValidationError("--delay, --jitter and --rate must not be negative; --queue at least 1") }
        if let burstLoss, Impairments.parseBurst(burstLoss) == nil { throw ValidationError("--burst-loss takes P,LEN, e.g. 0.01,5") }
        for window in blackhole where Impairments.parseWindow(window) == nil {
            throw ValidationError("--blackhole takes START:DURATION in seconds, e.g. 2:2")
        }
        guard ["both", "up", "down"].contains(direction) else { throw ValidationError("--direction is both, up or down") }
    }

    func run() throws {
        signal(SIGPIPE, SIG_IGN)
        var impairments = Impairments(seed: seed)
        impairments.delay = delay / 1e3
        impairments.jitter = jitter / 1e3
        impairments.loss = loss
        impairments.burst = burstLoss.flatMap(Impairments.parseBurst)
        impairments.reorder = reorder
        impairments.reorderDelay = reorderDelay / 1e3
        impairments.duplicate = duplicate
        impairments.corrupt = corrupt
        impairments.bitsPerSecond = rate * 1e6
        impairments.queueLimit = queue
        impairments.blackholes = blackhole.compactMap(Impairments.parseWindow)
        let relay = try Relay(
            listen: SocketAddress(parsing: listen)!, upstream: SocketAddress(parsing: upstream)!,
            impairments: impairments, impairs: (up: direction != "down", down: direction != "up"),
            rebindEvery: rebindEvery, rebindLinger: rebindLinger
        )
        // Written unbuffered: scripts wait for this line to learn the port.
        FileHandle.standardOutput.write(Data("relaying \(relay.listenAddress) -> \(upstream)\n".utf8))
        relay.run()
        FileHandle.standardOutput.write(Data((relay.summary + "\n").utf8))
    }
}
