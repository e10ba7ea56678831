import Dispatch

/// Runs a command's async `main()` with the main thread blocked on a semaphore instead of
/// parked in `dispatch_main`: `runWithBlockedMainThread { await Tool.main() }`.
///
/// Valgrind 3.19 (Debian 12's) crashes on Swift's async entry point, in dispatch's
/// `sigsuspend`, so this is what lets `valgrind --tool=callgrind` count a tool's instructions
/// (`scripts/bench`). Nothing of ours runs on the main actor.
public func runWithBlockedMainThread(_ main: @escaping @Sendable () async -> Void) {
    let finished = DispatchSemaphore(value: 0)
    Task {
        await main()
        finished.signal()
    }
    finished.wait()
}
