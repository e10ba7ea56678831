import Synchronization

/// Counts the connection cores one owner made (a listening endpoint, an HTTP/3 client) that are
/// still in memory: from a core's creation to its `deinit`, not to its close.
///
/// A connection that is over lets go of its `ngtcp2_conn`, its GnuTLS session and its codec at
/// once (`QUICConnectionCore.releaseConnectionState()`), and lingers, small, for its closing or
/// draining period (RFC 9000 §10.2); `holdingConnectionState` counts those that have not. A core
/// that something still holds after that stays in `count`, which the routing table would not
/// show. Once every connection has closed and its period is over, both must return to zero.
package final class QUICLiveConnections: Sendable {
    private let live = Atomic<Int>(0)
    private let holding = Atomic<Int>(0)

    package init() {}

    /// Cores made for this owner and not yet freed.
    package var count: Int { live.load(ordering: .relaxed) }

    /// Cores that still hold their C state: every open connection, and any that is over but
    /// has not released it.
    package var holdingConnectionState: Int { holding.load(ordering: .relaxed) }

    func coreCreated() {
        live.add(1, ordering: .relaxed)
        holding.add(1, ordering: .relaxed)
    }

    /// Once per core: when it releases its C state, or in its `deinit` if it never did.
    func coreReleasedConnectionState() { holding.subtract(1, ordering: .relaxed) }

    func coreFreed() { live.subtract(1, ordering: .relaxed) }
}
