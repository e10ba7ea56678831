#if canImport(Glibc)
import Glibc
#else
import Darwin
#endif
import H3
import HTTPTypes
import Synchronization

/// The `Date` field (RFC 9110 §6.6.1), made by H3's `HTTPDate` once per second and shared:
/// an `HTTPField` checks its value when it is made, so each second's is made and checked once.
/// Read for every response: its lock is a `Mutex`, without the pthread mutex of a lock box.
final class HTTPDateField: Sendable {
    private let cache = Mutex<(second: Int, field: HTTPField)>((-1, HTTPField(name: .date, value: "")))

    /// `date: Sun, 06 Nov 1994 08:49:37 GMT`, the current time.
    var current: HTTPField {
        let now = time(nil)
        return cache.withLock { cache in
            if cache.second != now {
                cache = (now, HTTPField(name: .date, value: HTTPDate.imfFixdate(now)))
            }
            return cache.field
        }
    }
}
