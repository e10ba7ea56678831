#if canImport(Glibc)
import Glibc
#endif

/// Dates as HTTP and its logs write them, in UTC from whole seconds since 1970, by hand: these
/// run once per opened file or logged request, where a formatter would cost far more.
public enum HTTPDate {
    private static let weekdays = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"]
    private static let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]

    /// The IMF-fixdate of RFC 9110 §5.6.7, `Sun, 06 Nov 1994 08:49:37 GMT`, as `Last-Modified`
    /// (§8.8.2) carries it.
    public static func imfFixdate(_ seconds: Int) -> String {
        let fields = utc(seconds)
        return weekdays[Int(fields.tm_wday)] + ", " + digits(fields.tm_mday, 2) + " " + months[Int(fields.tm_mon)] + " "
            + digits(fields.tm_year + 1900, 4) + " " + clock(fields) + " GMT"
    }

    /// RFC 3339 §5.6 in UTC, `1994-11-06T08:49:37Z`.
    package static func rfc3339(_ seconds: Int) -> String {
        let fields = utc(seconds)
        return digits(fields.tm_year + 1900, 4) + "-" + digits(fields.tm_mon + 1, 2) + "-" + digits(fields.tm_mday, 2) + "T"
            + clock(fields) + "Z"
    }

    /// The Common Log Format's date, `06/Nov/1994:08:49:37 +0000`, without its brackets.
    package static func commonLogFormat(_ seconds: Int) -> String {
        let fields = utc(seconds)
        return digits(fields.tm_mday, 2) + "/" + months[Int(fields.tm_mon)] + "/" + digits(fields.tm_year + 1900, 4) + ":"
            + clock(fields) + " +0000"
    }

    /// The seconds an HTTP-date names (RFC 9110 §5.6.7): the IMF-fixdate senders must use, or
    /// the obsolete RFC 850 (`Sunday, 06-Nov-94 08:49:37 GMT`) and asctime
    /// (`Sun Nov  6 08:49:37 1994`) forms recipients must still read; nil for anything else,
    /// which makes a conditional request's date field ignored (§13.1.3, §13.1.4).
    package static func seconds(parsing text: Substring) -> Int? {
        let words = text.split(whereSeparator: { $0 == " " || $0 == "," })
        let day: Int?, month: Int?, year: Int?, time: Substring
        switch words.count {
        case 4 where words[3] == "GMT" && words[1].count == 9 && words[1].contains("-"):
            // RFC 850, with a two-digit year, read as 1970 to 2069: no file here changed earlier.
            let parts = words[1].split(separator: "-")
            guard parts.count == 3, let short = Int(parts[2]) else { return nil }
            let century = short < 70 ? 2000 : 1900
            (day, month, year, time) = (Int(parts[0]), months.firstIndex(of: String(parts[1])), century + short, words[2])
        case 6 where words[5] == "GMT":
            (day, month, year, time) = (Int(words[1]), months.firstIndex(of: String(words[2])), Int(words[3]), words[4])
        case 5:
            (day, month, year, time) = (Int(words[2]), months.firstIndex(of: String(words[1])), Int(words[4]), words[3])
        default:
            return nil
        }
        let clock = time.split(separator: ":").compactMap { Int($0) }
        guard let day, let month, let year, clock.count == 3, (1...31).contains(day), clock[0] < 24, clock[1] < 60, clock[2] < 61
        else { return nil }
        var fields = tm()
        (fields.tm_year, fields.tm_mon, fields.tm_mday) = (Int32(year - 1900), Int32(month), Int32(day))
        (fields.tm_hour, fields.tm_min, fields.tm_sec) = (Int32(clock[0]), Int32(clock[1]), Int32(clock[2]))
        let seconds = timegm(&fields)
        guard fields.tm_mday == Int32(day), fields.tm_mon == Int32(month) else { return nil }
        return Int(seconds)
    }

    private static func utc(_ seconds: Int) -> tm {
        var time = time_t(seconds)
        var fields = tm()
        gmtime_r(&time, &fields)
        return fields
    }

    private static func clock(_ fields: tm) -> String {
        digits(fields.tm_hour, 2) + ":" + digits(fields.tm_min, 2) + ":" + digits(fields.tm_sec, 2)
    }

    private static func digits(_ value: Int32, _ width: Int) -> String {
        let text = String(value)
        return String(repeating: "0", count: max(0, width - text.count)) + text
    }
}
