import Foundation
import Glibc
import Logging
import NIOConcurrencyHelpers
import NIOCore
import QuicTestSupport
import CQuicLinux
import CQuicShims
import QuicTransport
import Testing

/// A server worker's own event loop (`QUICEventLoop`) and its UDP socket (`QUICUDPSocket`), on
/// real loopback sockets: what NIO's loops promise (order, cancellation, shutdown), and what a
/// QUIC socket must carry (sender, ECN both ways, GRO and GSO batches), with a send error
/// costing only its own batch.
@Suite("Worker event loop", .timeLimit(TestEnvironment.minutes(1)))
struct WorkerEventLoopTests {
    @Test func timersRunInDeadlineOrderAndCancelledOnesNever() async throws {
        let loop = try QUICEventLoop(name: "test-timers")
        let order = NIOLockedValueBox<[Int]>([])
        let third = loop.scheduleTask(in: .milliseconds(60)) { order.withLockedValue { $0.append(3) } }
        let first = loop.scheduleTask(in: .milliseconds(20)) { order.withLockedValue { $0.append(1) } }
        let second = loop.scheduleTask(in: .milliseconds(40)) { order.withLockedValue { $0.append(2) } }
        let cancelled = loop.scheduleTask(in: .milliseconds(30)) { order.withLockedValue { $0.append(99) } }
        cancelled.cancel()
        try await first.futureResult.get()
        try await second.futureResult.get()
        try await third.futureResult.get()
        #expect(order.withLockedValue { $0 } == [1, 2, 3])
        await #expect(throws: EventLoopError.cancelled) { try await cancelled.futureResult.get() }
    }

    /// Many timers at once, as a worker holds one per connection: each fires once, in deadline
    /// order, and a cancelled one never fires, whichever place in the heap it held. Every third
    /// is replaced by one at a new time (a connection re-arming earlier or later) and every
    /// seventh cancelled. A heap that lost track of a timer's place would fire one twice, out of
    /// order or after it was cancelled.
    @Test func manyTimersFireOnceInOrderAndCancelledOnesNever() async throws {
        let loop = try QUICEventLoop(name: "test-many-timers")
        let fired = NIOLockedValueBox<[(index: Int, early: Bool)]>([])
        let count = 120
        let base = NIODeadline.now().uptimeNanoseconds + 200_000_000
        // Deadlines 1 ms apart, scheduled in a scrambled order; the moved ones half a millisecond
        // off that grid, so no two deadlines tie.
        let first = (0..<count).map { base + UInt64(($0 * 37) % count) * 1_000_000 }
        let moved = Set(stride(from: 0, to: count, by: 3))
        let cancelled = Set(stride(from: 0, to: count, by: 7))
        let deadlines = (0..<count).map { index in
            guard moved.contains(index) else { return first[index] }
            return index.isMultiple(of: 2) ? first[index] - 100_500_000 : first[index] + 50_500_000
        }
        @Sendable func schedule(_ index: Int, at deadline: UInt64) -> Scheduled<Void> {
            loop.scheduleTask(deadline: .uptimeNanoseconds(deadline)) {
                let now = NIODeadline.now().uptimeNanoseconds
                fired.withLockedValue { $0.append((index, now < deadline)) }
            }
        }
        // Last of all, after every deadline a timer ever had: once it has run, a duplicate or a
        // cancelled timer would have run too.
        let last = (first + deadlines).max()! + 1_000_000
        let sentinel = try await loop.submit {
            var scheduled = (0..<count).map { schedule($0, at: first[$0]) }
            for index in moved.sorted() {
                scheduled[index].cancel()
                scheduled[index] = schedule(index, at: deadlines[index])
            }
            for index in cancelled.sorted() { scheduled[index].cancel() }
            return loop.scheduleTask(deadline: .uptimeNanoseconds(last)) {}
        }.get()
        let expected = (0..<count).filter { !cancelled.contains($0) }.sorted { deadlines[$0] < deadlines[$1] }
        try await sentinel.futureResult.get()
        let seen = fired.withLockedValue { $0 }
        #expect(seen.map(\.index) == expected)
        #expect(seen.filter(\.early).isEmpty, "fired before their deadline: \(seen.filter(\.early).map(\.index))")
    }

