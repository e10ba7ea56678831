import Foundation
import Testing

/// Where the package's built executables and the repository live.
package enum TestEnvironment {
    package static let repositoryRoot = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// How many times longer than usual the tests' time bounds are: `QUIC_TEST_TIME_SCALE`,
    /// which `scripts/test --sanitize` sets because a sanitizer slows the code 2–15×; 1 otherwise.
    /// The bounds only keep a broken test from hanging, so stretching them loses no assertion.
    package static let timeScale: Double = ProcessInfo.processInfo.environment["QUIC_TEST_TIME_SCALE"]
        .flatMap(Double.init).map { max(1, $0) } ?? 1

    /// `seconds` stretched by `timeScale`.
    package static func scaled(_ seconds: Double) -> Double { seconds * timeScale }

    /// `duration` stretched by `timeScale`.
    package static func scaled(_ duration: Duration) -> Duration { duration * timeScale }

    /// A suite's time limit of `minutes`, stretched by `timeScale`.
    package static func minutes(_ minutes: Int) -> TimeLimitTrait.Duration {
        .minutes(Int((Double(minutes) * timeScale).rounded(.up)))
    }

    /// A product built next to the test bundle; the message says how to build it when missing.
    package static func executable(_ name: String) throws -> URL {
        var directory = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
        while directory.path != "/" {
            let candidate = directory.appendingPathComponent(name)
            if FileManager.default.isExecutableFile(atPath: candidate.path) { return candidate }
            if directory.lastPathComponent == "debug" || directory.lastPathComponent == "release" { break }
            directory.deleteLastPathComponent()
        }
        throw SetupError("\(name) is not built next to the tests; run `swift build --product \(name)` (scripts/test does this)")
    }

    /// A Debian program the tests use as an independent peer; the message says which package has it.
    package static func systemTool(_ name: String, package debianPackage: String) throws -> URL {
        for directory in ["/usr/bin", "/usr/local/bin", "/usr/sbin"] {
            let candidate = URL(fileURLWithPath: directory).appendingPathComponent(name)
            if FileManager.default.isExecutableFile(atPath: candidate.path) { return candidate }
        }
        throw SetupError("\(name) is missing: run `bash scripts/setup` (apt-get install -y \(debianPackage))")
    }

    /// The path of one of the aioquic peer scripts in Tests/Interop/aioquic.
    package static func aioquicScript(_ name: String) -> String {
        repositoryRoot.appendingPathComponent("Tests/Interop/aioquic/\(name)").path
    }

    /// aioquic's interpreter from the repository's virtual environment.
    package static func python() throws -> URL {
        let python = repositoryRoot.appendingPathComponent(".venv/bin/python")
        guard FileManager.default.isExecutableFile(atPath: python.path) else {
            throw SetupError("aioquic is not installed: run `bash scripts/setup` (it creates .venv with aioquic==1.7.2)")
        }
        return python
    }
}

package struct SetupError: Error, CustomStringConvertible {
    package let description: String
    package init(_ description: String) { self.description = description }
}

extension TestEnvironment {
    /// Runs scripts/qlog-check over traces; returns its exit status and output.
    package static func checkQLog(_ paths: [String]) async throws -> (status: Int32, output: String) {
        let checker = repositoryRoot.appendingPathComponent("scripts/qlog-check").path
        let process = try ChildProcess(URL(fileURLWithPath: "/usr/bin/env"), ["python3", checker] + paths)
        let status = try await process.waitForExit()
        return (status, process.standardOutput + process.standardError)
    }
}
