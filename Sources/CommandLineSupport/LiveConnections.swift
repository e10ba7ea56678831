import QuicTransport

extension QUICLiveConnections {
    /// The connections still in memory once a server has stopped, after giving tasks that are
    /// still unwinding (and closing periods, RFC 9000 §10.2) up to `limit` to let go; servers
    /// print it as they stop, and it must be zero.
    package func remainingAfterStop(within limit: Duration) async -> Int {
        let deadline = ContinuousClock.now + limit
        while count > 0, ContinuousClock.now < deadline {
            try? await Task.sleep(for: .milliseconds(10))
        }
        return count
    }
}
