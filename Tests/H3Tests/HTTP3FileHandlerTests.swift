import CQuicShims
import Foundation
@testable import H3
import HTTPTypes
import Testing

@Suite("HTTP3FileHandler")
struct HTTP3FileHandlerTests {
    static func makeRoot() throws -> (root: URL, outside: URL) {
        let base = FileManager.default.temporaryDirectory.appendingPathComponent("files-\(UUID())")
        let root = base.appendingPathComponent("www")
        try FileManager.default.createDirectory(at: root.appendingPathComponent("docs"), withIntermediateDirectories: true)
        try Data("0123456789".utf8).write(to: root.appendingPathComponent("ten.txt"))
        try Data("<p>docs</p>".utf8).write(to: root.appendingPathComponent("docs/index.html"))
        let outside = base.appendingPathComponent("secret.txt")
        try Data("secret".utf8).write(to: outside)
        try FileManager.default.createSymbolicLink(at: root.appendingPathComponent("link.txt"), withDestinationURL: outside)
        return (root, outside)
    }

    static func get(
        _ handler: HTTP3FileHandler, _ path: String, method: HTTPRequest.Method = .get, range: String? = nil, fields: HTTPFields = [:]
    ) -> HTTP3ServerResponse {
        var head = HTTPRequest(method: method, scheme: "https", authority: "localhost", path: path, headerFields: fields)
        if let range { head.headerFields[.range] = range }
        return handler.respond(to: HTTP3ServerRequest(head: head, body: [], streamID: 0))
    }

    /// What the response would send: its in-memory body, then its file region.
    static func bodyBytes(_ response: HTTP3ServerResponse) throws -> [UInt8] {
        try response.body + (response.file?.readAll() ?? [])
    }

    @Test func servesFilesWithLengthAndType() throws {
        let handler = HTTP3FileHandler(root: try Self.makeRoot().root.path)
        let response = Self.get(handler, "/ten.txt")
        #expect(response.head.status == .ok)
        #expect(try Self.bodyBytes(response) == Array("0123456789".utf8))
        #expect(response.head.headerFields[.contentLength] == "10")
        #expect(response.head.headerFields[.contentType] == "text/plain; charset=utf-8")
        #expect(try Self.bodyBytes(Self.get(handler, "/docs/")) == Array("<p>docs</p>".utf8))
    }

    @Test func headHasTheLengthButNoBody() throws {
        let handler = HTTP3FileHandler(root: try Self.makeRoot().root.path)
        let response = Self.get(handler, "/ten.txt", method: .head)
        #expect(response.head.status == .ok)
        #expect(response.head.headerFields[.contentLength] == "10")
        #expect(response.body.isEmpty && response.file == nil)
    }

    /// What nghttp3 would be handed for a response's head: each entry's name and value.
    static func submitted(_ response: HTTP3ServerResponse) -> [String] {
        HTTP3ResponseFieldSection(response.storedHead).withFieldArray { array, count in
            (0..<count).map { index in
                let field = array[index]
                let name = String(decoding: UnsafeBufferPointer(start: field.name, count: field.namelen), as: UTF8.self)
                return name + ": " + String(decoding: UnsafeBufferPointer(start: field.value, count: field.valuelen), as: UTF8.self)
            }
        }
    }

    @Test func aWholeFileHeadIsEncodedOnceAndAChangeToItIsSentAsChanged() throws {
        let altSvc = HTTPField(name: .altSvc, value: "h3=\":4433\"")
        let handler = HTTP3FileHandler(root: try Self.makeRoot().root.path, additionalFields: HTTPFields([altSvc]))
        var response = Self.get(handler, "/ten.txt")
        let prepared = try #require(response.prepared, "a whole file's 200 carries its prepared head")
        #expect(Self.get(handler, "/ten.txt").prepared === prepared, "one encoding per opened file")
        let etag = try #require(response.head.headerFields[.eTag])
        let lastModified = try #require(response.head.headerFields[.lastModified])
        let expected = [
            ":status: 200", "content-type: text/plain; charset=utf-8", "accept-ranges: bytes", "content-length: 10",
            "etag: \(etag)", "last-modified: \(lastModified)", "alt-svc: h3=\":4433\"",
        ]
        #expect(Self.submitted(response) == expected)
        // A handler that wraps the file handler and adds a field must see it sent.
        response.head.headerFields[.cacheControl] = "no-cache"
        #expect(response.prepared == nil)
        #expect(Self.submitted(response) == expected + ["cache-control: no-cache"])
        // The file's kept answer is shared by every GET: the change stayed with the copy made.
        let again = Self.get(handler, "/ten.txt")
        #expect(again.prepared === prepared && Self.submitted(again) == expected)
        #expect(try Self.bodyBytes(again) == Array("0123456789".utf8))
        #expect(Self.get(handler, "/ten.txt", range: "bytes=2-4").prepared == nil, "a 206 is built per request")
    }

