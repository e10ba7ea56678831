import Foundation
@testable import H3
import Testing

@Suite("HTTP3DirectoryListing")
struct HTTP3DirectoryListingTests {
    static let entries = [
        HTTP3DirectoryListing.Entry(name: "b.txt", size: 3, modified: 0, isDirectory: false),
        HTTP3DirectoryListing.Entry(name: "<script>&\"x\"", size: 1, modified: 0, isDirectory: false),
        HTTP3DirectoryListing.Entry(name: "z dir", size: 4096, modified: 0, isDirectory: true),
        HTTP3DirectoryListing.Entry(name: "a?b#c%d:e", size: 2, modified: 784_111_777, isDirectory: false),
    ]

    @Test func directoriesComeFirstThenNames() {
        let listing = HTTP3DirectoryListing(path: "/x/", entries: Self.entries)
        #expect(listing.entries.map(\.name) == ["z dir", "<script>&\"x\"", "a?b#c%d:e", "b.txt"])
    }

    /// Names are escaped as text and encoded as links, so none can add markup or change where
    /// its link goes.
    @Test func namesAreEscapedInTextAndEncodedInLinks() {
        let html = HTTP3DirectoryListing(path: "/<x>/", entries: Self.entries).html
        #expect(html.contains("<title>Index of /&lt;x&gt;/</title>"))
        #expect(html.contains("<a href=\"./%3Cscript%3E%26%22x%22\">&lt;script&gt;&amp;&quot;x&quot;</a>"), "\(html)")
        #expect(html.contains("<a href=\"./a%3Fb%23c%25d%3Ae\">a?b#c%d:e</a>"), "\(html)")
        #expect(html.contains("<a href=\"./z%20dir/\">z dir/</a></td><td>-</td>"), "\(html)")
        #expect(html.contains("<time datetime=\"1994-11-06T08:49:37Z\">Sun, 06 Nov 1994 08:49:37 GMT</time>"))
        #expect(!html.contains("<script>"))
    }

    @Test func jsonListsEveryEntryWithItsLink() throws {
        let json = HTTP3DirectoryListing(path: "/", entries: Self.entries).json
        let array = try #require(try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [[String: Any]])
        #expect(array.count == 4)
        #expect(array[0]["name"] as? String == "z dir" && array[0]["url"] as? String == "./z%20dir/")
        #expect(array[1]["name"] as? String == "<script>&\"x\"")
        #expect(array[2]["modified"] as? String == "1994-11-06T08:49:37Z" && array[2]["size"] as? Int == 2)
    }

    @Test(arguments: [
        ("application/json", true), ("text/html, application/json", false), ("application/json, text/html;q=0.9", true),
        ("text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8", false), ("application/json;q=0", false), ("*/*", false),
    ])
    func acceptPicksJSONOnlyWhenPreferred(accept: String, json: Bool) {
        #expect(HTTP3DirectoryListing.prefersJSON(accept: accept) == json)
    }
}
