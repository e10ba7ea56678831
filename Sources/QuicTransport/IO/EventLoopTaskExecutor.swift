import NIOCore

/// Runs Swift tasks on one connection's event loop (SE-0417 task executors).
///
/// A task started with this executor as its preference begins on the loop's thread and comes
/// back to it after each suspension, so work that answers a connection (an HTTP/3 handler, say)
/// runs beside that connection's I/O: no hop to the global pool and back, no thread wake-up per
/// request. Such work must not block, as nothing else on the loop runs meanwhile.
package final class EventLoopTaskExecutor: TaskExecutor {
    package let eventLoop: QUICEventLoop

    package init(eventLoop: QUICEventLoop) {
        self.eventLoop = eventLoop
    }

    package func enqueue(_ job: consuming ExecutorJob) {
        // A loop that has shut down passes the job on, so the task ends instead of hanging.
        eventLoop.enqueueOrRunElsewhere(UnownedJob(job), executor: asUnownedTaskExecutor())
    }
}
