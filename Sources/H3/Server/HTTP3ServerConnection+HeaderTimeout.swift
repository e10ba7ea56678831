import Logging
import NIOCore
import QuicTransport

/// The request header timer (RFC 9114 §10.5): server policy, run on the codec's record of the
/// request streams still waiting for their header section (`HTTP3AwaitedRequestHeads`).
extension HTTP3ServerConnection {
    /// Arms the request header timer for the oldest request stream still waiting for its header
    /// section, unless it is armed already.
    func armRequestHeaderTimer(now: UInt64) {
        guard let timeout = requestHeaderTimeout, requestHeaderTimer == nil,
            let oldest = codec?.oldestAwaitingRequestHead
        else { return }
        let due = oldest &+ timeout
        let delay = TimeAmount.nanoseconds(Int64(clamping: due > now ? due - now : 0))
        requestHeaderTimer = driver.eventLoop.scheduleTask(in: delay) { self.resetLateRequestHeads() }
    }

    /// Slowloris (RFC 9114 §10.5): request streams whose header section has not arrived within
    /// `requestHeaderTimeout` are reset with H3_REQUEST_INCOMPLETE (§4.1.2).
    private func resetLateRequestHeads() {
        requestHeaderTimer = nil
        guard let codec, let timeout = requestHeaderTimeout else { return }
        let now = QUICConnectionDriver.now()
        let late = codec.requestHeads(openedBefore: now > timeout ? now - timeout : 0)
        if !late.isEmpty {
            logger.info("reset requests whose header section did not arrive in time", metadata: ["streams": "\(late)"])
            for streamID in late { codec.cancel(streamID: streamID, code: .requestIncomplete) }
            driver.runPass()
        }
        armRequestHeaderTimer(now: now)
    }
}
