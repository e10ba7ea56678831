import Dispatch
import NIOConcurrencyHelpers

/// The state every public handle reports, with its update handler, the caller's queue and the
/// `AsyncStream` observers: one lock, one place that decides when a state is final.
///
/// Once a final state has been delivered the handler is released, as Network.framework releases a
/// cancelled connection's handlers: handlers routinely capture their own connection, and holding
/// them past the end would keep the connection, its core and its C objects alive for good.
// @unchecked Sendable: every stored property is guarded by `lock`. The lock already keeps
// accesses apart, and no closure run under it reaches the property it was called for (`isFinal`
// only looks at a state), so they skip Swift's run-time exclusivity check: a stream's states
// paid about six of them a stream.
final class ObservableState<State: Equatable & Sendable>: @unchecked Sendable {
    private let lock = NIOLock()
    @exclusivity(unchecked) private var value: State
    @exclusivity(unchecked) private var queue: DispatchQueue?
    @exclusivity(unchecked) private var handler: (@Sendable (State) -> Void)?
    @exclusivity(unchecked) private var continuations: [AsyncStream<State>.Continuation] = []
    private let isFinal: @Sendable (State) -> Bool

    init(_ initial: State, isFinal: @escaping @Sendable (State) -> Bool) {
        value = initial
        self.isFinal = isFinal
    }

    var current: State { lock.withLock { value } }

    var updateHandler: (@Sendable (State) -> Void)? {
        get { lock.withLock { handler } }
        // After a final state nothing would call it, so it is not kept.
        set { lock.withLock { handler = isFinal(value) ? nil : newValue } }
    }

    /// The queue given to `start(queue:)`, where handlers and completions run.
    func setQueue(_ newQueue: DispatchQueue) { lock.withLock { queue = newQueue } }

    /// The queue given to `start(queue:)`, or nil before it.
    var startQueue: DispatchQueue? { lock.withLock { queue } }

    /// Runs `body` on the caller's queue, or a global one before `start(queue:)`.
    func callback(_ body: @escaping @Sendable () -> Void) {
        (lock.withLock { queue } ?? DispatchQueue.global()).async(execute: body)
    }

    /// Runs a completion where `delivery` says: on the caller's queue (`callback`), or at once,
    /// on the loop that completes it.
    func deliver(_ delivery: CompletionDelivery, _ body: @escaping @Sendable () -> Void) {
        if delivery == .loop { body() } else { callback(body) }
    }

    /// Moves to `new` unless already there or in a final state; tells the handler and observers.
    func update(_ new: State) {
        let (changed, handler, observers) = lock.withLock { () -> (Bool, (@Sendable (State) -> Void)?, [AsyncStream<State>.Continuation]) in
            guard value != new, !isFinal(value) else { return (false, nil, []) }
            value = new
            let delivery = (true, self.handler, continuations)
            if isFinal(new) {
                self.handler = nil
                continuations.removeAll()
            }
            return delivery
        }
        guard changed else { return }
        if let handler { callback { handler(new) } }
        for observer in observers {
            observer.yield(new)
            if isFinal(new) { observer.finish() }
        }
    }

    /// The current state, then every change; finishes after a final state.
    var stream: AsyncStream<State> {
        AsyncStream { continuation in
            lock.withLock {
                continuation.yield(value)
                if isFinal(value) { continuation.finish() } else { continuations.append(continuation) }
            }
        }
    }
}

/// Where a send's or a receive's completion runs. Network.framework runs it on the queue given
/// to `start(queue:)`, and so do the completion-handler methods here. The async methods'
/// completions only resume a continuation, which hands the task to its executor: they run on
/// the tunnel's loop, for a hop through the queue's thread first would be one more thread
/// handoff per call, and would buy no order a resumed task could observe.
enum CompletionDelivery {
    case queue, loop
}
