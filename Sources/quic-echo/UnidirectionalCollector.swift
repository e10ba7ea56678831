import Foundation
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

    private let entries = NIOLockedValueBox([Int: Entry]())
    private let changes = NIOLockedValueBox([CheckedContinuation<Void, Never>]())

    func accept(_ stream: NWConnection) {
        let id = Int((stream.metadata(definition: NWProtocolQUIC.definition) as! NWProtocolQUIC.Metadata).streamIdentifier)
        entries.withLockedValue { $0[id] = Entry() }
        stream.start(queue: DispatchQueue(label: "quic-echo.uni"))
        Task {
            do {
                while true {
                    let (content, isComplete) = try await stream.receive(minimumIncompleteLength: 1, maximumLength: 65_536)
                    entries.withLockedValue {
                        $0[id]!.bytes += content ?? Data()
                        $0[id]!.finished = isComplete
                    }
                    notify()
                    if isComplete { return }
                }
            } catch let NWError.quic(error) where error.kind == .streamReset {
                entries.withLockedValue { $0[id]!.resetCode = error.applicationErrorCode ?? 0 }
            } catch {
                entries.withLockedValue { $0[id]!.resetCode = UInt64.max }
            }
            notify()
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
        while true {
            try Task.checkCancellation()
            let found: T? = entries.withLockedValue { entries in
                for entry in entries.values where entry.bytes.starts(with: marker) {
                    if let value = extract(entry) { return value }
                }
                return nil
            }
            if let found { return found }
            await withCheckedContinuation { continuation in changes.withLockedValue { $0.append(continuation) } }
        }
    }

    private func notify() {
        let waiting = changes.withLockedValue { pending in
            defer { pending.removeAll() }
            return pending
        }
        for continuation in waiting { continuation.resume() }
    }
}
