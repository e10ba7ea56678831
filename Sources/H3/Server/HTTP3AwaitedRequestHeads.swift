/// A server's request streams whose header section has not arrived yet, with when each opened:
/// what the request header timeout (slowloris, RFC 9114 §10.5) looks at. The codec notes opens
/// and arrivals as nghttp3 reports them; `HTTP3ServerConnection` runs the timer.
///
/// In opening order, so the oldest is first; a section usually completes in the pass that
/// opened its stream, so the one to remove is usually last: no hashing per request.
struct HTTP3AwaitedRequestHeads {
    private var streams: [(streamID: Int64, openedAt: UInt64)] = []

    var isEmpty: Bool { streams.isEmpty }

    /// When the oldest stream still without its header section opened; nil when none waits.
    var oldest: UInt64? { streams.first?.openedAt }

    mutating func opened(_ streamID: Int64, at time: UInt64) {
        streams.append((streamID, time))
    }

    /// The header section arrived, or the stream ended without one.
    mutating func remove(_ streamID: Int64) {
        if let index = streams.lastIndex(where: { $0.streamID == streamID }) { streams.remove(at: index) }
    }

    /// Takes the streams that opened before `time`.
    mutating func take(openedBefore time: UInt64) -> [Int64] {
        let count = streams.prefix { $0.openedAt < time }.count
        defer { streams.removeFirst(count) }
        return streams.prefix(count).map(\.streamID)
    }
}
