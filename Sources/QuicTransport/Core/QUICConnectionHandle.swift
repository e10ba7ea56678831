/// The endpoint core's name for one of its connections: a small integer, reused once the
/// connection is removed, as quinn-proto's `ConnectionHandle` is.
///
/// The I/O layer keys what it keeps per connection (its driver) by it, in an array indexed by
/// `index`: the core names the connection in each `QUICEndpointCore.Disposition` and never
/// learns what the handle stands for above it, and the I/O layer finds its driver for a
/// datagram without hashing anything.
package struct QUICConnectionHandle: Hashable, Sendable {
    package let index: Int

    package init(index: Int) {
        self.index = index
    }
}
