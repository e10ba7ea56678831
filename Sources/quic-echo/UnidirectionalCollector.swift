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
    }

    /// The streams seen so far and the waiters to wake on the next change. One lock guards
    /// both, so a waiter that finds nothing registers before any later change can notify:
    /// checking under one lock and registering under another lost the wake-up when the last
    /// bytes arrived in between, and the echo then hung until its deadline.
    private struct State {
        var entries: [Int: Entry] = [:]
        var waiters: [CheckedContinuation<Void, Never>] = []
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
                update { $0[id]!.resetCode = UInt64.max }
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

    private func waitFor<T>(_ prefix: String, _ extract: @escaping (Entry) -> T?) async throws -> T {
        let marker = Data(prefix.utf8)
        func find(in entries: [Int: Entry]) -> T? {
            for entry in entries.values where entry.bytes.starts(with: marker) {
                if let value = extract(entry) { return value }
            }
            return nil
        }
        while true {
            try Task.checkCancellation()
            var found: T?
            await withCheckedContinuation { continuation in
                let wakeNow: Bool = state.withLockedValue { state in
                    found = find(in: state.entries)
                    if found != nil { return true }
                    state.waiters.append(continuation)
                    return false
                }
                if wakeNow { continuation.resume() }
            }
            if let found { return found }
        }
    }

    /// Applies a change to the entries and wakes every waiter to look again.
    private func update(_ change: (inout [Int: Entry]) -> Void) {
        let waiting = state.withLockedValue { state in
            change(&state.entries)
            defer { state.waiters.removeAll() }
            return state.waiters
        }
        for continuation in waiting { continuation.resume() }
    }
}
