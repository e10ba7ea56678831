import ArgumentParser
import CommandLineSupport
import Testing

/// Many URLs reach swift-argument-parser as one value (its parsing is quadratic in their
/// number), and come out as the same command the line as given would make.
@Suite("Positional values joined for the parser")
struct PositionalValuesTests {
    /// h3get's shape: options with and without values, one repeated positional argument.
    struct Fetch: ParsableCommand {
        @Option(name: [.short, .customLong("output")]) var outputs: [String] = []
        @Option(name: .customShort("H")) var header: [String] = []
        @Flag(name: .short) var silent = false
        @Flag(name: .long) var verbose = false
        @Option(name: .long) var stats: String?
        @Argument var urls: [String]

        mutating func validate() throws { urls = PositionalValues.split(urls) }
    }

    /// Two positional arguments: nothing tells whose a value would be.
    struct TwoPositionals: ParsableCommand {
        @Argument var host: String
        @Argument var ports: [String]
    }

    static func parse(_ arguments: [String]) throws -> Fetch { try Fetch.parseAsRoot(arguments) as! Fetch }

    @Test func valuesMoveAndOptionsKeepTheirOwn() throws {
        let line = [
            "https://a/1", "-o", "one", "https://a/2", "--output", "https://not-a-url-but-a-file", "-s",
            "https://a/3", "-H", "x: y", "--stats=json", "--verbose", "https://a/4",
        ]
        let joined = try #require(PositionalValues.joined(line, for: Fetch.self, minimumCount: 2))
        #expect(joined == [
            "https://a/1\nhttps://a/2\nhttps://a/3\nhttps://a/4", "-o", "one", "--output", "https://not-a-url-but-a-file", "-s",
            "-H", "x: y", "--stats=json", "--verbose",
        ])
        let viaJoined = try Self.parse(joined)
        let asGiven = try Self.parse(line)
        #expect(viaJoined.urls == asGiven.urls && asGiven.urls == ["https://a/1", "https://a/2", "https://a/3", "https://a/4"])
        #expect(viaJoined.outputs == asGiven.outputs && viaJoined.header == asGiven.header)
        #expect(viaJoined.silent && viaJoined.verbose && viaJoined.stats == "json")
    }

    @Test func linesThatCouldMeanSomethingElseGoAsGiven() {
        let urls = ["https://a/1", "https://a/2", "https://a/3"]
        #expect(PositionalValues.joined(urls, for: Fetch.self) == nil, "fewer than \(PositionalValues.minimumCount) values")
        #expect(PositionalValues.joined(urls + ["--", "-o"], for: Fetch.self, minimumCount: 2) == nil, "after --, -o is a value")
        #expect(PositionalValues.joined(urls + ["-so", "file"], for: Fetch.self, minimumCount: 2) == nil, "a group of short options")
        #expect(PositionalValues.joined(["host"] + urls, for: TwoPositionals.self, minimumCount: 2) == nil)
        #expect(PositionalValues.joined(urls + ["https://a/\n4"], for: Fetch.self, minimumCount: 2) == nil, "a value with a newline")
        #expect(PositionalValues.joined(urls, for: Fetch.self, minimumCount: 2) != nil)
    }

    @Test func thousandsOfValuesParseAsFewDo() throws {
        let urls = (0..<5_000).map { "https://a/\($0)" }
        let line = ["-s"] + urls + ["-H", "x: y"]
        let joined = try #require(PositionalValues.joined(line, for: Fetch.self))
        #expect(joined.count == 4)
        let fetch = try Self.parse(joined)
        #expect(fetch.urls == urls && fetch.header == ["x: y"] && fetch.silent)
    }
}