    /// Alarms (a connection's one timer, moved to its next deadline on every pass) fire once, at
    /// the last deadline they were set to and not before, in the order of those deadlines; a
    /// cancelled one never fires. Each is moved several times, earlier and later, among the others.
    @Test func movedAlarmsFireOnceAtTheirLastDeadline() async throws {
        let loop = try QUICEventLoop(name: "test-alarms")
        let fired = NIOLockedValueBox<[(index: Int, early: Bool)]>([])
        let count = 60
        let base = NIODeadline.now().uptimeNanoseconds + 100_000_000
        var generator = SeededGenerator(seed: 0xA1A5)
        // Four deadlines each, 0.1 ms apart in a scrambled grid so no two final ones tie; the last wins.
        let moves = (0..<count).map { _ in (0..<4).map { _ in base + (generator.next() % 100_000) * 1_000 + 100 } }
        let cancelled = Set(stride(from: 0, to: count, by: 9))
        // Last of all, after every deadline an alarm was ever set to: once it has run, a second
        // firing or a cancelled alarm would have run too.
        let last = moves.joined().max()! + 1_000_000
        let alarms = try await loop.submit {
            (0..<count).map { index in
                let deadline = moves[index].last!
                let alarm = loop.makeAlarm {
                    fired.withLockedValue { $0.append((index, NIODeadline.now().uptimeNanoseconds < deadline)) }
                }
                for deadline in moves[index] { alarm.set(deadline: deadline) }
                if cancelled.contains(index) { alarm.cancel() }
                return alarm
            }
        }
        let sentinel = loop.scheduleTask(deadline: .uptimeNanoseconds(last)) {}
        let expected = (0..<count).filter { !cancelled.contains($0) }.sorted { moves[$0].last! < moves[$1].last! }
        try await sentinel.futureResult.get()
        let result = fired.withLockedValue { $0 }
        #expect(result.map(\.index) == expected, "fired \(result.count) of \(expected.count), in another order or twice")
        #expect(result.allSatisfy { !$0.early }, "an alarm fired before its last deadline")
        withExtendedLifetime(alarms) {}
    }

    @Test func tasksFromManyThreadsAllRunOnTheLoopInTheOrderEachThreadQueuedThem() async throws {
        let loop = try QUICEventLoop(name: "test-tasks")
        let seen = NIOLockedValueBox<[Int: [Int]]>([:])
        let offLoop = NIOLockedValueBox(0)
        let threads = 4
        let perThread = 500
        DispatchQueue.concurrentPerform(iterations: threads) { thread in
            for index in 0..<perThread {
                loop.execute {
                    if !loop.inEventLoop { offLoop.withLockedValue { $0 += 1 } }
                    seen.withLockedValue { $0[thread, default: []].append(index) }
                }
            }
        }
        try await loop.submit {}.get()
        #expect(offLoop.withLockedValue { $0 } == 0)
        for thread in 0..<threads {
            #expect(seen.withLockedValue { $0[thread] } == Array(0..<perThread))
        }
    }

    @Test func shuttingDownFailsPendingTimersAndPassesLaterJobsOn() async throws {
        let loop = try QUICEventLoop(name: "test-shutdown")
        let later = loop.scheduleTask(in: .hours(1)) { 1 }
        // Waiting starts before the loop stops: a future's callbacks run on its loop.
        let other = try QUICEventLoop(name: "test-other")
        let outcome = later.futureResult.hop(to: other)
        let executor = EventLoopTaskExecutor(eventLoop: loop)
        try await loop.shutdownGracefully()
        await #expect(throws: EventLoopError.shutdown) { try await outcome.get() }
        // A task that prefers the stopped loop still runs to its end, elsewhere.
        let value = await Task(executorPreference: executor) { 42 }.value
        #expect(value == 42)
        #expect(!loop.inEventLoop)
    }

