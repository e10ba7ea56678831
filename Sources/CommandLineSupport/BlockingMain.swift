import ArgumentParser
import Dispatch

extension AsyncParsableCommand {
    /// Runs the command as its async `main()` does, with the main thread blocked on a semaphore
    /// instead of parked in `dispatch_main`.
    ///
    /// Valgrind 3.19 (Debian 12's) crashes on Swift's async entry point, in dispatch's
    /// `sigsuspend`, so this is what lets `valgrind --tool=callgrind` count a tool's instructions
    /// (`scripts/bench`). Nothing of ours runs on the main actor.
    public static func mainWithBlockedMainThread() {
        let finished = DispatchSemaphore(value: 0)
        Task {
            await main()
            finished.signal()
        }
        finished.wait()
    }
}