    @Test(arguments: [
        ("bytes=2-4", 206, "234", "bytes 2-4/10"), ("bytes=7-", 206, "789", "bytes 7-9/10"),
        ("bytes=-2", 206, "89", "bytes 8-9/10"), ("bytes=5-100", 206, "56789", "bytes 5-9/10"),
        ("bytes=10-", 416, "", "bytes */10"), ("bytes=1-2,4-5", 200, "0123456789", ""), ("items=1-2", 200, "0123456789", ""),
    ])
    func rangeRequests(range: String, status: Int, body: String, contentRange: String) throws {
        let handler = HTTP3FileHandler(root: try Self.makeRoot().root.path)
        let response = Self.get(handler, "/ten.txt", range: range)
        #expect(response.head.status.code == status)
        #expect(try Self.bodyBytes(response) == Array(body.utf8))
        #expect((response.head.headerFields[.contentRange] ?? "") == contentRange)
    }

    @Test(arguments: ["/../secret.txt", "/docs/../../secret.txt", "/%2e%2e/secret.txt", "/link.txt", "/missing", "/docs", "/ten.txt%00.png"])
    func nothingOutsideTheRootOrMissingIsServed(path: String) throws {
        let (root, _) = try Self.makeRoot()
        let handler = HTTP3FileHandler(root: root.path)
        let response = Self.get(handler, path)
        if path == "/docs" {
            // A directory with an index.html, asked for without its slash, is sent to it.
            #expect(response.head.status == .movedPermanently)
            #expect(response.head.headerFields[.location] == "/docs/")
        } else {
            #expect(response.head.status == .notFound, "\(path)")
            #expect(try !Self.bodyBytes(response).elementsEqual(Array("secret".utf8)))
        }
    }

    /// Additional fields (h3serve's Alt-Svc, RFC 7838 §3) ride on every answer exactly once:
    /// whole files, ranges, unsatisfiable ranges, 404 and 405.
    @Test func additionalFieldsRideOnEveryResponseOnce() throws {
        let altSvc = HTTPField(name: .altSvc, value: "h3=\":4433\"; ma=86400")
        let handler = HTTP3FileHandler(root: try Self.makeRoot().root.path, additionalFields: HTTPFields([altSvc]))
        let responses = [
            Self.get(handler, "/ten.txt"), Self.get(handler, "/ten.txt"), Self.get(handler, "/ten.txt", range: "bytes=2-4"),
            Self.get(handler, "/ten.txt", range: "bytes=10-"), Self.get(handler, "/missing"), Self.get(handler, "/ten.txt", method: .post),
        ]
        #expect(responses.map(\.head.status.code) == [200, 200, 206, 416, 404, 405])
        for response in responses {
            #expect(response.head.headerFields[values: .altSvc] == [altSvc.value], "\(response.head.status)")
        }
        #expect(responses[2].head.headerFields[.contentRange] == "bytes 2-4/10")
        #expect(Self.get(HTTP3FileHandler(root: handler.root.path), "/ten.txt").head.headerFields[.altSvc] == nil)
    }

