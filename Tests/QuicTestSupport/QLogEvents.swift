import Foundation

/// One event of a JSON-SEQ qlog trace (`.sqlog`, RFC 7464): its time in milliseconds, its name
/// and its data.
package struct QLogEvent {
    package let time: Double
    package let name: String
    package let data: [String: Any]

    /// The packet type of a `transport:packet_*` event's header, if it has one.
    package var packetType: String? { (data["header"] as? [String: Any])?["packet_type"] as? String }
    /// The frames of a packet event.
    package var frames: [[String: Any]] { data["frames"] as? [[String: Any]] ?? [] }

    package struct MalformedRecord: Error, CustomStringConvertible {
        package let path: String
        package var description: String { "\(path) holds a record that is not a JSON object" }
    }

    /// Every event in the trace at `path`, after its header record. A record that is not a JSON
    /// object fails the read: the writer must only ever leave whole records.
    package static func read(_ path: String) throws -> [QLogEvent] {
        let bytes = try Data(contentsOf: URL(fileURLWithPath: path))
        return try bytes.split(separator: 0x1E).dropFirst().compactMap { record in
            guard let object = try JSONSerialization.jsonObject(with: Data(record)) as? [String: Any] else {
                throw MalformedRecord(path: path)
            }
            guard let name = object["name"] as? String, let time = object["time"] as? Double else { return nil }
            return QLogEvent(time: time, name: name, data: object["data"] as? [String: Any] ?? [:])
        }
    }
}

extension QLogEvent {
    /// The text of the trace in `directory` whose name ends with `suffix`, once its connection
    /// has written `connectivity:connection_closed`: traces are buffered until then, so a peer
    /// stopped earlier would leave its tail unwritten. A connection whose CONNECTION_CLOSE was
    /// lost still ends at the idle timeout (30 s), hence the bound.
    package static func closedTrace(in directory: String, named suffix: String, within seconds: Double = 45) async throws -> String {
        var text = ""
        let closed = await eventually(within: seconds) {
            let name = (try? FileManager.default.contentsOfDirectory(atPath: directory))?.first { $0.hasSuffix(suffix) }
            text = name.flatMap { try? String(contentsOfFile: directory + "/" + $0, encoding: .utf8) } ?? ""
            return text.contains("\"connectivity:connection_closed\"")
        }
        guard closed else { throw SetupError("no closed trace *\(suffix) in \(directory) after \(seconds) s") }
        return text
    }

    /// The text of the trace at `path` once its writer has closed the file, which it does with
    /// the connection's last record, when the connection is freed: no descriptor of this
    /// process names it any more (`/proc/self/fd`). For traces this process writes.
    package static func finishedTrace(at path: String, within seconds: Double = 45) async throws -> String {
        let finished = await eventually(within: seconds) {
            FileManager.default.fileExists(atPath: path) && !isOpenInThisProcess(path)
        }
        guard finished else { throw SetupError("the trace \(path) was still being written after \(seconds) s") }
        return try String(contentsOfFile: path, encoding: .utf8)
    }
}

/// Whether a descriptor of this process has the file at `path` open.
package func isOpenInThisProcess(_ path: String) -> Bool {
    let target = URL(fileURLWithPath: path).resolvingSymlinksInPath().path
    let descriptors = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
    return descriptors.contains { (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/" + $0)) == target }
}
