import Foundation
#if canImport(Glibc)
import Glibc
#endif
import NIOConcurrencyHelpers

/// A child process whose output the test reads: a server left running, or a client run to completion.
package final class ChildProcess: Sendable {
    private let process: Process
    private let output = NIOLockedValueBox(Data())
    private let errorOutput = NIOLockedValueBox(Data())
    /// How many of the two pipes have reached end of file.
    private let closedPipes = NIOLockedValueBox(0)

    /// Starts `executable`. Its standard input is `input`, then end of file; nothing if nil.
    package init(_ executable: URL, _ arguments: [String], environment: [String: String] = [:], input: Data? = nil) throws {
        let process = Process()
        process.executableURL = executable
        process.arguments = arguments
        process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        let stdin = input.map { _ in Pipe() }
        process.standardInput = stdin ?? FileHandle.nullDevice
        let stdout = Pipe()
        let stderr = Pipe()
        process.standardOutput = stdout
        process.standardError = stderr
        try process.run()
        if let stdin, let input {
            // A pipe holds 64 KiB: larger inputs are written from a thread of their own.
            let handle = stdin.fileHandleForWriting
            Thread {
                handle.write(input)
                try? handle.close()
            }.start()
        }
        // Each pipe is drained by blocking reads on a thread of its own until end of file.
        // `FileHandle.readabilityHandler` would put a libdispatch read source on it, and tearing
        // those down while other tests make new ones can crash libdispatch's event loop on Linux
        // (a freed epoll muxnote, swift-corelibs-libdispatch#949): it took the test runner down
        // once in CI. The handle stays alive in its thread until the pipe ends.
        let closedPipes = self.closedPipes
        for (pipe, buffer) in [(stdout, self.output), (stderr, self.errorOutput)] {
            let handle = pipe.fileHandleForReading
            Thread {
                var chunk = [UInt8](repeating: 0, count: 65_536)
                while true {
                    let count = chunk.withUnsafeMutableBytes { read(handle.fileDescriptor, $0.baseAddress, $0.count) }
                    if count > 0 {
                        buffer.withLockedValue { $0.append(contentsOf: chunk[..<count]) }
                    } else if count < 0 && errno == EINTR {
                        continue
                    } else {
                        break  // End of file, or the pipe failed: nothing more will come.
                    }
                }
                closedPipes.withLockedValue { $0 += 1 }
            }.start()
        }
        self.process = process
        ChildProcess.running.withLockedValue { _ = $0.insert(process.processIdentifier) }
    }

    package var standardOutput: String { output.withLockedValue { String(decoding: $0, as: UTF8.self) } }
    package var standardError: String { errorOutput.withLockedValue { String(decoding: $0, as: UTF8.self) } }
    package var isRunning: Bool { process.isRunning }
    package var processIdentifier: Int32 { process.processIdentifier }

    /// Waits for a line of stdout that contains `marker` and returns it.
    package func waitForLine(containing marker: String, seconds: Double = 15) async throws -> String {
        let deadline = ContinuousClock.now + .milliseconds(Int(TestEnvironment.scaled(seconds) * 1000))
        while ContinuousClock.now < deadline {
            // Only lines the process has ended: a pipe can hand over `LISTENING` before the port
            // that follows it on the same line.
            let output = standardOutput
            let complete = output.lastIndex(of: "\n").map { output[..<$0] } ?? ""
            if let line = complete.split(separator: "\n").first(where: { $0.contains(marker) }) {
                return String(line)
            }
            // A process that exited may still have output in its pipes: look once more after they end.
            if !process.isRunning && closedPipes.withLockedValue({ $0 }) == 2 { break }
            try await Task.sleep(for: .milliseconds(20))
        }
        if let line = standardOutput.split(separator: "\n").first(where: { $0.contains(marker) }) { return String(line) }
        throw SetupError("no line with '\(marker)' from \(process.executableURL?.lastPathComponent ?? "?"); stdout: \(standardOutput) stderr: \(standardError)")
    }

    /// Waits for the process to exit and returns its status; kills it after `seconds`.
    package func waitForExit(seconds: Double = 30) async throws -> Int32 {
        let deadline = ContinuousClock.now + .milliseconds(Int(TestEnvironment.scaled(seconds) * 1000))
        while process.isRunning {
            if ContinuousClock.now > deadline {
                stop()
                throw SetupError("\(process.executableURL?.lastPathComponent ?? "?") did not finish in \(seconds) s; stderr: \(standardError)")
            }
            try await Task.sleep(for: .milliseconds(20))
        }
        // Everything the process wrote is read once both pipes reach end of file. A grandchild
        // that inherited them can hold them open, so this wait is bounded.
        let drained = ContinuousClock.now + .seconds(10)
        while closedPipes.withLockedValue({ $0 }) < 2, ContinuousClock.now < drained {
            try await Task.sleep(for: .milliseconds(10))
        }
        return process.terminationStatus
    }

    /// Sends SIGTERM, for tests of a graceful shutdown. Children started from the test runner's
    /// threads may inherit a signal mask that blocks SIGTERM, so peers are stopped with `stop()`.
    package func terminate() {
        let pid = process.processIdentifier
        if pid > 0 { kill(pid, SIGTERM) }
    }

    /// Stops the process for certain (SIGKILL), whatever its signal mask.
    package func stop() {
        let pid = process.processIdentifier
        if pid > 0 { kill(pid, SIGKILL) }
        ChildProcess.running.withLockedValue { _ = $0.remove(pid) }
    }

    deinit { stop() }

    /// Every child still running, killed when the test process exits so no peer outlives it.
    static let running: NIOLockedValueBox<Set<Int32>> = {
        atexit {
            for pid in ChildProcess.running.withLockedValue({ $0 }) { kill(pid, SIGKILL) }
        }
        return NIOLockedValueBox([])
    }()
}