    /// A `pthread_t` is reused: once a stopped loop's thread has exited, a new thread often gets
    /// the same one (glibc keeps the exited thread's stack, with the descriptor at its top, for
    /// the next). The new thread is not the loop's, and `inEventLoop` must say so. Which thread
    /// takes glibc's cached stack depends on what else the process starts, so the test gives the
    /// loop's thread a stack of its own and runs the new thread on that same memory: it gets the
    /// loop's `pthread_t` every time.
    @Test func aNewThreadIsNotTakenForAStoppedLoopsThread() async throws {
        let stackSize = 1 << 20
        let stackMemory = mmap(nil, stackSize, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0)
        #expect(stackMemory != MAP_FAILED)
        guard let stackMemory, stackMemory != MAP_FAILED else { return }
        defer { munmap(stackMemory, stackSize) }
        let stack = UnsafeMutableRawBufferPointer(start: stackMemory, count: stackSize)

        let loop = try QUICEventLoop(name: "test-reuse", threadStack: stack)
        let loopThread = try await loop.submit { pthread_self() }.get()
        #expect(try await loop.submit { loop.inEventLoop }.get(), "the loop's own thread is not taken for the loop's")
        try await loop.shutdownGracefully()
        // The stack is free for another thread once the kernel has ended the loop's, and not before.
        try #require(await eventually(within: 10) { !Self.threadNames().contains("test-reuse") }, "the stopped loop's thread did not end")

        // @unchecked Sendable: the new thread writes the flags before it ends, and the test
        // reads them only after `pthread_join`, which orders those writes before the reads.
        final class Probe: @unchecked Sendable {
            let loop: QUICEventLoop
            let loopThread: pthread_t
            var sameThreadIdentifier = false
            var takenForTheLoop = true
            init(loop: QUICEventLoop, loopThread: pthread_t) { (self.loop, self.loopThread) = (loop, loopThread) }
        }
        let probe = Probe(loop: loop, loopThread: loopThread)
        var attributes = pthread_attr_t()
        pthread_attr_init(&attributes)
        defer { pthread_attr_destroy(&attributes) }
        #expect(pthread_attr_setstack(&attributes, stackMemory, stackSize) == 0)
        var thread = pthread_t()
        let created = pthread_create(&thread, &attributes, { raw in
            let probe = Unmanaged<Probe>.fromOpaque(raw!).takeRetainedValue()
            probe.sameThreadIdentifier = pthread_equal(pthread_self(), probe.loopThread) != 0
            probe.takenForTheLoop = probe.loop.inEventLoop
            return nil
        }, Unmanaged.passRetained(probe).toOpaque())
        #expect(created == 0)
        guard created == 0 else { return }
        // `pthread_join` orders the probe's writes before these reads.
        pthread_join(thread, nil)
        #expect(probe.sameThreadIdentifier, "a thread on the stopped loop's stack did not get its pthread_t: the case this test is for did not come up")
        #expect(!probe.takenForTheLoop, "a new thread with the stopped loop's pthread_t passed for the loop's thread")
    }

    /// The names of this process's threads (`/proc/self/task/*/comm`).
    static func threadNames() -> [String] {
        let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? []
        return tasks.compactMap { try? String(contentsOfFile: "/proc/self/task/\($0)/comm", encoding: .utf8) }
            .map { $0.trimmingCharacters(in: .whitespacesAndNewlines) }
    }

    @Test func aLoopThatNothingRefersToEndsItsThread() async throws {
        var loop: QUICEventLoop? = try QUICEventLoop(name: "qel-lifetime")
        #expect(Self.threadNames().contains("qel-lifetime"))
        // Work that holds the loop until it is done: a task and a timer.
        try await loop!.submit {}.get()
        try await loop!.scheduleTask(in: .milliseconds(10)) {}.futureResult.get()
        loop!.scheduleTask(in: .hours(1)) {}.cancel()
        loop = nil
        #expect(await eventually(within: 10) { !Self.threadNames().contains("qel-lifetime") }, "the loop's thread outlived every reference to it")
    }