    /// A server that learns its port only once it listens (h3serve on port 0) sets Alt-Svc
    /// then: every copy of the handler sends it from the next request on, for files already
    /// opened and kept too, and a change replaces it.
    @Test func additionalFieldsSetWhileServingReachEveryCopyAndKeptFile() throws {
        let handler = HTTP3FileHandler(root: try Self.makeRoot().root.path)
        let copy = handler
        let before = Self.get(handler, "/ten.txt")
        #expect(before.head.headerFields[.altSvc] == nil)
        handler.additionalFields = HTTPFields([HTTPField(name: .altSvc, value: "h3=\":4433\"")])
        let after = Self.get(copy, "/ten.txt")
        #expect(after.head.headerFields[values: .altSvc] == ["h3=\":4433\""])
        #expect(after.prepared !== before.prepared, "the kept file was opened again with the new fields")
        #expect(Self.get(copy, "/ten.txt").prepared === after.prepared, "and is kept again")
        #expect(Self.get(handler, "/missing").head.headerFields[values: .altSvc] == ["h3=\":4433\""])
        copy.additionalFields = HTTPFields([HTTPField(name: .altSvc, value: "clear")])
        #expect(Self.get(handler, "/ten.txt").head.headerFields[values: .altSvc] == ["clear"])
        #expect(Self.submitted(Self.get(handler, "/ten.txt")).last == "alt-svc: clear")
        #expect(try Self.bodyBytes(Self.get(handler, "/ten.txt")) == Array("0123456789".utf8))
    }

    @Test(arguments: [
        ("/", ""), ("", ""), ("///a//b", "a//b"), ("/docs/?q=/x%00", "docs/"), ("?x", ""), ("/a%20b.txt", "a b.txt"),
        ("/%2Fetc", "etc"), ("/%2e%2e/x", "../x"), ("/ten.txt%00.png", nil), ("/a\u{0}b", nil), ("/%zz", nil), ("/caf\u{e9}", "caf\u{e9}"),
    ] as [(String, String?)])
    func requestPathsNameTheirFileBelowTheRoot(path: String, name: String?) {
        #expect(HTTP3FileHandler.relativeName(of: path) == name, "\(path)")
    }

    /// Percent decoding is ours (Foundation's lives outside FoundationEssentials): it must agree
    /// with Foundation's `removingPercentEncoding` on valid, broken and non-UTF-8 escapes.
    @Test func percentDecodingAgreesWithFoundation() {
        var inputs = [
            "", "plain", "a%20b", "%41%4a%4A", "%", "%4", "%4g", "%%41", "100%", "a+b", "%2Fetc", "%00", "%ff", "%c3%a9",
            "%C3", "%e2%82%ac", "%f0%9f%98%80", "caf\u{e9}%20", "%ed%a0%80", "%c0%af", "x%2", "%zz",
        ]
        // Every two-digit escape, alone and after a lead byte of a two-byte sequence.
        for byte in 0...255 {
            let hex = String(byte, radix: 16)
            let escape = "%" + (hex.count == 1 ? "0" + hex : hex)
            inputs += [escape, "%c3" + escape]
        }
        for input in inputs {
            // Foundation's one oddity: a lone `%a9`, which is not UTF-8, comes back as U+FFFD
            // where every other such byte gives nil. A path is refused then, not altered.
            let foundation = input.removingPercentEncoding.flatMap { $0.contains("\u{FFFD}") ? nil : $0 }
            #expect(HTTP3FileHandler.percentDecoded(Substring(input)) == foundation, "\(input.debugDescription)")
        }
    }

    @Test func otherMethodsGet405WithAllow() throws {
        let handler = HTTP3FileHandler(root: try Self.makeRoot().root.path)
        let response = Self.get(handler, "/ten.txt", method: .post)
        #expect(response.head.status == .methodNotAllowed)
        #expect(response.head.headerFields[.allow] == "GET, HEAD")
    }

    /// A file replaced by a rename, as deployments replace files, between two requests.
    static func replaceTenTxt(in root: URL) throws {
        let staged = root.appendingPathComponent(".ten.txt.new")
        try Data("abcdefghij".utf8).write(to: staged)
        try #require(rename(staged.path, root.appendingPathComponent("ten.txt").path) == 0)
    }

