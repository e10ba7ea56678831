import NIOConcurrencyHelpers

/// Runs `body`, failing with `timeoutError()` once `seconds` have passed.
///
/// Not a task group: a group waits for all of its children, so a body stuck in a wait that does
/// not answer cancellation (a receive from a silent peer) would hold the timeout back forever.
/// Whichever ends first resumes the caller; at the deadline the body is cancelled and not
/// waited for.
package func withDeadline<T: Sendable>(
    seconds: Double,
    timeoutError: @escaping @Sendable () -> any Error,
    _ body: @escaping @Sendable () async throws -> T
) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        let first = FirstOutcome(continuation)
        let work = Task {
            do {
                first.resume(with: .success(try await body()))
            } catch {
                first.resume(with: .failure(error))
            }
        }
        Task {
            try? await Task.sleep(for: .milliseconds(Int(seconds * 1000)))
            first.resume(with: .failure(timeoutError()))
            work.cancel()
        }
    }
}

/// Resumes a continuation once, with whichever outcome arrives first.
// @unchecked Sendable: `continuation` is read and cleared only under `lock`.
private final class FirstOutcome<T: Sendable>: @unchecked Sendable {
    private let lock = NIOLock()
    private var continuation: CheckedContinuation<T, any Error>?

    init(_ continuation: CheckedContinuation<T, any Error>) {
        self.continuation = continuation
    }

    func resume(with outcome: Result<T, any Error>) {
        lock.lock()
        let waiting = continuation
        continuation = nil
        lock.unlock()
        waiting?.resume(with: outcome)
    }
}
