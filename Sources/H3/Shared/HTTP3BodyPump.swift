import HTTPTypes
import Logging
import NIOCore
import QuicTransport

/// Feeds streaming bodies (request uploads, server responses) into the codec with backpressure:
/// the next piece is pulled from the producer only while less than `bufferLimit` bytes of that
/// stream wait to be acknowledged by the peer.
///
/// Loop-confined, like the connection that owns it; the producers run as tasks and hop back.
// @unchecked Sendable: all state is touched only on `driver.eventLoop`, which is also why its
// state skips the run-time exclusivity check (`@exclusivity(unchecked)`).
final class HTTP3BodyPump: @unchecked Sendable {
    /// Bytes a stream may have queued and unacknowledged before its producer, or its file body's
    /// read-ahead, waits.
    static let bufferLimit = 4 << 20
    /// The level the unacknowledged bytes must fall below before a waiting body goes on.
    static let resumeLevel = bufferLimit / 2

    private let driver: QUICConnectionDriver
    private let logger: Logger
    /// A producer waiting for room (nil while it is running), by stream.
    @exclusivity(unchecked) private var producers: [Int64: CheckedContinuation<Bool, Never>?] = [:]
    /// The task pulling each stream's body, cancelled when the stream or connection ends.
    @exclusivity(unchecked) private var tasks: [Int64: Task<Void, Never>] = [:]

    init(driver: QUICConnectionDriver, logger: Logger) {
        self.driver = driver
        self.logger = logger
    }

    /// The codec running in the driver's core, nil once the connection's state is freed. Read
    /// through the driver this pump holds anyway, not through a hook into its owner.
    private var codec: HTTP3Codec? { driver.core.applicationCodec as? HTTP3Codec }

    /// Starts pulling `stream` into the body of `streamID`, which was submitted as streaming;
    /// `whenComplete` runs on the loop once the whole body is handed to the codec. When the
    /// stream ends, `trailersAtEnd` gives the trailers to send after it, if any.
    func pump(
        streamID: Int64,
        from stream: AsyncThrowingStream<[UInt8], any Error>,
        trailersAtEnd: (@Sendable () -> HTTPFields?)? = nil,
        whenComplete: (@Sendable () -> Void)? = nil
    ) {
        producers[streamID] = .some(nil)
        tasks[streamID] = Task {
            var iterator = stream.makeAsyncIterator()
            do {
                while await self.waitForRoom(streamID) {
                    let chunk = try await iterator.next()
                    let trailers = chunk == nil ? trailersAtEnd?()?.pairs : nil
                    self.driver.eventLoop.execute {
                        guard self.producers[streamID] != nil else { return }
                        self.codec?.appendBody(streamID: streamID, chunk ?? [], finished: chunk == nil, trailers: trailers)
                        if chunk == nil {
                            self.stop(streamID)
                            whenComplete?()
                        }
                        self.driver.runPass()
                    }
                    if chunk == nil { return }
                }
            } catch {
                self.driver.eventLoop.execute {
                    guard self.producers[streamID] != nil else { return }  // Ended by the stream's close.
                    self.stop(streamID)
                    self.logger.warning("body producer failed", metadata: ["stream": "\(streamID)", "error": "\(error)"])
                    self.codec?.cancel(streamID: streamID, code: .internalError)
                    self.driver.runPass()
                }
            }
        }
    }

    // `acknowledged` and `streamClosed` stay out of line: the connections call them from their
    // event handlers, and inlined there, a waiting producer's `CheckedContinuation` (a type of
    // the resilient standard library) had each handler look up its metadata on every call,
    // whether or not the connection had a pump.

    /// The peer acknowledged more of the stream's body: wake its producer when below half the limit.
    @inline(never)
    func acknowledged(_ streamID: Int64) {
        guard !producers.isEmpty, let waiting = producers[streamID], let continuation = waiting, let codec = codec else { return }
        guard codec.bufferedBodyBytes(streamID: streamID) < Self.resumeLevel else { return }
        producers[streamID] = .some(nil)
        continuation.resume(returning: true)
    }

    /// The stream is gone: its producer stops.
    @inline(never)
    func streamClosed(_ streamID: Int64) {
        stop(streamID)
    }

    /// The connection is gone: every producer stops, so no task waits forever holding the driver.
    func connectionClosed() {
        for streamID in Array(producers.keys) { stop(streamID) }
    }

    /// Wakes a waiting producer with "no more room" and cancels its task, which ends the
    /// producer's stream (`AsyncThrowingStream` finishes an iteration that is cancelled).
    private func stop(_ streamID: Int64) {
        guard !producers.isEmpty || !tasks.isEmpty else { return }  // No streaming body: nothing to hash.
        if let waiting = producers.removeValue(forKey: streamID) { waiting?.resume(returning: false) }
        tasks.removeValue(forKey: streamID)?.cancel()
    }

    /// Returns true once the stream has room for more body, false when it is gone.
    private func waitForRoom(_ streamID: Int64) async -> Bool {
        await withCheckedContinuation { continuation in
            driver.eventLoop.execute {
                guard self.producers[streamID] != nil, let codec = self.codec else {
                    continuation.resume(returning: false)
                    return
                }
                if codec.bufferedBodyBytes(streamID: streamID) < Self.bufferLimit {
                    continuation.resume(returning: true)
                } else {
                    self.producers[streamID] = continuation
                }
            }
        }
    }
}