    @Test func anOpenedFileServesLaterRequestsUntilItsReuseTimeIsUp() throws {
        let root = try Self.makeRoot().root
        let reusing = HTTP3FileHandler(root: root.path, openFileReuse: .seconds(3600))
        let briefly = HTTP3FileHandler(root: root.path, openFileReuse: .seconds(60))
        let never = HTTP3FileHandler(root: root.path, openFileReuse: .zero)
        for handler in [reusing, briefly, never] {
            #expect(try Self.bodyBytes(Self.get(handler, "/ten.txt")) == Array("0123456789".utf8))
        }
        try Self.replaceTenTxt(in: root)
        // Reused: the file opened before the rename, whole and with its own length.
        let reused = Self.get(reusing, "/ten.txt")
        #expect(try Self.bodyBytes(reused) == Array("0123456789".utf8))
        #expect(reused.head.headerFields[.contentLength] == "10")
        // Found by the path as requested, its query left out: the same lookup.
        #expect(try Self.bodyBytes(Self.get(reusing, "/ten.txt?v=2")) == Array("0123456789".utf8))
        // Another spelling of the path is another lookup, which finds the file as it is now.
        #expect(try Self.bodyBytes(Self.get(reusing, "/%74en.txt")) == Array("abcdefghij".utf8))
        #expect(try Self.bodyBytes(Self.get(never, "/ten.txt")) == Array("abcdefghij".utf8))
        // Reused until its time is up, then looked up again: time passes on the cache's clock.
        #expect(try Self.bodyBytes(Self.get(briefly, "/ten.txt")) == Array("0123456789".utf8))
        briefly.directory.age(by: .seconds(59))
        #expect(try Self.bodyBytes(Self.get(briefly, "/ten.txt")) == Array("0123456789".utf8))
        briefly.directory.age(by: .seconds(1))
        #expect(try Self.bodyBytes(Self.get(briefly, "/ten.txt")) == Array("abcdefghij".utf8))
    }

    @Test func aPathThatStopsExistingIsNotServedFromAnOldLookupOnceItExpires() throws {
        let root = try Self.makeRoot().root
        let handler = HTTP3FileHandler(root: root.path, openFileReuse: .seconds(60))
        #expect(Self.get(handler, "/ten.txt").head.status == .ok)
        try FileManager.default.removeItem(at: root.appendingPathComponent("ten.txt"))
        #expect(Self.get(handler, "/ten.txt").head.status == .ok, "the old lookup serves until it expires")
        handler.directory.age(by: .seconds(60))
        #expect(Self.get(handler, "/ten.txt").head.status == .notFound)
        try Data("back".utf8).write(to: root.appendingPathComponent("ten.txt"))
        #expect(try Self.bodyBytes(Self.get(handler, "/ten.txt")) == Array("back".utf8))
    }

    /// A small file is read once when opened and sent from memory; a larger one is read by
    /// position as the client takes it. Either way a range reads the same bytes, and a change
    /// in place is seen once the lookup expires.
    @Test(arguments: [HTTP3FileReader.inMemoryLimit, HTTP3FileReader.inMemoryLimit + 1])
    func smallFilesAreSentFromMemoryAndLargeOnesReadByPosition(size: Int) throws {
        let root = try Self.makeRoot().root
        let file = root.appendingPathComponent("sized.bin")
        let bytes = (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 7) }
        try Data(bytes).write(to: file)
        let handler = HTTP3FileHandler(root: root.path, openFileReuse: .seconds(60))
        let whole = Self.get(handler, "/sized.bin")
        let reader = try #require(whole.file?.reader)
        #expect((reader.contents != nil) == (size <= HTTP3FileReader.inMemoryLimit))
        if let contents = reader.contents { #expect(Array(contents) == bytes) }
        #expect(try Self.bodyBytes(whole) == bytes)
        #expect(try Self.bodyBytes(Self.get(handler, "/sized.bin", range: "bytes=100-199")) == Array(bytes[100..<200]))
        // Changed in place, same size: seen once the lookup has expired.
        let changed = bytes.map { ~$0 }
        try Data(changed).write(to: file)
        handler.directory.age(by: .seconds(60))
        #expect(try Self.bodyBytes(Self.get(handler, "/sized.bin")) == changed)
    }

