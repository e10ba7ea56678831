import QuicTransport

/// The response a ``HTTP3Server/PromiseResponder`` owes the request it took: complete it once,
/// from any thread, and the response goes out from the connection's loop.
///
/// A failure answers 500, as a handler's error does, and costs only the request's own stream.
/// So does a promise dropped without an answer, which would otherwise hold its stream open until
/// the connection closes. Only the first completion counts, as with NIO's promises; a promise
/// whose responder passed the request on completes nothing, even if completed before it did.
///
/// Not generic, unlike an `EventLoopPromise`: a framework completes it from its own future's
/// callback, and no second future, with the generic metadata look-ups each of its steps makes,
/// stands between the framework and the stream.
// @unchecked Sendable: `state` is read and written only on the connection's loop, and by
// `deinit`, which runs after the last reference, and so every completion, has gone.
public final class HTTP3ResponsePromise: @unchecked Sendable {
    private let connection: HTTP3ServerConnection
    private let streamID: Int64
    /// The request is a HEAD request: the answer goes without its content (RFC 9110 §9.3.2).
    private let toHead: Bool
    private var state = State.deciding(early: nil)

    private enum State {
        /// The responder has not returned yet: whether it takes the request is not known, and a
        /// completion on the loop waits for that.
        case deciding(early: Result<HTTP3ServerResponse, any Error>?)
        /// The responder took the request and owes its answer.
        case owed
        /// Answered, or void.
        case settled
    }

    init(connection: HTTP3ServerConnection, streamID: Int64, toHead: Bool) {
        self.connection = connection
        self.streamID = streamID
        self.toHead = toHead
    }

    /// Sends `response`.
    public func succeed(_ response: HTTP3ServerResponse) {
        complete(with: .success(response))
    }

    /// Answers 500 and logs `error`, as for a handler's error.
    public func fail(_ error: any Error) {
        complete(with: .failure(error))
    }

    /// Sends the response, or answers 500 for the error.
    public func complete(with result: Result<HTTP3ServerResponse, any Error>) {
        let eventLoop = connection.driver.eventLoop
        if eventLoop.inEventLoop {
            settle(result)
        } else {
            eventLoop.execute { self.settle(result) }
        }
    }

    /// The responder took the request: a completion made while it decided goes out now.
    func take() {
        guard case .deciding(let early) = state else { return }
        state = .owed
        if let early { settle(early) }
    }

    /// The responder passed the request on to the handler: nothing is owed.
    func void() {
        state = .settled
    }

    private func settle(_ result: Result<HTTP3ServerResponse, any Error>) {
        switch state {
        case .deciding(early: nil):
            state = .deciding(early: result)
        case .owed:
            state = .settled
            connection.answer(streamID, with: result, toHead: toHead)
        case .deciding, .settled:
            break
        }
    }

    deinit {
        guard case .owed = state else { return }
        let (connection, streamID, toHead) = (connection, streamID, toHead)
        connection.driver.eventLoop.execute {
            connection.answer(streamID, with: .failure(HTTP3ResponsePromiseError.dropped), toHead: toHead)
        }
    }
}

/// Why a request taken by a ``HTTP3Server/PromiseResponder`` was answered 500 without its
/// response.
public enum HTTP3ResponsePromiseError: Error, Equatable, CustomStringConvertible {
    /// The responder let go of the request's promise without completing it.
    case dropped

    public var description: String {
        switch self {
        case .dropped: "the responder dropped the request's promise without completing it"
        }
    }
}
