#if canImport(Glibc)
import Glibc
#else
import Darwin
#endif
import HTTPTypes
import Synchronization

/// The `Date` field an origin server sends with its responses (RFC 9110 §6.6.1), made once a
/// second and shared by every response in it.
///
/// For framework adapters and handlers that send the field themselves: an `HTTPField` checks
/// its value when it is made, so each second's field is made and checked once. Read for every
/// response, so its lock is a `Mutex`, without the pthread mutex of a lock box.
public final class HTTPDateField: Sendable {
    private let cache = Mutex<(second: Int, field: HTTPField)>((-1, HTTPField(name: .date, value: "")))

    /// A cache that makes its first field when first read.
    public init() {}

    /// `date: Sun, 06 Nov 1994 08:49:37 GMT`, the current time as an IMF-fixdate (§5.6.7).
    public var current: HTTPField {
        let now = time(nil)
        return cache.withLock { cache in
            if cache.second != now {
                cache = (now, HTTPField(name: .date, value: HTTPDate.imfFixdate(now)))
            }
            return cache.field
        }
    }
}