    // MARK: Validators and conditional requests (RFC 9110 §8.8, §13)

    /// The validators every file response carries: nginx's ETag from the file's change time and
    /// size, and its Last-Modified.
    @Test func filesCarryAnETagAndLastModifiedFromTheirChangeTime() throws {
        let (root, _) = try Self.makeRoot()
        let file = root.appendingPathComponent("ten.txt")
        let changed = Date(timeIntervalSince1970: 1_700_000_000)
        try FileManager.default.setAttributes([.modificationDate: changed], ofItemAtPath: file.path)
        let handler = HTTP3FileHandler(root: root.path, cacheControl: "max-age=3600")
        for response in [Self.get(handler, "/ten.txt"), Self.get(handler, "/ten.txt", method: .head), Self.get(handler, "/ten.txt", range: "bytes=1-2")] {
            #expect(response.head.headerFields[.eTag] == "\"6553f100-a\"")
            #expect(response.head.headerFields[.lastModified] == "Tue, 14 Nov 2023 22:13:20 GMT")
            #expect(response.head.headerFields[.cacheControl] == "max-age=3600")
            #expect(response.head.headerFields[.vary] == nil, "no precompressed files: nothing varies")
        }
    }

    @Test(arguments: [
        // If-None-Match: weak comparison, lists, `*` (§13.1.2).
        (["if-none-match": "\"6553f100-a\""], 304), (["if-none-match": "W/\"6553f100-a\""], 304),
        (["if-none-match": "\"x\", \"6553f100-a\""], 304), (["if-none-match": "*"], 304), (["if-none-match": "\"other\""], 200),
        // If-Modified-Since, and ignored when If-None-Match is present (§13.1.3).
        (["if-modified-since": "Tue, 14 Nov 2023 22:13:20 GMT"], 304), (["if-modified-since": "Wed, 15 Nov 2023 00:00:00 GMT"], 304),
        (["if-modified-since": "Tue, 14 Nov 2023 22:13:19 GMT"], 200), (["if-modified-since": "not a date"], 200),
        (["if-none-match": "\"other\"", "if-modified-since": "Wed, 15 Nov 2023 00:00:00 GMT"], 200),
        // If-Match and If-Unmodified-Since (§13.1.1, §13.1.4).
        (["if-match": "\"6553f100-a\""], 200), (["if-match": "W/\"6553f100-a\""], 412), (["if-match": "*"], 200),
        (["if-unmodified-since": "Tue, 14 Nov 2023 22:13:19 GMT"], 412), (["if-unmodified-since": "Tue, 14 Nov 2023 22:13:20 GMT"], 200),
    ] as [([String: String], Int)])
    func conditionalRequestsAreAnsweredAsRFC9110Says(conditions: [String: String], status: Int) throws {
        let (root, _) = try Self.makeRoot()
        let changed = Date(timeIntervalSince1970: 1_700_000_000)
        try FileManager.default.setAttributes([.modificationDate: changed], ofItemAtPath: root.appendingPathComponent("ten.txt").path)
        let handler = HTTP3FileHandler(root: root.path, cacheControl: "no-cache")
        var fields = HTTPFields()
        for (name, value) in conditions { fields[HTTPField.Name(name)!] = value }
        for method in [HTTPRequest.Method.get, .head] {
            let response = Self.get(handler, "/ten.txt", method: method, fields: fields)
            #expect(response.head.status.code == status, "\(method) \(conditions)")
            if status == 304 {
                // A 304 has no body, and the fields a 200 would have carried to update a cache.
                #expect(try Self.bodyBytes(response).isEmpty)
                #expect(response.head.headerFields[.eTag] == "\"6553f100-a\"")
                #expect(response.head.headerFields[.lastModified] == "Tue, 14 Nov 2023 22:13:20 GMT")
                #expect(response.head.headerFields[.cacheControl] == "no-cache")
                #expect(response.head.headerFields[.contentLength] == nil)
            }
        }
    }

