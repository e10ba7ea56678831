import NIOCore
@_spi(StreamTable) import QuicTransport
import Synchronization

/// Returns flow-control credit for body bytes the application has read (RFC 9000 §4.1), from
/// whatever thread read them, to the codec on its loop: once per loop turn, not once per chunk.
final class HTTP3FlowCredit: Sendable {
    private struct Pending: Sendable {
        var credits = QUICStreamTable<Int>()
        var scheduled = false
        /// Nil once detached.
        var apply: (@Sendable ([(streamID: Int64, value: Int)]) -> Void)?
    }

    private let eventLoop: any EventLoop
    private let pending: Mutex<Pending>

    /// `apply` runs on `eventLoop` with the credit gathered per stream.
    init(eventLoop: any EventLoop, apply: @escaping @Sendable ([(streamID: Int64, value: Int)]) -> Void) {
        self.eventLoop = eventLoop
        self.pending = Mutex(Pending(apply: apply))
    }

    func credit(streamID: Int64, bytes: Int) {
        let schedule = pending.withLock { pending -> Bool in
            guard pending.apply != nil else { return false }
            pending.credits[streamID] = (pending.credits[streamID] ?? 0) + bytes
            defer { pending.scheduled = true }
            return !pending.scheduled
        }
        guard schedule else { return }
        eventLoop.execute {
            let (credits, apply) = self.pending.withLock { pending in
                defer {
                    pending.credits.removeAll()
                    pending.scheduled = false
                }
                return (pending.credits.entries, pending.apply)
            }
            apply?(credits)
        }
    }

    /// Lets go of `apply` and whatever it holds, which lets its owner hold it strongly: the
    /// connection, once it is over. Credit given after that is dropped, as it has nowhere to go.
    func detach() {
        pending.withLock { pending in
            pending.apply = nil
            pending.credits.removeAll()
        }
    }
}
