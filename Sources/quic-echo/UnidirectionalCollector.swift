import Dispatch
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import NIOConcurrencyHelpers
import QuicTransport

/// Gathers the server's unidirectional echo streams and matches them to what the client sent by
/// their prefix, since the order of server streams is not tied to the order of client streams.
final class UnidirectionalCollector: Sendable {
    private struct Entry {
        var bytes = Data()
        var finished = false
        var resetCode: UInt64?
        /// Why the stream ended otherwise than with FIN or a reset (the tunnel's end, say).
        var failure: String?
    }

    /// The streams seen so far and the waiters to wake on the next change. One lock guards
    /// both, so a waiter that finds nothing registers before any later change can notify:
    /// checking under one lock and registering under another lost the wake-up when the last
    /// bytes arrived in between, and the echo then hung until its deadline.
    private struct State {
        var entries: [Int: Entry] = [:]
        var waiters: [Int: CheckedContinuation<Void, Never>] = [:]
        var nextWaiter = 0
    }

    private let state = NIOLockedValueBox(State())

    func accept(_ stream: NWConnection) {
        let id = Int((stream.metadata(definition: NWProtocolQUIC.definition) as! NWProtocolQUIC.Metadata).streamIdentifier)
        update { $0[id] = Entry() }
        stream.start(queue: DispatchQueue(label: "quic-echo.uni"))
        Task {
            do {
                while true {
                    let (content, isComplete) = try await stream.receive(minimumIncompleteLength: 1, maximumLength: 65_536)
                    update {
                        $0[id]!.bytes += content ?? Data()
                        $0[id]!.finished = isComplete
                    }
                    if isComplete { return }
                }
            } catch let NWError.quic(error) where error.kind == .streamReset {
                update { $0[id]!.resetCode = error.applicationErrorCode ?? 0 }
            } catch {
                update { $0[id]!.failure = "\(error)" }
            }
        }
    }

    /// The whole echoed stream that starts with `prefix`.
    func message(withPrefix prefix: String) async throws -> Data {
        try await waitFor(prefix) { $0.finished ? $0.bytes : nil }
    }

    /// Returns once some bytes of the stream with `prefix` have arrived.
    func firstBytes(withPrefix prefix: String) async throws {
        _ = try await waitFor(prefix) { $0.bytes.count >= prefix.utf8.count ? true : nil }
    }

    /// The reset code of the stream with `prefix`.
    func resetCode(withPrefix prefix: String) async throws -> UInt64 {
        try await waitFor(prefix) { $0.resetCode }
    }

    /// Waits until a stream starting with `prefix` gives `extract` a value, or has failed (which
    /// throws). Cancellation ends the wait at once: a check that failed elsewhere cancels this one.
    private func waitFor<T>(_ prefix: String, _ extract: @escaping (Entry) -> T?) async throws -> T {
        let marker = Data(prefix.utf8)
        func find(in entries: [Int: Entry]) -> Result<T, EchoError>? {
            for entry in entries.values where entry.bytes.starts(with: marker) {
                if let value = extract(entry) { return .success(value) }
                if let failure = entry.failure { return .failure(EchoError("the server's \(prefix) stream: \(failure)")) }
            }
            return nil
        }
        while true {
            try Task.checkCancellation()
            var found: Result<T, EchoError>?
            let waiter = state.withLockedValue { state in
                defer { state.nextWaiter += 1 }
                return state.nextWaiter
            }
            await withTaskCancellationHandler {
                await withCheckedContinuation { continuation in
                    let wakeNow: Bool = state.withLockedValue { state in
                        found = find(in: state.entries)
                        if found != nil || Task.isCancelled { return true }
                        state.waiters[waiter] = continuation
                        return false
                    }
                    if wakeNow { continuation.resume() }
                }
            } onCancel: {
                state.withLockedValue { $0.waiters.removeValue(forKey: waiter) }?.resume()
            }
            if let found { return try found.get() }
        }
    }

    /// Applies a change to the entries and wakes every waiter to look again.
    private func update(_ change: (inout [Int: Entry]) -> Void) {
        let waiting = state.withLockedValue { state in
            change(&state.entries)
            defer { state.waiters.removeAll() }
            return state.waiters.values
        }
        for continuation in waiting { continuation.resume() }
    }
}
