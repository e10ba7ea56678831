#if canImport(Glibc)
import Glibc
#else
import Darwin
#endif
import NIOConcurrencyHelpers

/// The `Date` field value (RFC 9110 §6.6.1, IMF-fixdate), made once per second and shared.
final class HTTPDateField: Sendable {
    private let cache = NIOLockedValueBox<(second: Int, value: String)>((-1, ""))

    /// The current time as `Sun, 06 Nov 1994 08:49:37 GMT`.
    var current: String {
        let now = time(nil)
        return cache.withLockedValue { cache in
            if cache.second != now {
                cache = (now, Self.format(now))
            }
            return cache.value
        }
    }

    private static func format(_ seconds: Int) -> String {
        var time = time_t(seconds)
        var fields = tm()
        gmtime_r(&time, &fields)
        var buffer = [CChar](repeating: 0, count: 40)
        let count = strftime(&buffer, buffer.count, "%a, %d %b %Y %H:%M:%S GMT", &fields)
        return String(decoding: buffer[..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
