#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import NIOConcurrencyHelpers

/// The async forms over a TCP, TLS or UDP socket: unlike the QUIC stream's, which run to
/// completion, these honour task cancellation. A receive still waiting, or a send not yet handed
/// to the socket, ends with `NWError.posix(.ECANCELED)`; no received byte is lost, because a
/// receive takes bytes only when it completes.
extension NWConnection {
    /// Tokens that name one async call for `abandon(token:)`.
    private static let nextToken = NIOLockedValueBox<UInt64>(1)

    private static func makeToken() -> UInt64 {
        nextToken.withLockedValue { token in
            defer { token &+= 1 }
            return token
        }
    }

    /// A connection for a peer a socket listener accepted: `makeTransport` builds its socket side
    /// around the connection's state.
    convenience init(
        acceptedFrom remote: NWEndpoint,
        using parameters: NWParameters,
        makeTransport: (ObservableState<State>) -> any NWConnectionTransport
    ) {
        self.init(to: remote, using: parameters)
        socketTransport = makeTransport(observable)
    }

    func socketSend(_ transport: any NWConnectionTransport, content: Data?, isComplete: Bool) async throws {
        let token = Self.makeToken()
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let context: ContentContext = isComplete ? .finalMessage : .defaultMessage
                transport.send(
                    content: content, contentContext: context, isComplete: isComplete,
                    completion: .contentProcessed { error in
                        if let error { continuation.resume(throwing: error) } else { continuation.resume() }
                    },
                    delivery: .loop, token: token
                )
            }
        } onCancel: {
            transport.abandon(token: token)
        }
    }

    func socketReceive(_ transport: any NWConnectionTransport, minimum: Int, maximum: Int) async throws -> (content: Data?, isComplete: Bool) {
        let token = Self.makeToken()
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                transport.receive(
                    minimum: minimum, maximum: maximum,
                    completion: { data, _, isComplete, error in
                        if let error { continuation.resume(throwing: error) } else { continuation.resume(returning: (data, isComplete)) }
                    },
                    delivery: .loop, token: token
                )
            }
        } onCancel: {
            transport.abandon(token: token)
        }
    }
}
