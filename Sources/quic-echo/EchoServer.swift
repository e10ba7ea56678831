import Dispatch
import Logging
import QuicTransport

/// The server half of the echo protocol (QuicTransport.docc/CommandLineTools.md, "The echo protocol").
struct EchoServer: Sendable {
    let logger: Logger

    func serve(_ group: NWConnectionGroup) async {
        let peer = group.remoteEndpoint.map { "\($0)" } ?? "?"
        logger.info("tunnel from \(peer)")
        let streams = group.inboundStreams
        group.setReceiveHandler { [logger] _, content, _ in
            // Unreliable by design (RFC 9221 §5): a datagram that cannot go back is only logged.
            group.send(content: content) { error in
                if let error { logger.debug("datagram from \(peer) not echoed: \(error)") }
            }
        }
        // One queue for the tunnel and its streams: their handlers are few (the echo awaits the
        // async methods, which do not use it), and a queue per stream cost one per stream.
        let queue = DispatchQueue(label: "quic-echo.tunnel")
        group.start(queue: queue)
        // Each stream's echo runs on the tunnel's thread: a receive or send that completes
        // resumes it there, with no hand-over to the global pool and back.
        let executor = group.taskExecutor
        await withDiscardingTaskGroup { tasks in
            for await stream in streams {
                tasks.addTask(executorPreference: executor) { await self.echo(stream, in: group, queue: queue) }
            }
        }
        logger.info("tunnel from \(peer) closed: \(group.state)")
    }

    /// Bidirectional: echo on the same stream. Unidirectional: echo on a new server stream.
    private func echo(_ inbound: NWConnection, in group: NWConnectionGroup, queue: DispatchQueue) async {
        let metadata = inbound.metadata(definition: NWProtocolQUIC.definition) as! NWProtocolQUIC.Metadata
        let outbound: NWConnection
        if metadata.streamType == .bidirectional {
            outbound = inbound
        } else {
            let options = NWProtocolQUIC.Options()
            options.direction = .unidirectional
            guard let stream = NWConnection(from: group, using: options) else {
                logger.debug("stream \(metadata.streamIdentifier): the tunnel ended before the echo stream opened")
                return
            }
            outbound = stream
            outbound.start(queue: queue)
        }
        inbound.start(queue: queue)
        do {
            while true {
                // Whatever has arrived, up to 1 MiB: each read and each send is a round trip to
                // the tunnel's loop, so 64 KiB reads made a bulk echo mostly thread handoffs.
                let (content, isComplete) = try await inbound.receive(minimumIncompleteLength: 1, maximumLength: 1 << 20)
                if content != nil || isComplete {
                    try await outbound.send(content: content, isComplete: isComplete)
                }
                if isComplete { break }
            }
        } catch let NWError.quic(error) where error.kind == .streamReset {
            let code = error.applicationErrorCode ?? 0
            logger.info("stream \(metadata.streamIdentifier) reset by peer with code \(code); resetting back")
            let outboundMetadata = outbound.metadata(definition: NWProtocolQUIC.definition) as! NWProtocolQUIC.Metadata
            outboundMetadata.applicationError = .init(code: code)
            outbound.cancel()
        } catch {
            logger.debug("stream \(metadata.streamIdentifier) ended: \(error)")
        }
    }
}
