#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// TLS secret logging for Wireshark in the NSS key log format, controlled by `SSLKEYLOGFILE`.
///
/// Nothing needs installing: GnuTLS (verified with 3.7.9) writes the key log itself. Its default
/// keylog function (`_gnutls_nss_keylog_write`) reads `SSLKEYLOGFILE` with `secure_getenv` the
/// first time a secret is derived in the process, opens that file for appending, and writes
/// `LABEL <client_random hex> <secret hex>` lines under a mutex. For TLS 1.3 the labels are
/// `CLIENT_HANDSHAKE_TRAFFIC_SECRET`, `SERVER_HANDSHAKE_TRAFFIC_SECRET`, `CLIENT_TRAFFIC_SECRET_0`,
/// `SERVER_TRAFFIC_SECRET_0` and `EXPORTER_SECRET`, which is what Wireshark needs to decrypt
/// QUIC (RFC 9001 derives packet protection keys from these secrets). ngtcp2's GnuTLS glue
/// does not touch the keylog hook, so QUIC sessions log too.
///
/// Consequences: set the variable before the first handshake (later changes are ignored);
/// it is ignored in setuid/setgid processes; and never call `gnutls_session_set_keylog_function`,
/// which would replace the built-in writer.
package enum KeyLog {
    /// The environment variable GnuTLS reads.
    package static let environmentVariable = "SSLKEYLOGFILE"

    /// The file secrets are being appended to, or nil when key logging is off (for a startup warning).
    package static var path: String? {
        guard let value = getenv(environmentVariable), value.pointee != 0 else { return nil }
        return String(cString: value)
    }
}
