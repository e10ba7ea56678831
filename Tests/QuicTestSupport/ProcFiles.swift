import Foundation

/// The whole of a `/proc` file. The kernel reports these files' size as 0, and Foundation's
/// `String(contentsOfFile:)` and `Data(contentsOf:)` then read only their first 4 KiB: past
/// about 30 sockets, `/proc/net/udp` lost the port a test waited for.
package func readProcFile(_ path: String) throws -> Data {
    try FileHandle(forReadingFrom: URL(fileURLWithPath: path)).readToEnd() ?? Data()
}