    /// If-Range (§13.1.5): the range when the validator matches strongly, else the whole file.
    @Test(arguments: [
        ("\"6553f100-a\"", 206), ("W/\"6553f100-a\"", 200), ("\"older\"", 200),
        ("Tue, 14 Nov 2023 22:13:20 GMT", 206), ("Tue, 14 Nov 2023 22:13:21 GMT", 200),
    ])
    func ifRangeSendsTheRangeOnlyForTheSameRepresentation(ifRange: String, status: Int) throws {
        let (root, _) = try Self.makeRoot()
        let changed = Date(timeIntervalSince1970: 1_700_000_000)
        try FileManager.default.setAttributes([.modificationDate: changed], ofItemAtPath: root.appendingPathComponent("ten.txt").path)
        let handler = HTTP3FileHandler(root: root.path)
        let response = Self.get(handler, "/ten.txt", range: "bytes=2-4", fields: [.ifRange: ifRange])
        #expect(response.head.status.code == status)
        #expect(try Self.bodyBytes(response) == Array((status == 206 ? "234" : "0123456789").utf8))
    }

    // MARK: Directories

    /// A directory asked for without its slash is redirected to it when it would be served,
    /// keeping the query and never pointing at another host (`//host/...`).
    @Test(arguments: [
        ("/docs", "/docs/"), ("/docs?x=1", "/docs/?x=1"), ("//docs", "/docs/"), ("/%64ocs", "/%64ocs/"),
    ])
    func aDirectoryWithoutItsSlashIsRedirected(path: String, location: String) throws {
        let handler = HTTP3FileHandler(root: try Self.makeRoot().root.path)
        let response = Self.get(handler, path)
        #expect(response.head.status == .movedPermanently)
        #expect(response.head.headerFields[.location] == location)
    }

    @Test func aDirectoryWithoutIndexIsListedOnlyWhenBrowsing() throws {
        let (root, _) = try Self.makeRoot()
        try FileManager.default.createDirectory(at: root.appendingPathComponent("empty"), withIntermediateDirectories: true)
        let plain = HTTP3FileHandler(root: root.path)
        #expect(Self.get(plain, "/").head.status == .notFound)
        #expect(Self.get(plain, "/empty").head.status == .notFound, "no redirect to what would be 404")
        let browsing = HTTP3FileHandler(root: root.path, listsDirectories: true)
        #expect(Self.get(browsing, "/empty").head.headerFields[.location] == "/empty/")
        let page = Self.get(browsing, "/")
        #expect(page.head.status == .ok)
        #expect(page.head.headerFields[.contentType] == "text/html; charset=utf-8")
        let html = String(decoding: try Self.bodyBytes(page), as: UTF8.self)
        #expect(html.contains("<a href=\"./docs/\">docs/</a>") && html.contains("<a href=\"./ten.txt\">ten.txt</a>"), "\(html)")
        #expect(page.head.headerFields[.contentLength] == String(html.utf8.count))
        #expect(!html.contains("../"), "the root has no parent link")
        // The symlink to a file outside the root is neither listed nor served.
        #expect(!html.contains("link.txt"), "\(html)")
        let json = Self.get(browsing, "/", fields: [.accept: "application/json"])
        #expect(json.head.headerFields[.contentType] == "application/json")
        let entries = try #require(try JSONSerialization.jsonObject(with: Data(Self.bodyBytes(json))) as? [[String: Any]])
        #expect(entries.map { $0["name"] as? String } == ["docs", "empty", "ten.txt"])
        #expect(entries[2]["size"] as? Int == 10 && entries[2]["isDirectory"] as? Bool == false && entries[2]["url"] as? String == "./ten.txt")
        #expect(entries[0]["isDirectory"] as? Bool == true && entries[0]["url"] as? String == "./docs/")
        #expect((entries[2]["modified"] as? String)?.hasSuffix("Z") == true)
        let sub = String(decoding: try Self.bodyBytes(Self.get(browsing, "/empty/")), as: UTF8.self)
        #expect(sub.contains("<a href=\"../\">../</a>") && sub.contains("Index of /empty/"), "\(sub)")
        // HEAD gets no content, whatever the answer (nghttp3 refuses a HEAD response with one).
        for path in ["/empty/", "/empty", "/missing"] {
            let head = Self.get(browsing, path, method: .head)
            #expect(head.body.isEmpty && head.file == nil, "\(path): \(head.head.status)")
        }
        // index.html still wins over a listing.
        #expect(try Self.bodyBytes(Self.get(browsing, "/docs/")) == Array("<p>docs</p>".utf8))
        // Nothing above the root is listed, however the path climbs.
        for path in ["/../", "/%2e%2e/", "/docs/../../"] {
            #expect(Self.get(browsing, path).head.status == .notFound, "\(path)")
        }
    }

