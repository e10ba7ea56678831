import CommandLineSupport

/// Fails the test with "`message` after N s" instead of hanging when `body` takes longer than
/// `seconds`, but at least 30 s, stretched by `TestEnvironment.timeScale`.
///
/// The bound only keeps a broken test from hanging: no test asserts that it runs out, so a
/// longer one loses no assertion. Shorter ones failed tests that were fine, since on a loaded
/// 2-core CI machine the whole test process has stalled for several seconds at a time (a
/// 200 KB echo that takes milliseconds timed out at 10 s while dozens of tests finished at once).
package func within<T: Sendable>(
    _ seconds: Double,
    _ message: String = "timed out",
    _ body: @escaping @Sendable () async throws -> T
) async throws -> T {
    let seconds = TestEnvironment.scaled(max(seconds, 30))
    return try await withDeadline(seconds: seconds, timeoutError: { TimeoutError(message: "\(message) after \(seconds) s") }, body)
}

/// What `within` throws when its bound runs out.
package struct TimeoutError: Error, CustomStringConvertible {
    package let message: String
    package var description: String { message }
}