    /// The timer heap holds one reference to each timer in it, taken when the timer goes in
    /// and given up when it comes out: whether it fired, was cancelled, was moved many times
    /// first, or was still waiting when the loop shut down, what its task captured is freed
    /// once nothing else holds it, and freed once (an extra release would crash here).
    @Test func timersLetGoOfWhatTheyCaptureOnceTheyLeaveTheHeap() async throws {
        final class Captured: Sendable {}
        let loop = try QUICEventLoop(name: "test-timer-refs")
        weak var firedCapture: Captured?, cancelledCapture: Captured?, movedCapture: Captured?, pendingCapture: Captured?
        let fired = NIOLockedValueBox(0)
        do {
            let captured = Captured()
            firedCapture = captured
            _ = loop.scheduleTask(in: .milliseconds(1)) { withExtendedLifetime(captured) { fired.withLockedValue { $0 += 1 } } }
        }
        try await loop.submit {
            do {
                let captured = Captured()
                cancelledCapture = captured
                let alarm = loop.makeAlarm { withExtendedLifetime(captured) {} }
                alarm.set(deadline: NIODeadline.now().uptimeNanoseconds + 3_600_000_000_000)
                alarm.cancel()
                withExtendedLifetime(alarm) {}
            }
            do {
                let captured = Captured()
                movedCapture = captured
                let alarm = loop.makeAlarm { withExtendedLifetime(captured) {} }
                let now = NIODeadline.now().uptimeNanoseconds
                for step in 0..<50 { alarm.set(deadline: now + UInt64(step % 7) * 3_600_000_000_000 + 1) }
                // Dropped while in the heap: the alarm takes its timer out as it goes.
            }
        }.get()
        // A task scheduled an hour out holds its capture until the loop shuts down.
        do {
            let captured = Captured()
            pendingCapture = captured
            _ = loop.scheduleTask(in: .hours(1)) { withExtendedLifetime(captured) {} }
        }
        _ = await eventually(within: 10) { firedCapture == nil && cancelledCapture == nil && movedCapture == nil }
        #expect(fired.withLockedValue { $0 } == 1)
        #expect(firedCapture == nil, "a fired timer still holds its task")
        #expect(cancelledCapture == nil, "a cancelled timer still holds its task")
        #expect(movedCapture == nil, "a timer moved and then dropped still holds its task")
        #expect(pendingCapture != nil, "a waiting timer let go of its task early")
        try await loop.shutdownGracefully()
        _ = await eventually(within: 10) { pendingCapture == nil }
        #expect(pendingCapture == nil, "a timer failed at shutdown still holds its task")
    }

    /// A plain blocking socket on `host` (127.0.0.1 unless told) standing in for a peer, reading
    /// IP_TOS or, on IPv6, IPV6_TCLASS.
    final class Peer: Sendable {
        let fd: CInt
        let address: QUICSocketAddress

