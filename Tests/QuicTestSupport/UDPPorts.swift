import Foundation

/// Whether some socket on this machine is bound to UDP `port`, from the kernel's tables.
/// For peers that take a port number and print nothing when they are ready (gtlsserver).
package func udpPortIsBound(_ port: Int) -> Bool {
    for table in ["/proc/net/udp", "/proc/net/udp6"] {
        guard let text = try? String(decoding: readProcFile(table), as: UTF8.self) else { continue }
        for line in text.split(separator: "\n").dropFirst() {
            let fields = line.split(separator: " ", omittingEmptySubsequences: true)
            guard fields.count > 1, let local = fields[1].split(separator: ":").last else { continue }
            if Int(local, radix: 16) == port { return true }
        }
    }
    return false
}