    // MARK: Precompressed files

    @Test func precompressedSiblingsAreServedToClientsThatAcceptThem() throws {
        let (root, _) = try Self.makeRoot()
        try Data("brotli".utf8).write(to: root.appendingPathComponent("ten.txt.br"))
        try Data("gzipped".utf8).write(to: root.appendingPathComponent("ten.txt.gz"))
        let handler = HTTP3FileHandler(root: root.path, servesPrecompressed: true)
        func get(_ acceptEncoding: String?, range: String? = nil) -> HTTP3ServerResponse {
            Self.get(handler, "/ten.txt", range: range, fields: acceptEncoding.map { [.acceptEncoding: $0] } ?? [:])
        }
        let cases: [(String?, String, String?)] = [
            ("gzip, deflate, br", "brotli", "br"), ("gzip", "gzipped", "gzip"), ("br;q=0, gzip", "gzipped", "gzip"),
            ("br;q=0.5, gzip;q=0.8", "gzipped", "gzip"), ("*", "brotli", "br"), ("identity", "0123456789", nil),
            (nil, "0123456789", nil), ("br;q=0, gzip;q=0", "0123456789", nil), ("x-gzip", "gzipped", "gzip"),
        ]
        var tags: Set<String> = []
        for (accepted, body, coding) in cases {
            let response = get(accepted)
            #expect(try Self.bodyBytes(response) == Array(body.utf8), "\(accepted ?? "none")")
            #expect(response.head.headerFields[.contentEncoding] == coding, "\(accepted ?? "none")")
            #expect(response.head.headerFields[.contentType] == "text/plain; charset=utf-8")
            #expect(response.head.headerFields[.vary] == "accept-encoding")
            tags.insert(response.head.headerFields[.eTag] ?? "")
        }
        #expect(tags.count == 3, "one ETag per representation: \(tags)")
        // Ranges apply to the encoded representation, and conditions to its own tag.
        let range = get("br", range: "bytes=0-1")
        #expect(range.head.status == .partialContent)
        #expect(try Self.bodyBytes(range) == Array("br".utf8))
        let brTag = try #require(get("br").head.headerFields[.eTag])
        #expect(brTag.hasSuffix("-br\""))
        #expect(Self.get(handler, "/ten.txt", fields: [.acceptEncoding: "br", .ifNoneMatch: brTag]).head.status == .notModified)
        #expect(Self.get(handler, "/ten.txt", fields: [.acceptEncoding: "gzip", .ifNoneMatch: brTag]).head.status == .ok)
        // Off (the default), the siblings are only files of their own.
        let plain = HTTP3FileHandler(root: root.path)
        let response = Self.get(plain, "/ten.txt", fields: [.acceptEncoding: "br"])
        #expect(try Self.bodyBytes(response) == Array("0123456789".utf8))
        #expect(response.head.headerFields[.contentEncoding] == nil)
    }

    @Test(arguments: [
        ("max-age=3600", true), ("no-cache", true), ("public, max-age=60, must-revalidate", true), ("no-cache=\"set-cookie\"", true),
        ("", false), ("max-age=", false), ("max age=1", false), ("a,,b", false), ("x\r\ny: z", false), ("max-age=\"1", false),
    ])
    func cacheControlValuesAreChecked(value: String, valid: Bool) {
        #expect(HTTP3FileHandler.isCacheControlValue(value) == valid, "\(value)")
    }
}
