import Synchronization

extension NWConnectionGroup {
    /// The streams the peer opens on a tunnel, in the order it opens them (`inboundStreams`):
    /// each is an `NWConnection` to `start(queue:)`. The sequence ends when the tunnel does,
    /// and for an iterator whose task is cancelled while it waits.
    ///
    /// Its own type rather than an `AsyncStream<NWConnection>`: the standard library's stream
    /// runs unspecialized generic code, which looked up the type metadata of its buffer, its
    /// optionals and its continuations on every stream delivered, a visible part of a short
    /// echo stream's cost on the server.
    public struct InboundStreams: AsyncSequence, Sendable {
        public typealias Element = NWConnection
        public typealias Failure = Never

        let queue: InboundStreamQueue

        public func makeAsyncIterator() -> Iterator {
            Iterator(queue: queue)
        }

        /// Takes the streams one at a time; one task reads a sequence at a time.
        public struct Iterator: AsyncIteratorProtocol {
            let queue: InboundStreamQueue

            /// The next stream the peer opened; nil once the tunnel has ended and every
            /// stream before has been taken, or when the waiting task is cancelled.
            public mutating func next() async -> NWConnection? {
                await queue.next()
            }

            /// The same, on the caller's actor: the default of `AsyncIteratorProtocol` would
            /// call `next()` and hop to the global pool first.
            public mutating func next(isolation actor: isolated (any Actor)?) async -> NWConnection? {
                await queue.next()
            }
        }
    }
}

/// The streams waiting for an `InboundStreams` reader, and the reader waiting for them.
/// Unbounded, as the `AsyncStream` it replaces: a stream the peer opens is counted against the
/// limit the tunnel grants (RFC 9000 §4.6), which bounds how many can wait unread.
final class InboundStreamQueue: Sendable {
    private struct State {
        var waiting = QUICFIFOQueue<NWConnection>()
        var reader: UnsafeContinuation<NWConnection?, Never>?
        /// The tunnel ended, or a reader's task was cancelled: what waits is still read, then nil.
        var finished = false

        /// The next stream, `.some(nil)` once the sequence has ended, nil when a reader must wait.
        mutating func poll() -> NWConnection?? {
            guard let connection = waiting.first else { return finished ? .some(nil) : nil }
            waiting.removeFirst()
            return connection
        }
    }

    private let state = Mutex(State())

    /// Hands `connection` to the reader, or keeps it for the next read; dropped once finished.
    func yield(_ connection: NWConnection) {
        let reader = state.withLock { state -> UnsafeContinuation<NWConnection?, Never>? in
            guard !state.finished else { return nil }
            if let reader = state.reader {
                state.reader = nil
                return reader
            }
            state.waiting.append(connection)
            return nil
        }
        reader?.resume(returning: connection)
    }

    /// Whether a reader is parked in `next()`, waiting for a stream; for tests.
    var hasWaitingReader: Bool { state.withLock { $0.reader != nil } }

    /// Ends the sequence after the streams that wait.
    func finish() {
        let reader = state.withLock { state -> UnsafeContinuation<NWConnection?, Never>? in
            state.finished = true
            defer { state.reader = nil }
            return state.reader
        }
        reader?.resume(returning: nil)
    }

    nonisolated(nonsending) func next() async -> NWConnection? {
        if let ready = state.withLock({ $0.poll() }) { return ready }
        return await withTaskCancellationHandler {
            await withUnsafeContinuation { (reader: UnsafeContinuation<NWConnection?, Never>) in
                let ready = state.withLock { state -> NWConnection?? in
                    if let ready = state.poll() { return ready }
                    if Task.isCancelled { return .some(nil) }
                    precondition(state.reader == nil, "InboundStreams is read by one task at a time")
                    state.reader = reader
                    return nil
                }
                if let ready { reader.resume(returning: ready) }
            }
        } onCancel: {
            finish()
        }
    }
}
