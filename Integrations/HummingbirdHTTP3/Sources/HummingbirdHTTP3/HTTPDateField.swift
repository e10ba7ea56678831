#if canImport(Glibc)
import Glibc
#else
import Darwin
#endif
import H3
import Synchronization

/// The `Date` field value (RFC 9110 §6.6.1), made by H3's `HTTPDate` once per second and shared.
/// Read for every response: its lock is a `Mutex`, without the pthread mutex of a lock box.
final class HTTPDateField: Sendable {
    private let cache = Mutex<(second: Int, value: String)>((-1, ""))

    /// The current time as `Sun, 06 Nov 1994 08:49:37 GMT`.
    var current: String {
        let now = time(nil)
        return cache.withLock { cache in
            if cache.second != now {
                cache = (now, HTTPDate.imfFixdate(now))
            }
            return cache.value
        }
    }
}
