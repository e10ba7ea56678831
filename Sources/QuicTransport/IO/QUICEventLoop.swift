import CQuicLinux
import Dispatch
#if canImport(Glibc)
import Glibc
#endif
import NIOConcurrencyHelpers
import NIOCore

/// The event loop under every QUIC socket, a server worker's or a client's (`QUICClientLoops`):
/// one thread, `epoll` over its `QUICUDPSocket`s, a timer heap, and a task queue. It is a NIO
/// `EventLoop`, so futures, `NIOLoopBound`, scheduled tasks and `EventLoopTaskExecutor` work on
/// it as on NIO's own loops.
///
/// It exists because NIO's datagram channel costs a server more than the protocol does. For each
/// datagram NIO builds a `SocketAddress` (with `inet_ntop` and its `sprintf`) and an
/// `AddressedEnvelope`, and it closes the channel, and with it every connection of the worker,
/// on any send error but EMSGSIZE and EHOSTUNREACH. A `QUICUDPSocket` registered here reads
/// straight into QUIC's own address type and treats each send error as that one datagram's.
///
/// **Lifetime.** The thread runs as long as anything can still give the loop work: whatever
/// queues a task, schedules a timer or waits on a future holds this object, and each queued
/// task and pending timer holds it too. When the last reference goes, the thread ends. A
/// group that closes therefore never strands a future or a task on a loop that has stopped.
/// `shutdownGracefully` (for `EventLoopGroup`) stops it sooner: pending timers fail
/// (`EventLoopError.shutdown`), queued tasks run, and a task offered later is dropped, as NIO
/// drops it; a Swift job offered later (`enqueueOrRunElsewhere`) runs on the global executor.
package final class QUICEventLoop: EventLoop, Sendable {
    private let core: LoopCore

    /// Starts the loop's thread, named `name` (at most 15 bytes reach the kernel).
    ///
    /// `threadStack`, when given, is memory the caller owns and keeps until the thread has
    /// ended (`pthread_attr_setstack`). glibc puts a thread's descriptor, and so its `pthread_t`,
    /// at a fixed place in its stack; a test runs a new thread on the same memory to get the
    /// `pthread_t` of a loop that has stopped.
    package init(name: String, threadStack: UnsafeMutableRawBufferPointer? = nil) throws {
        core = try LoopCore(name: name, threadStack: threadStack)
    }

    deinit {
        // Nothing can queue work any more.
        core.stop(callback: nil)
    }

    package var inEventLoop: Bool { core.isCurrent }

    package func execute(_ task: @escaping @Sendable () -> Void) {
        _ = core.enqueue(task)
    }

    package func _executeIsolatedUnsafeUnchecked(_ task: @escaping () -> Void) {
        _ = core.enqueue(task)
    }

    /// Runs `job` on the loop, or, once the loop has shut down, on the global executor.
    package func enqueueOrRunElsewhere(_ job: UnownedJob, executor: UnownedTaskExecutor) {
        let accepted = core.enqueue(.job(job, executor))
        if !accepted { globalConcurrentExecutor.enqueue(job) }
    }

    package func scheduleTask<T>(deadline: NIODeadline, _ task: @escaping @Sendable () throws -> T) -> Scheduled<T> {
        schedule(deadline: deadline, task)
    }

    package func scheduleTask<T>(in delay: TimeAmount, _ task: @escaping @Sendable () throws -> T) -> Scheduled<T> {
        schedule(deadline: .now() + delay, task)
    }

    package func _scheduleTaskIsolatedUnsafeUnchecked<T>(deadline: NIODeadline, _ task: @escaping () throws -> T) -> Scheduled<T> {
        schedule(deadline: deadline, task)
    }

    package func _scheduleTaskIsolatedUnsafeUnchecked<T>(in delay: TimeAmount, _ task: @escaping () throws -> T) -> Scheduled<T> {
        schedule(deadline: .now() + delay, task)
    }

    private func schedule<T>(deadline: NIODeadline, _ task: @escaping () throws -> T) -> Scheduled<T> {
        let promise = makePromise(of: T.self)
        let timer = LoopTimer(
            // Timers fire on the loop, where the promise belongs.
            body: { do { promise.assumeIsolatedUnsafeUnchecked().succeed(try task()) } catch { promise.fail(error) } },
            onShutdown: { promise.fail(EventLoopError.shutdown) }
        )
        guard core.schedule(timer, deadline: deadline.uptimeNanoseconds) else {
            promise.fail(EventLoopError.shutdown)
            return Scheduled(promise: promise) {}
        }
        let core = self.core
        return Scheduled(promise: promise) { core.cancel(timer) }
    }

    package func preconditionInEventLoop(file: StaticString, line: UInt) {
        precondition(inEventLoop, "not on the QUIC event loop", file: file, line: line)
    }

    package func preconditionNotInEventLoop(file: StaticString, line: UInt) {
        precondition(!inEventLoop, "on the QUIC event loop", file: file, line: line)
    }

    package func shutdownGracefully(queue: DispatchQueue, _ callback: @escaping @Sendable ((any Error)?) -> Void) {
        core.stop(callback: (queue, callback))
    }

    package func next() -> any EventLoop { self }
    package func any() -> any EventLoop { self }
    package func makeIterator() -> EventLoopIterator { EventLoopIterator([self]) }

    /// Watches `descriptor` for reads (and for writes while `setWritable` asks), calling `source`
    /// on the loop. Call on the loop.
    func register(_ descriptor: CInt, source: any QUICEventLoopSource) throws {
        preconditionInEventLoop(file: #fileID, line: #line)
        try core.register(descriptor, source: source)
    }

    /// Asks for (or stops asking for) a call when `descriptor` can be written again. Call on the loop.
    func setWritable(_ descriptor: CInt, interested: Bool) {
        core.setWritable(descriptor, interested: interested)
    }

    /// Stops watching `descriptor`; call before closing it, on the loop.
    func deregister(_ descriptor: CInt) {
        core.deregister(descriptor)
    }

    /// An alarm that runs `body` on this loop at whatever deadline it was last set to.
    package func makeAlarm(_ body: @escaping () -> Void) -> QUICLoopAlarm {
        QUICLoopAlarm(core: core, body: body)
    }
}

/// One timer kept at a deadline that moves, as libev's `ev_timer_again` keeps one: a
/// connection's next expiry (ngtcp2's), which moves on almost every pass and mostly later.
///
/// A timer scheduled once and left early when the deadline moved later woke the loop for
/// nothing: about 1.5 extra wake-ups per short connection, each a trip through the kernel,
/// 2.6 timeouts per connection against gtlsserver's 1.1. Moving this one costs a sift in the
/// loop's heap and no allocation. Set and cancel it on the loop.
package final class QUICLoopAlarm {
    private let core: LoopCore
    private let timer: LoopTimer

    fileprivate init(core: LoopCore, body: @escaping () -> Void) {
        self.core = core
        timer = LoopTimer(body: body, onShutdown: {})
    }

    /// Runs the body at `deadline` (monotonic nanoseconds) instead of any deadline set before;
    /// once, unless set again.
    package func set(deadline: UInt64) {
        _ = core.schedule(timer, deadline: deadline)
    }

    package func cancel() {
        core.cancel(timer)
    }

    deinit { core.cancel(timer) }
}

/// The loops client connections run on: one per core, made on first use, for the life of the
/// process (as NIO's singleton group). Each connection stays on the loop it was given.
package enum QUICClientLoops {
    private static let loops: [QUICEventLoop] = (0..<System.coreCount).map { index in
        do {
            return try QUICEventLoop(name: "quic-client-\(index)")
        } catch {
            fatalError("cannot start a QUIC client event loop: \(error)")
        }
    }
    private static let nextIndex = NIOLockedValueBox(0)

    /// The next loop, round-robin.
    package static func next() -> QUICEventLoop {
        let index = nextIndex.withLockedValue { index in
            defer { index = (index + 1) % loops.count }
            return index
        }
        return loops[index]
    }
}

/// What the loop's queue holds, in the order it was queued: a closure, or a Swift job for an
/// executor over the loop (`EventLoopTaskExecutor`), held as it is, where a closure around it
/// would be allocated for every job.
private enum LoopWork {
    case task(() -> Void)
    case job(UnownedJob, UnownedTaskExecutor)

    func run() {
        switch self {
        case .task(let task): task()
        case .job(let job, let executor): job.runSynchronously(on: executor)
        }
    }
}

/// Marks a thread as a loop's: its value is the `LoopCore` running on it (`isCurrent`).
private let loopThreadKey: pthread_key_t = {
    var key = pthread_key_t()
    let created = pthread_key_create(&key, nil)
    precondition(created == 0, "pthread_key_create failed: \(created)")
    return key
}()

/// The thread, its `epoll` set, its timers and its queue. It knows nothing of the
/// `QUICEventLoop` in front of it, so the tasks and timers it holds keep that alive, not itself.
// @unchecked Sendable: `queue`, `timers`, `wakeupPending`, `state` and `shutdownCallbacks` are
// guarded by `lock`; `sources` is touched only on the loop's thread. The lock and the thread
// already keep accesses apart, and none spans a call that can reach the same property (the
// closures passed under the lock fill locals), so they skip Swift's run-time exclusivity check:
// every task queued and timer moved paid it.
private final class LoopCore: @unchecked Sendable {
    private let epoll: CInt
    private let wakeupDescriptor: CInt
    private let lock = NIOLock()
    @exclusivity(unchecked) private var queue: [LoopWork] = []
    @exclusivity(unchecked) private var timers = TimerHeap()
    @exclusivity(unchecked) private var wakeupPending = false
    @exclusivity(unchecked) private var state = State.running
    @exclusivity(unchecked) private var shutdownCallbacks: [(DispatchQueue, @Sendable ((any Error)?) -> Void)] = []
    /// The descriptors registered for readiness, and who handles them (a loop holds one or two).
    @exclusivity(unchecked) private var sources: [(descriptor: CInt, source: any QUICEventLoopSource)] = []

    private enum State { case running, stopping, stopped }

    init(name: String, threadStack: UnsafeMutableRawBufferPointer?) throws {
        epoll = epoll_create1(CInt(EPOLL_CLOEXEC))
        guard epoll >= 0 else { throw IOError(errnoCode: errno, reason: "epoll_create1") }
        wakeupDescriptor = eventfd(0, CInt(EFD_CLOEXEC | EFD_NONBLOCK))
        guard wakeupDescriptor >= 0 else {
            let code = errno
            Glibc.close(epoll)
            throw IOError(errnoCode: code, reason: "eventfd")
        }
        var event = epoll_event()
        event.events = EPOLLIN.rawValue
        event.data.fd = wakeupDescriptor
        guard epoll_ctl(epoll, EPOLL_CTL_ADD, wakeupDescriptor, &event) == 0 else {
            let code = errno
            Glibc.close(epoll)
            Glibc.close(wakeupDescriptor)
            throw IOError(errnoCode: code, reason: "epoll_ctl")
        }
        var attributes = pthread_attr_t()
        pthread_attr_init(&attributes)
        defer { pthread_attr_destroy(&attributes) }
        if let threadStack {
            let stackSet = pthread_attr_setstack(&attributes, threadStack.baseAddress, threadStack.count)
            guard stackSet == 0 else {
                Glibc.close(epoll)
                Glibc.close(wakeupDescriptor)
                throw IOError(errnoCode: stackSet, reason: "pthread_attr_setstack")
            }
        }
        // The thread holds the loop until `run` returns; it needs nothing else from `init`.
        let loop = Unmanaged.passRetained(self)
        var thread = pthread_t()
        let created = pthread_create(&thread, &attributes, { raw in
            Unmanaged<LoopCore>.fromOpaque(raw!).takeRetainedValue().run()
            return nil
        }, loop.toOpaque())
        guard created == 0 else {
            loop.release()
            Glibc.close(epoll)
            Glibc.close(wakeupDescriptor)
            throw IOError(errnoCode: created, reason: "pthread_create")
        }
        pthread_detach(thread)
        _ = cqs_set_thread_name(thread, String(name.utf8.prefix(15))!)
    }

    /// Whether the caller runs on this loop's thread. Asked of a thread-specific value, not of
    /// `pthread_self()`: a `pthread_t` is reused, and once a stopped loop's thread has exited a
    /// new thread often gets the same one (glibc hands it the exited thread's cached stack, and
    /// the descriptor at its top), so it passed for the loop's thread. A new thread's value is
    /// nil.
    var isCurrent: Bool { pthread_getspecific(loopThreadKey) == Unmanaged.passUnretained(self).toOpaque() }

    /// Queues `task`; false when the loop has stopped and the task is dropped.
    func enqueue(_ task: @escaping () -> Void) -> Bool {
        enqueue(.task(task))
    }

    /// Queues `work`; false when the loop has stopped and the work is dropped.
    func enqueue(_ work: LoopWork) -> Bool {
        let onLoop = isCurrent
        let (accepted, wake): (Bool, Bool) = lock.withLock {
            guard state != .stopped else { return (false, false) }
            queue.append(work)
            return (true, wakeIfNeeded(onLoop: onLoop))
        }
        if wake { signalWakeup() }
        return accepted
    }

    /// Called with `lock` held: whether the loop must be woken to see new work.
    private func wakeIfNeeded(onLoop: Bool) -> Bool {
        guard !onLoop, !wakeupPending else { return false }
        wakeupPending = true
        return true
    }

    private func signalWakeup() {
        var one: UInt64 = 1
        _ = Glibc.write(wakeupDescriptor, &one, 8)
    }

    /// Adds `timer`, or moves it to `deadline` if it is in already; false when the loop has
    /// stopped.
    func schedule(_ timer: LoopTimer, deadline: UInt64) -> Bool {
        let onLoop = isCurrent
        let (accepted, wake): (Bool, Bool) = lock.withLock {
            guard state != .stopped else { return (false, false) }
            timers.push(timer, deadline: deadline)
            return (true, wakeIfNeeded(onLoop: onLoop))
        }
        if wake { signalWakeup() }
        return accepted
    }

    func cancel(_ timer: LoopTimer) {
        lock.withLock { timers.remove(timer) }
    }

    /// Ends the loop once its queue is empty; `callback` runs when it has.
    func stop(callback: (DispatchQueue, @Sendable ((any Error)?) -> Void)?) {
        let onLoop = isCurrent
        let (alreadyStopped, wake): (Bool, Bool) = lock.withLock {
            if state == .stopped { return (true, false) }
            state = .stopping
            if let callback { shutdownCallbacks.append(callback) }
            return (false, wakeIfNeeded(onLoop: onLoop))
        }
        if wake { signalWakeup() }
        if alreadyStopped, let (callbackQueue, callback) = callback { callbackQueue.async { callback(nil) } }
    }

    func register(_ descriptor: CInt, source: any QUICEventLoopSource) throws {
        var event = epoll_event()
        event.events = EPOLLIN.rawValue
        event.data.fd = descriptor
        guard epoll_ctl(epoll, EPOLL_CTL_ADD, descriptor, &event) == 0 else {
            throw IOError(errnoCode: errno, reason: "epoll_ctl(EPOLL_CTL_ADD)")
        }
        sources.append((descriptor, source))
    }

    func setWritable(_ descriptor: CInt, interested: Bool) {
        var event = epoll_event()
        event.events = EPOLLIN.rawValue | (interested ? EPOLLOUT.rawValue : 0)
        event.data.fd = descriptor
        _ = epoll_ctl(epoll, EPOLL_CTL_MOD, descriptor, &event)
    }

    func deregister(_ descriptor: CInt) {
        _ = epoll_ctl(epoll, EPOLL_CTL_DEL, descriptor, nil)
        sources.removeAll { $0.descriptor == descriptor }
    }

    fileprivate func run() {
        pthread_setspecific(loopThreadKey, Unmanaged.passUnretained(self).toOpaque())
        // Plain memory, not an array: the loop writes it on every turn, and an array's write
        // access checks that the buffer is unshared each time.
        let events = UnsafeMutableBufferPointer<epoll_event>.allocate(capacity: 64)
        events.initialize(repeating: epoll_event())
        defer { events.deallocate() }
        var running: [LoopWork] = []
        var due: [() -> Void] = []
        while true {
            // How long to sleep: not at all with tasks queued, else until the next timer.
            let (hasTasks, nextDeadline, stopping): (Bool, UInt64?, Bool) = lock.withLock {
                (!queue.isEmpty, timers.nextDeadline, state == .stopping)
            }
            if stopping && !hasTasks { break }
            let timeout: UInt64? = (hasTasks || stopping) ? 0 : nextDeadline.map { deadline in
                let now = NIODeadline.now().uptimeNanoseconds
                return deadline > now ? deadline - now : 0
            }
            let count = wait(for: events, timeout: timeout)
            for index in 0..<count {
                let event = events[index]
                let descriptor = event.data.fd
                if descriptor == wakeupDescriptor {
                    var value: UInt64 = 0
                    _ = Glibc.read(wakeupDescriptor, &value, 8)
                    continue
                }
                guard let source = sources.first(where: { $0.descriptor == descriptor })?.source else { continue }
                if event.events & EPOLLOUT.rawValue != 0 { source.writable() }
                if event.events & (EPOLLIN.rawValue | EPOLLERR.rawValue | EPOLLHUP.rawValue) != 0 { source.readable() }
            }
            // Timers that are due, then the tasks queued so far (not those they queue: reads
            // come in between).
            let now = NIODeadline.now().uptimeNanoseconds
            lock.withLock {
                timers.popDue(before: now) { due.append($0.body) }
                swap(&queue, &running)
                wakeupPending = false
            }
            // Usually both are empty, and emptying an empty array still costs a generic
            // `replaceSubrange` call.
            if !due.isEmpty {
                for body in due { body() }
                due.removeAll(keepingCapacity: true)
            }
            if !running.isEmpty {
                for work in running { work.run() }
                running.removeAll(keepingCapacity: true)
            }
        }
        finish()
    }

    /// Whether the kernel has `epoll_pwait2` (5.11 and later; valgrind 3.19 lacks it too).
    private var hasPreciseWait = true

    /// Waits for readiness at most `timeout` nanoseconds (nil: until something happens).
    /// Without `epoll_pwait2` the wait is `epoll_wait`'s, rounded up to whole milliseconds.
    private func wait(for events: UnsafeMutableBufferPointer<epoll_event>, timeout: UInt64?) -> Int {
        if hasPreciseWait {
            let count: CInt
            if let timeout {
                var interval = timespec(tv_sec: Int(timeout / 1_000_000_000), tv_nsec: Int(timeout % 1_000_000_000))
                count = cqs_epoll_pwait2(epoll, events.baseAddress, CInt(events.count), &interval)
            } else {
                count = cqs_epoll_pwait2(epoll, events.baseAddress, CInt(events.count), nil)
            }
            if count >= 0 { return Int(count) }
            guard errno == ENOSYS else { return 0 }
            hasPreciseWait = false
        }
        let milliseconds = timeout.map { CInt(clamping: ($0 + 999_999) / 1_000_000) } ?? -1
        return Int(max(epoll_wait(epoll, events.baseAddress, CInt(events.count), milliseconds), 0))
    }

    /// Fails the timers left, runs what that queues, and lets the shutdown callers know.
    private func finish() {
        var left: [() -> Void] = []
        lock.withLock { timers.popDue(before: .max) { left.append($0.onShutdown) } }
        for fail in left { fail() }
        var callbacks: [(DispatchQueue, @Sendable ((any Error)?) -> Void)] = []
        while true {
            let tasks: [LoopWork] = lock.withLock {
                let tasks = queue
                queue.removeAll()
                if tasks.isEmpty {
                    state = .stopped
                    callbacks = shutdownCallbacks
                    shutdownCallbacks.removeAll()
                }
                return tasks
            }
            if tasks.isEmpty { break }
            for work in tasks { work.run() }
        }
        sources.removeAll()
        Glibc.close(epoll)
        Glibc.close(wakeupDescriptor)
        for (callbackQueue, callback) in callbacks { callbackQueue.async { callback(nil) } }
    }
}

/// What a `QUICEventLoop` calls when a registered descriptor is ready.
protocol QUICEventLoopSource: AnyObject {
    func readable()
    func writable()
}

/// A scheduled task.
// @unchecked Sendable: `heapIndex` is read and written only under the loop's lock (`TimerHeap`
// lives behind it); `body` and `onShutdown` never change.
private final class LoopTimer: @unchecked Sendable {
    let body: () -> Void
    /// Fails the task's promise when the loop shuts down first.
    let onShutdown: () -> Void
    /// Where the timer sits in the heap; -1 when it is not in it. The lock keeps its accesses
    /// apart, so it skips the run-time exclusivity check every sift would pay.
    @exclusivity(unchecked) var heapIndex = -1

    init(body: @escaping () -> Void, onShutdown: @escaping () -> Void) {
        self.body = body
        self.onShutdown = onShutdown
    }
}

/// Timers by deadline, and by the order they were scheduled for equal deadlines. Each timer
/// knows its place in the heap, so taking one out (a connection's timer re-armed earlier) costs
/// O(log n) and no search, however many connections the loop holds.
///
/// The keys sit in the heap's own entries, so a sift compares contiguous memory instead of
/// reading a timer object per comparison: with a timer for each of a thousand connections,
/// those reads were cache misses that made sifting show in a server's profile under churn. Entries
/// move into a hole rather than by swaps, so each moved timer's index is written once.
///
/// The heap holds one reference to each timer in it, taken when the timer goes in and given up
/// when it comes out; the entries themselves hold none, so moving one costs no reference
/// counting. Every connection re-arms its timer after each pass, and with counted entries that
/// took four retains and four releases.
private struct TimerHeap: ~Copyable {
    private struct Entry {
        var deadline: UInt64
        var sequence: UInt64
        var timer: Unmanaged<LoopTimer>

        func precedes(_ other: Entry) -> Bool {
            deadline < other.deadline || (deadline == other.deadline && sequence < other.sequence)
        }

        /// The timer's place in the heap, kept in the timer so that it is found without a search.
        var index: Int {
            get { timer._withUnsafeGuaranteedRef { $0.heapIndex } }
            nonmutating set { timer._withUnsafeGuaranteedRef { $0.heapIndex = newValue } }
        }
    }

    private var heap: [Entry] = []
    private var nextSequence: UInt64 = 0

    deinit {
        for entry in heap { entry.timer.release() }
    }

    var nextDeadline: UInt64? { heap.first?.deadline }

    /// Adds `timer` at `deadline`, or moves it there if it is in already (after the timers
    /// already due then, as a new one would go).
    mutating func push(_ timer: LoopTimer, deadline: UInt64) {
        let sequence = nextSequence
        nextSequence += 1
        if let index = position(of: timer) {
            let earlier = heap.withUnsafeMutableBufferPointer { heap in
                let earlier = deadline < heap[index].deadline
                heap[index].deadline = deadline
                heap[index].sequence = sequence
                return earlier
            }
            if earlier { siftUp(index) } else { siftDown(index) }
            return
        }
        heap.append(Entry(deadline: deadline, sequence: sequence, timer: .passRetained(timer)))
        siftUp(heap.count - 1)
    }

    /// Takes `timer` out, if it is still in; it holds its task and the loop until then.
    mutating func remove(_ timer: LoopTimer) {
        guard let index = position(of: timer) else { return }
        timer.heapIndex = -1
        let removed = heap[index].timer
        let last = heap.removeLast()
        if index < heap.count {
            heap[index] = last
            siftDown(index)
            siftUp(last.index)
        }
        removed.release()
    }

    /// Removes every timer due at `now`, earliest first, passing each to `take`.
    mutating func popDue(before now: UInt64, _ take: (LoopTimer) -> Void) {
        while let first = heap.first, first.deadline <= now {
            first.index = -1
            let last = heap.removeLast()
            if !heap.isEmpty {
                heap[0] = last
                siftDown(0)
            }
            take(first.timer.takeRetainedValue())
        }
    }

    /// Where `timer` sits, if it is in.
    private func position(of timer: LoopTimer) -> Int? {
        let index = timer.heapIndex
        guard index >= 0, index < heap.count, heap[index].timer.toOpaque() == Unmanaged.passUnretained(timer).toOpaque() else {
            return nil
        }
        return index
    }

    // The sifts work on the entries' memory: a write through the array checked that its
    // buffer was unshared each time (a runtime call, as each entry moved also writes to its
    // timer), about seven checks for every timer re-armed.

    private mutating func siftUp(_ start: Int) {
        heap.withUnsafeMutableBufferPointer { heap in
            let entry = heap[start]
            var hole = start
            while hole > 0 {
                let parent = (hole - 1) / 2
                guard entry.precedes(heap[parent]) else { break }
                heap[hole] = heap[parent]
                heap[hole].index = hole
                hole = parent
            }
            heap[hole] = entry
            entry.index = hole
        }
    }

    private mutating func siftDown(_ start: Int) {
        heap.withUnsafeMutableBufferPointer { heap in
            let entry = heap[start]
            var hole = start
            while true {
                let left = 2 * hole + 1
                guard left < heap.count else { break }
                var smallest = left
                if left + 1 < heap.count, heap[left + 1].precedes(heap[left]) { smallest = left + 1 }
                guard heap[smallest].precedes(entry) else { break }
                heap[hole] = heap[smallest]
                heap[hole].index = hole
                hole = smallest
            }
            heap[hole] = entry
            entry.index = hole
        }
    }
}
