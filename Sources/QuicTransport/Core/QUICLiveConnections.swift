import Synchronization

/// Counts the connection cores one owner made (a listening endpoint, an HTTP/3 client) that are
/// still in memory: from a core's creation to its `deinit`, not to its close.
///
/// A closed connection that something still holds keeps its `ngtcp2_conn`, its GnuTLS session,
/// its stream buffers and its codec; this count sees that, where the routing table does not.
/// Once every connection has closed and its closing or draining period (RFC 9000 §10.2) is
/// over, it must return to zero.
package final class QUICLiveConnections: Sendable {
    private let live = Atomic<Int>(0)

    package init() {}

    /// Cores made for this owner and not yet freed.
    package var count: Int { live.load(ordering: .relaxed) }

    func coreCreated() { live.add(1, ordering: .relaxed) }
    func coreFreed() { live.subtract(1, ordering: .relaxed) }
}
