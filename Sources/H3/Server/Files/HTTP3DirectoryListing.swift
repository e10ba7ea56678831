#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import QuicTransport

/// A directory's entries as a browser or a script reads them (h3serve `--browse`, as Caddy's
/// `file_server browse`): an HTML page, or a JSON array for `Accept: application/json`.
///
/// Directories come first, each name ends in `/` when it is one, and the rest are sorted by
/// name. Names are HTML-escaped in the page and percent-encoded in links (RFC 3986 §2.1), so a
/// file called `<script>` or `a b?c#d` is shown and linked as itself.
struct HTTP3DirectoryListing: Sendable {
    /// One entry beneath the root.
    struct Entry: Sendable, Equatable {
        let name: String
        let size: Int
        /// Seconds since 1970 of its last change.
        let modified: Int
        let isDirectory: Bool

        /// The link to it, relative to the listed directory's URL (which ends in `/`): `./`
        /// first, so a name with a colon is not read as a scheme.
        var url: String { "./" + HTTP3DirectoryListing.percentEncoded(name) + (isDirectory ? "/" : "") }
        /// The name as shown, with a slash after a directory's.
        var shownName: String { name + (isDirectory ? "/" : "") }
    }

    /// The decoded request path of the directory, ending in `/`.
    let path: String
    /// The entries, sorted: directories first, then by name.
    let entries: [Entry]

    init(path: String, entries: [Entry]) {
        self.path = path
        self.entries = entries.sorted { ($0.isDirectory ? 0 : 1, $0.name) < ($1.isDirectory ? 0 : 1, $1.name) }
    }

    /// The page: a table of name, size and modification time (UTC), with a link to the parent
    /// except at the root.
    var html: String {
        let title = "Index of " + Self.htmlEscaped(path)
        var page = """
            <!DOCTYPE html>
            <html lang="en">
            <head><meta charset="utf-8"><meta name="viewport" content="width=device-width">
            <title>\(title)</title>
            <style>body{font-family:system-ui,sans-serif;margin:2em}td,th{padding:.2em 1em;text-align:left}\
            td:nth-child(2){text-align:right;font-variant-numeric:tabular-nums}</style></head>
            <body>
            <h1>\(title)</h1>
            <table>
            <thead><tr><th>Name</th><th>Size</th><th>Modified</th></tr></thead>
            <tbody>

            """
        if path != "/" { page += "<tr><td><a href=\"../\">../</a></td><td></td><td></td></tr>\n" }
        for entry in entries {
            let size = entry.isDirectory ? "-" : String(entry.size)
            page += "<tr><td><a href=\"\(Self.htmlEscaped(entry.url))\">\(Self.htmlEscaped(entry.shownName))</a></td>"
                + "<td>\(size)</td><td><time datetime=\"\(HTTPDate.rfc3339(entry.modified))\">"
                + "\(HTTPDate.imfFixdate(entry.modified))</time></td></tr>\n"
        }
        return page + "</tbody>\n</table>\n</body>\n</html>\n"
    }

    /// The JSON form: an array of `{"name", "size", "modified" (RFC 3339), "isDirectory",
    /// "url"}`, in the page's order.
    var json: String {
        struct Member: Encodable {
            let name: String
            let size: Int
            let modified: String
            let isDirectory: Bool
            let url: String
        }
        let members = entries.map {
            Member(name: $0.name, size: $0.size, modified: HTTPDate.rfc3339($0.modified), isDirectory: $0.isDirectory, url: $0.url)
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.withoutEscapingSlashes]
        let data = (try? encoder.encode(members)) ?? Data("[]".utf8)
        return String(decoding: data, as: UTF8.self) + "\n"
    }

    /// Whether an `Accept` field value asks for JSON before HTML: `application/json` listed
    /// with a nonzero weight higher than any `text/html` (RFC 9110 §12.5.1).
    static func prefersJSON(accept: String?) -> Bool {
        guard let accept else { return false }
        var json = 0.0
        var html = 0.0
        for member in HTTP3FileHandler.weightedMembers(of: accept) {
            if member.name == "application/json" { json = max(json, member.weight) }
            if member.name == "text/html" { html = max(html, member.weight) }
        }
        return json > 0 && json > html
    }

    /// `text` with `&`, `<`, `>`, `"` and `'` as character references (HTML §13.1.4).
    static func htmlEscaped(_ text: String) -> String {
        var escaped = ""
        escaped.reserveCapacity(text.utf8.count)
        for character in text.unicodeScalars {
            switch character {
            case "&": escaped += "&amp;"
            case "<": escaped += "&lt;"
            case ">": escaped += "&gt;"
            case "\"": escaped += "&quot;"
            case "'": escaped += "&#39;"
            default: escaped.unicodeScalars.append(character)
            }
        }
        return escaped
    }

    /// `name` as one path segment (RFC 3986 §3.3): every byte but the unreserved ones
    /// percent-encoded, so `/`, `?`, `#`, `%` and spaces in a name stay part of it.
    static func percentEncoded(_ name: String) -> String {
        var encoded = ""
        for byte in name.utf8 {
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"):
                encoded.unicodeScalars.append(Unicode.Scalar(byte))
            default:
                encoded += "%" + Hex.encode([byte]).uppercased()
            }
        }
        return encoded
    }
}
