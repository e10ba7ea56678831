import ArgumentParser

/// How `--stats` prints a connection's establishment and data-transfer reports.
public enum ReportStyle: String, ExpressibleByArgument, CaseIterable, Sendable {
    case text, json
}

extension AsyncParsableCommand {
    /// Parses and runs the command as `main()` does, reading a bare `--stats` as `--stats=text`:
    /// ArgumentParser options always take a value, and curl-style tools want both forms.
    public static func mainAcceptingBareStats() async {
        let arguments = CommandLine.arguments.dropFirst().map { $0 == "--stats" ? "--stats=text" : $0 }
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
