#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import ArgumentParser
import QuicTransport

/// How `--stats` prints a connection's establishment and data-transfer reports.
public enum ReportStyle: String, ExpressibleByArgument, CaseIterable, Sendable {
    case text, json
}

extension AsyncParsableCommand {
    /// Parses and runs the command as `main()` does, reading a bare `--stats` as `--stats=text`:
    /// ArgumentParser options always take a value, and curl-style tools want both forms.
    /// With `joiningPositionalValues`, many values of the command's positional argument reach
    /// the parser as one (`PositionalValues`), which the command's `validate()` splits.
    public static func mainAcceptingBareStats(joiningPositionalValues: Bool = false) async {
        var arguments = CommandLine.arguments.dropFirst().map { $0 == "--stats" ? "--stats=text" : $0 }
        if joiningPositionalValues, let joined = PositionalValues.joined(arguments, for: Self.self) { arguments = joined }
        do {
            var command = try parseAsRoot(arguments)
            if var asyncCommand = command as? any AsyncParsableCommand {
                try await asyncCommand.run()
            } else {
                try command.run()
            }
        } catch {
            exit(withError: error)
        }
    }
}

/// The `--stats=json` object: `fields` first (string values, nil as null), then the
/// establishment and data-transfer reports when there are any.
public func reportJSON(
    _ fields: [(name: String, value: String?)] = [],
    establishment: QUICEstablishmentReport?,
    transfer: QUICDataTransferReport?
) -> String {
    var members = fields.map { name, value in "\"\(name)\":" + (value.map(jsonString) ?? "null") }
    if let establishment { members.append("\"establishment\":{\(establishment.jsonMembers)}") }
    if let transfer { members.append("\"transfer\":{\(transfer.jsonMembers)}") }
    return "{" + members.joined(separator: ",") + "}"
}

/// A JSON string literal (RFC 8259 §7).
private func jsonString(_ text: String) -> String {
    let data = (try? JSONEncoder().encode(text)) ?? Data("\"\"".utf8)
    return String(decoding: data, as: UTF8.self)
}
