import NIOConcurrencyHelpers
import NIOCore
import QuicTransport

/// Returns flow-control credit for body bytes the application has read (RFC 9000 §4.1), from
/// whatever thread read them, to the codec on its loop: once per loop turn, not once per chunk.
final class HTTP3FlowCredit: Sendable {
    private let eventLoop: any EventLoop
    private let pending = NIOLockedValueBox((credits: [Int64: Int](), scheduled: false))
    private let apply: @Sendable ([Int64: Int]) -> Void

    /// `apply` runs on `eventLoop` with the credit gathered per stream.
    init(eventLoop: any EventLoop, apply: @escaping @Sendable ([Int64: Int]) -> Void) {
        self.eventLoop = eventLoop
        self.apply = apply
    }

    func credit(streamID: Int64, bytes: Int) {
        let schedule = pending.withLockedValue { pending -> Bool in
            pending.credits[streamID, default: 0] += bytes
            defer { pending.scheduled = true }
            return !pending.scheduled
        }
        guard schedule else { return }
        eventLoop.execute {
            let credits = self.pending.withLockedValue { pending -> [Int64: Int] in
                defer {
                    pending.credits.removeAll()
                    pending.scheduled = false
                }
                return pending.credits
            }
            self.apply(credits)
        }
    }
}
