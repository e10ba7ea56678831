#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import ArgumentParser

/// Many values for one repeated positional argument (h3get's URLs), passed to the parser as
/// one.
///
/// swift-argument-parser stores each value of a repeated positional argument by copying the
/// array of values so far (`ParsedValues.update`), so parsing takes time quadratic in their
/// number: for a thousand URLs, parsing takes longer than fetching them. The command line is given to the parser with those values joined by newlines into
/// one, in front; the command splits them again (`split`). No URL holds a newline (RFC 3986 §2).
public enum PositionalValues {
    /// Fewer values than this go to the parser as they are. Learning which options take a value
    /// (`_dumpHelp()` and its JSON) costs what the parser spends on about this many values.
    public static let minimumCount = 256

    /// What joins the values (a newline); no value holds it.
    static let separator = UInt8(ascii: "\n")

    /// `arguments` with the positional values joined into one, first; nil when the line must
    /// go to the parser as given: `Command` has subcommands or other positional arguments,
    /// the line holds `--` or a group of short options, or fewer than `minimumCount` values.
    ///
    /// Which tokens are values comes from the parser's own description of `Command`
    /// (`_dumpHelp()`): a token after an option that takes a value is that option's.
    public static func joined<Command: ParsableCommand>(
        _ arguments: [String], for command: Command.Type, minimumCount: Int = minimumCount
    ) -> [String]? {
        // Over the UTF-8 bytes: counting Characters would run grapheme breaking on every URL.
        let dash = UInt8(ascii: "-"), equals = UInt8(ascii: "=")
        guard arguments.count(where: { $0.utf8.first != dash }) >= max(2, minimumCount), let options = optionsTakingValues(of: command)
        else { return nil }
        var rest: [String] = []
        var values: [String] = []
        var index = arguments.startIndex
        while index < arguments.endIndex {
            let token = arguments[index]
            index += 1
            if token == "--" { return nil }
            let bytes = token.utf8
            guard bytes.first == dash, bytes.count > 1 else {
                guard !holdsSeparator(token) else { return nil }
                values.append(token)
                continue
            }
            rest.append(token)
            // `--name=value` carries its value; `-abc` may end in an option that takes one.
            if bytes.contains(equals) { continue }
            if bytes.count > 2, bytes.dropFirst().first != dash { return nil }
            if options.contains(token), index < arguments.endIndex {
                rest.append(arguments[index])
                index += 1
            }
        }
        guard values.count >= max(2, minimumCount) else { return nil }
        return [values.joined(separator: String(UnicodeScalar(separator)))] + rest
    }

    /// The values `joined` put into one, apart again; other values as they are.
    ///
    /// Scans each value's UTF-8 bytes in place: the generic `split` and `contains` of a
    /// `String.UTF8View` go through its index type for every byte.
    public static func split(_ values: [String]) -> [String] {
        guard values.contains(where: { holdsSeparator($0) }) else { return values }
        var split: [String] = []
        for var value in values {
            value.withUTF8 { bytes in
                var start = 0
                for index in bytes.indices where bytes[index] == separator {
                    split.append(String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self))
                    start = index + 1
                }
                split.append(String(decoding: UnsafeBufferPointer(rebasing: bytes[start...]), as: UTF8.self))
            }
        }
        return split
    }

    /// Whether `value` holds the separator, looked for in its UTF-8 bytes in place.
    private static func holdsSeparator(_ value: String) -> Bool {
        var value = value
        return value.withUTF8 { $0.contains(separator) }
    }

    /// The spellings (`-o`, `--output`) of the options that take a value; nil unless the
    /// command has no subcommand but `help` and exactly one positional argument, which repeats.
    private static func optionsTakingValues<Command: ParsableCommand>(of command: Command.Type) -> Set<String>? {
        guard let description = try? JSONDecoder().decode(ToolDescription.self, from: Data(command._dumpHelp().utf8)).command
        else { return nil }
        // The parser adds a `help` subcommand of its own to every command.
        guard (description.subcommands ?? []).allSatisfy({ $0.commandName == "help" }) else { return nil }
        let arguments = description.arguments ?? []
        let positionals = arguments.filter { $0.kind == "positional" }
        guard positionals.count == 1, positionals[0].isRepeating == true else { return nil }
        var spellings = Set<String>()
        for argument in arguments where argument.kind == "option" {
            for name in argument.names ?? [] { spellings.insert(name.kind == "long" ? "--" + name.name : "-" + name.name) }
        }
        return spellings
    }

    /// The parts of the parser's description of a command (`--experimental-dump-help`,
    /// ArgumentParserToolInfo's `ToolInfoV0`) that tell options, flags and positionals apart.
    private struct ToolDescription: Decodable {
        struct Command: Decodable {
            let arguments: [Argument]?
            let subcommands: [Subcommand]?
        }

        struct Argument: Decodable {
            /// `positional`, `option` (takes a value) or `flag`.
            let kind: String
            let names: [Name]?
            let isRepeating: Bool?
        }

        struct Name: Decodable {
            /// `long`, `short` or `longWithSingleDash`.
            let kind: String
            let name: String
        }

        struct Subcommand: Decodable {
            let commandName: String
        }

        let command: Command
    }
}