        init(host: String = "127.0.0.1") throws {
            let local = QUICSocketAddress(ip: host, port: 0)!
            let isIPv6 = local.family == AF_INET6
            let fd = socket(isIPv6 ? AF_INET6 : AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
            self.fd = fd
            var one: CInt = 1
            if isIPv6 {
                setsockopt(fd, CInt(IPPROTO_IPV6), IPV6_RECVTCLASS, &one, socklen_t(MemoryLayout<CInt>.size))
            } else {
                setsockopt(fd, CInt(IPPROTO_IP), IP_RECVTOS, &one, socklen_t(MemoryLayout<CInt>.size))
            }
            var timeout = timeval(tv_sec: 5, tv_usec: 0)
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
            var storage = local.storage
            let bound = withUnsafePointer(to: &storage) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, local.length) }
            }
            precondition(bound == 0, "bind: errno \(errno)")
            address = try QUICReuseportGroup.boundAddress(of: fd)
        }

        deinit { close(fd) }

        func send(_ bytes: [UInt8], to address: QUICSocketAddress, tos: CInt) {
            var tos = tos
            setsockopt(fd, CInt(IPPROTO_IP), IP_TOS, &tos, socklen_t(MemoryLayout<CInt>.size))
            var storage = address.storage
            let sent = withUnsafePointer(to: &storage) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { sendto(fd, bytes, bytes.count, 0, $0, address.length) }
            }
            precondition(sent == bytes.count, "sendto: errno \(errno)")
        }

        /// One datagram, the ECN bits of its IP_TOS or Traffic Class, and the whole byte; nil
        /// after the 5-second timeout.
        func receive() -> (bytes: [UInt8], ecn: UInt8, trafficClass: UInt8)? {
            var buffer = [UInt8](repeating: 0, count: 2048)
            var control = [UInt8](repeating: 0, count: 64)
            return buffer.withUnsafeMutableBytes { bytes in
                control.withUnsafeMutableBytes { control in
                    var vector = iovec(iov_base: bytes.baseAddress, iov_len: bytes.count)
                    return withUnsafeMutablePointer(to: &vector) { vector in
                        var header = msghdr(
                            msg_name: nil, msg_namelen: 0, msg_iov: vector, msg_iovlen: 1,
                            msg_control: control.baseAddress, msg_controllen: control.count, msg_flags: 0
                        )
                        let count = recvmsg(fd, &header, 0)
                        guard count >= 0 else { return nil }
                        var trafficClass: UInt8 = 0
                        var message = cqs_cmsg_firsthdr(&header)
                        while let current = message {
                            let data = UnsafeRawPointer(cqs_cmsg_data(current)!)
                            if current.pointee.cmsg_level == CInt(IPPROTO_IP), current.pointee.cmsg_type == IP_TOS {
                                trafficClass = data.load(as: UInt8.self)
                            } else if current.pointee.cmsg_level == CInt(IPPROTO_IPV6), current.pointee.cmsg_type == IPV6_TCLASS {
                                trafficClass = UInt8(truncatingIfNeeded: data.loadUnaligned(as: CInt.self))
                            }
                            message = cqs_cmsg_nxthdr(&header, current)
                        }
                        return (Array(bytes.prefix(count)), trafficClass & 0x3, trafficClass)
                    }
                }
            }
        }
    }

    /// Received datagrams, as the socket's handler saw them.
    final class Received: Sendable {
        let datagrams = NIOLockedValueBox<[(bytes: [UInt8], remote: QUICSocketAddress, ecn: UInt32)]>([])

        func waitFor(_ count: Int) async throws {
            _ = await eventually(within: 5) { datagrams.withLockedValue { $0.count } >= count }
        }
    }

    @Test func aWorkerSocketCarriesSenderECNAndBatchesAndOutlivesASendError() async throws {
        let loop = try QUICEventLoop(name: "test-socket")
        let descriptor = try #require(QUICReuseportGroup.bind(try SocketAddress(ipAddress: "127.0.0.1", port: 0), count: 1).first)
        let received = Received()
        let socket = try await loop.submit {
            let socket = try QUICUDPSocket(adopting: descriptor, options: QUICSocketOptions(), loop: loop, logger: Logger(label: "test"))
            socket.onDatagram = { bytes, remote, ecn in received.datagrams.withLockedValue { $0.append((Array(bytes), remote, ecn)) } }
            return NIOLoopBound(socket, eventLoop: loop)
        }.get()
        let serverAddress = try await loop.submit { socket.value.localAddress }.get()
        let peer = try Peer()

        // In: the payload, who sent it, and its ECN codepoint (ECT(0) is 0b10, RFC 3168).
        peer.send(Array("hello".utf8), to: serverAddress, tos: 0b10)
        peer.send(Array("marked".utf8), to: serverAddress, tos: 0b11)
        try await received.waitFor(2)
        let datagrams = received.datagrams.withLockedValue { $0 }
        try #require(datagrams.count == 2)
        #expect(datagrams[0].bytes == Array("hello".utf8))
        #expect(datagrams[0].remote == peer.address)
        #expect(datagrams[0].ecn == UInt32(NGTCP2_ECN_ECT_0))
        #expect(datagrams[1].ecn == UInt32(NGTCP2_ECN_CE))

        // Out: one batch of three datagrams (100, 100 and 50 bytes), marked ECT(1).
        let batch = (0..<250).map { UInt8($0 % 251) }
        try await loop.submit {
            batch.withUnsafeBytes { socket.value.send($0, segmentSize: 100, to: peer.address, ecn: UInt32(NGTCP2_ECN_ECT_1)) }
        }.get()
        var pieces: [[UInt8]] = []
        for _ in 0..<3 {
            let datagram = try #require(peer.receive(), "a datagram of the batch never arrived")
            #expect(datagram.ecn == 0b01)
            pieces.append(datagram.bytes)
        }
        #expect(pieces.map(\.count) == [100, 100, 50])
        #expect(Array(pieces.joined()) == batch)

        // A send the kernel refuses (broadcast without SO_BROADCAST: EACCES) costs that batch
        // only; NIO would close the socket here, and every connection on it with the socket.
        let broadcast = try #require(QUICSocketAddress(ip: "255.255.255.255", port: 9))
        let errors = try await loop.submit { () -> Int in
            Array("lost".utf8).withUnsafeBytes { socket.value.send($0, segmentSize: 4, to: broadcast, ecn: 0) }
            Array("after".utf8).withUnsafeBytes { socket.value.send($0, segmentSize: 5, to: peer.address, ecn: 0) }
            return socket.value.sendErrors
        }.get()
        #expect(errors == 1)
        #expect(peer.receive()?.bytes == Array("after".utf8))
        peer.send(Array("still".utf8), to: serverAddress, tos: 0)
        try await received.waitFor(3)
        #expect(received.datagrams.withLockedValue { $0.last?.bytes } == Array("still".utf8))

        try await loop.submit { socket.value.close() }.get()
    }
}
