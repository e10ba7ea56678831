import Logging
import NIOCore

/// Runs one `QUICConnectionCore` on an event loop: feeds it datagrams, flushes its packets to the
/// socket, arms its timer, and hands its events to the API layer.
///
/// Everything here happens on `eventLoop`; public handles post commands to it with `execute`.
// @unchecked Sendable: every stored property is read and written only on `eventLoop`; the one
// cross-thread entry point, `perform`, hops there first. For the same reason, and because no
// access to a property spans a call that can reach it again (hooks are read, then called), its
// plain state skips Swift's run-time exclusivity check, as the core's does: a pass read several.
package final class QUICConnectionDriver: @unchecked Sendable {
    package let eventLoop: QUICEventLoop
    package let core: QUICConnectionCore
    /// The sockets packets leave from: one, or two while a client migrates (RFC 9000 §9.2).
    /// The first is the default; a packet goes out of the one bound at its path's local address.
    @exclusivity(unchecked) private(set) var sockets: [QUICUDPSocket]
    /// Fires at the core's next deadline (`rearmTimer`); made in `init`, where it can name `self`.
    @exclusivity(unchecked) private var timer: QUICLoopAlarm?
    /// Where `timer` is set; `.max` when it is not.
    @exclusivity(unchecked) private var timerDeadline: UInt64 = .max
    /// A pass is queued on the loop (`schedulePass`), so another request for one is redundant.
    @exclusivity(unchecked) private var passScheduled = false
    @exclusivity(unchecked) private var finished = false
    /// The server endpoint has queued this driver for a pass after its read (`queueAfterRead`).
    @exclusivity(unchecked) var isQueuedAfterRead = false
    /// Receives the core's events after every input; set by the API layer.
    @exclusivity(unchecked) package var eventHandler: (([QUICConnectionEvent]) -> Void)?
    /// The server endpoint that created the core, if any: every event taken from the core goes
    /// to it too, so that it keeps its routes and limits in step (`QUICEndpointCore.handle`).
    @exclusivity(unchecked) var endpoint: QUICEndpointCore?
    /// Runs once the core reaches `.closed` and may be freed; the driver drops its hooks first.
    @exclusivity(unchecked) package var onFinished: ((QUICConnectionDriver) -> Void)?
    /// Runs for an application codec's own events, in every pass in which the codec asks for
    /// it (`QUICApplicationCodec.needsPass`): before the pass first writes, and after each
    /// write. Returns true when it queued work that needs writing (new requests, consumed data).
    @exclusivity(unchecked) package var afterPass: (() -> Bool)?

    init(core: QUICConnectionCore, socket: QUICUDPSocket, eventLoop: QUICEventLoop) {
        self.core = core
        self.sockets = [socket]
        self.eventLoop = eventLoop
        // Held strongly, as the other hooks hold their owners: the cycle ends when the
        // connection does (`checkFinished`) or is given up (`abandon`). A weak reference would
        // give the driver a side table, and every retain and release of it, several per pass,
        // would take the runtime's slow path.
        // The pass runs the core's timeout: every pass runs any that is due.
        timer = eventLoop.makeAlarm {
            self.timerDeadline = .max
            self.runPass()
        }
    }

    /// The monotonic clock the cores run on, in nanoseconds.
    package static func now() -> UInt64 { NIODeadline.now().uptimeNanoseconds }

    /// Feeds one datagram that the client socket received.
    func receive(_ datagram: UnsafeRawBufferPointer, path: QUICPath, ecn: UInt32) {
        eventLoop.assertInEventLoop()
        core.receive(datagram: datagram, path: path, ecn: ecn, now: Self.now())
    }

    /// One pass, after input, a timer or a command: runs a due timeout, reports events, writes
    /// what is ready, re-arms the timer.
    ///
    /// The events go first, so that what the application answers (an HTTP/3 response to the
    /// requests just read) leaves in the same packets as ngtcp2's ACK and flow-control frames.
    /// Writing first sent those frames in a small packet of their own ahead of every answer:
    /// under `h3load -c 1 -m 50`, most of the server's sends were such packets.
    ///
    /// Re-entrant calls (an event handler opening a stream, say) only ask the running pass to
    /// go round once more, so handlers never see events out of order.
    package func runPass() {
        eventLoop.assertInEventLoop()
        if servicing {
            serviceAgain = true
            return
        }
        servicing = true
        // A timer already due runs in this pass, whatever woke it: the core puts a deadline
        // less than a millisecond off to a millisecond after the latest pass
        // (`QUICConnectionCore.nextDeadline`), so passes closer together than that would
        // otherwise keep pushing it on.
        core.handleTimeout(now: Self.now())
        // What the input raised first; whatever the application queues now goes out below.
        _ = deliverEvents()
        repeat {
            serviceAgain = false
            flush()
            if deliverEvents() { serviceAgain = true }
        } while serviceAgain
        servicing = false
        rearmTimer()
        checkFinished()
    }

    /// Delivers the core's events to the endpoint and the handler, then runs the codec's pass. True when either
    /// had anything: handlers may have queued data or consumed some (which sends
    /// MAX_STREAM_DATA), so the pass writes again.
    private func deliverEvents() -> Bool {
        // Most passes record no connection event (a request or an ACK raises none).
        let hadEvents = core.hasEvents
        if hadEvents {
            // Taken even without a handler: the endpoint keeps its routes in step with them.
            let events = core.takeEvents()
            endpoint?.handle(events, of: core)
            eventHandler?(events)
        }
        // Asked first: most passes after a write find the codec with nothing new, and the
        // hook is a closure call with its context counted.
        var queued = false
        if core.applicationNeedsPass, let afterPass { queued = afterPass() }
        return hadEvents || queued
    }

    @exclusivity(unchecked) private var servicing = false
    @exclusivity(unchecked) private var serviceAgain = false

    /// Runs a pass once the loop has finished what it is doing now, and only one however often
    /// this is called meanwhile: answers produced by several tasks in one turn of the loop (the
    /// responses to a batch of requests) leave together, coalesced into as few packets as fit.
    /// Called from within a pass (by a handler that pass started), it has that pass go round
    /// once more instead.
    package func schedulePass() {
        if servicing {
            serviceAgain = true
            return
        }
        queuePass()
    }

    /// Queues one pass behind what the loop has to do now, reads included.
    private func queuePass() {
        guard !passScheduled else { return }
        passScheduled = true
        eventLoop.execute {
            self.passScheduled = false
            self.runPass()
        }
    }

    /// Runs `body` against the core on the loop, then runs a pass.
    package func perform(_ body: @escaping @Sendable (QUICConnectionCore) -> Void) {
        if eventLoop.inEventLoop {
            body(core)
            runPass()
        } else {
            eventLoop.execute {
                body(self.core)
                self.runPass()
            }
        }
    }

    /// Adds a socket for a path being validated; its packets leave from it.
    func addSocket(_ socket: QUICUDPSocket) {
        sockets.append(socket)
    }

    /// Stops sending from `socket` (its path was abandoned or replaced); the caller closes it.
    func removeSocket(_ socket: QUICUDPSocket) {
        sockets.removeAll { $0 === socket }
    }

    private func flush() {
        // Unowned: this driver and its sockets outlive the call (sockets come and go only in
        // event handlers, never during a write), and each counted capture cost a retain and a
        // release on every pass.
        unowned(unsafe) let primary = sockets[0]
        // Each batch leaves as it is emitted, so one scratch area serves every socket.
        let more = core.writePackets(now: Self.now(), scratch: primary.scratch) { [unowned(unsafe) self] bytes, segmentSize, path, ecn in
            // One socket (every server connection, a client not migrating) needs no search,
            // which retains each socket it looks at.
            guard sockets.count > 1 else { return primary.send(bytes, segmentSize: segmentSize, to: path.remote, ecn: ecn) }
            let socket = sockets.first { $0.localAddress == path.local } ?? primary
            socket.send(bytes, segmentSize: segmentSize, to: path.remote, ecn: ecn)
        }
        // The send quantum ran out: let reads in, then continue.
        if more { queuePass() }
    }

    /// Keeps the timer at the core's next deadline.
    ///
    /// ngtcp2's expiry moves on almost every pass (ACK delay, loss detection, idle timeout), and
    /// mostly later. The timer moves with it, to the deadline itself: a timer left earlier would
    /// wake the loop for nothing, and moving it (`QUICLoopAlarm`) costs no allocation.
    private func rearmTimer() {
        let deadline = core.nextDeadline
        guard deadline != timerDeadline else { return }
        timerDeadline = deadline
        // Lent, not counted: only `stopRunning` drops the alarm, and not from within these calls.
        guard let alarm = timer.map(Unmanaged.passUnretained) else { return }
        alarm._withUnsafeGuaranteedRef { alarm in
            if deadline == .max { alarm.cancel() } else { alarm.set(deadline: deadline) }
        }
    }

    /// Stops running the core without closing it (a connection attempt given up for another
    /// address): its timer stops and the hooks go, so nothing runs here again and the driver,
    /// with its core, is freed once its owner lets go.
    package func abandon() {
        eventLoop.assertInEventLoop()
        _ = stopRunning()
    }

    /// Once the core is closed nothing runs here again, so the driver lets go of every hook:
    /// each one holds its owner (a group, a connector, an HTTP/3 connection), and each owner
    /// holds this driver, so any hook kept would keep the core and its C objects forever.
    ///
    /// A core that is over but still in its closing or draining period has handed out its
    /// `.closed` event by now (the pass ends only when no events are left), so its C state goes
    /// at once (`releaseConnectionState()`); only the small remainder waits out the period.
    private func checkFinished() {
        guard !finished else { return }
        if core.isOver { core.releaseConnectionState() }
        guard core.state == .closed else { return }
        stopRunning()?(self)
    }

    /// Stops the timer and drops every hook, and with them the cycles they close; returns the
    /// `onFinished` hook it dropped, for a connection that ended to call.
    private func stopRunning() -> ((QUICConnectionDriver) -> Void)? {
        finished = true
        timer?.cancel()
        timer = nil
        timerDeadline = .max
        let finish = onFinished
        onFinished = nil
        eventHandler = nil
        afterPass = nil
        return finish
    }
}
