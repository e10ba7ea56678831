import CQuicShims

/// The single owner of one `gnutls_priority_t`: a GnuTLS priority string, parsed once.
///
/// `gnutls_priority_set_direct` parses its string for every session, a visible part of a
/// server's handshake. A server endpoint parses it once and gives every session the
/// parsed form. `gnutls_priority_set` counts the sessions that use it atomically, and a
/// session keeps it alive past this owner.
// @unchecked Sendable: GnuTLS only reads a priority cache after `gnutls_priority_init`, and
// counts its users with atomic operations, so sessions on any thread may share one.
package final class TLSPriority: @unchecked Sendable {
    let raw: gnutls_priority_t

    /// Parses `text` (GnuTLS's priority-string syntax); throws at the first thing it refuses.
    package init(_ text: String) throws {
        var cache: gnutls_priority_t?
        try checkGnuTLS(gnutls_priority_init(&cache, text, nil), "gnutls_priority_init")
        raw = cache!
    }

    deinit { gnutls_priority_deinit(raw) }
}
