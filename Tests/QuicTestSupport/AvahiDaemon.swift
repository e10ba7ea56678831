import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Makes sure avahi-daemon runs on a D-Bus system bus, for the Bonjour tests.
///
/// When no system bus is listening (`/run/dbus/system_bus_socket`) it starts one
/// (`dbus-daemon --system --fork`); when no avahi-daemon runs it starts one as root
/// (`--daemonize --no-drop-root`) with a configuration of its own: multicast DNS on the
/// loopback interface only (`allow-interfaces=lo`), so the tests' announcements never leave the
/// machine, and no wide-area DNS-SD. A daemon already running is used as it is. Anything
/// missing fails the test with what to install or run.
package enum AvahiDaemon {
    private static let configuration = """
        [server]
        allow-interfaces=lo
        use-ipv4=yes
        use-ipv6=yes
        enable-dbus=yes
        ratelimit-interval-usec=1000000
        ratelimit-burst=1000
        [wide-area]
        enable-wide-area=no
        [publish]
        publish-hinfo=no
        publish-workstation=no

        """

    /// Starts what is missing, once per test process; throws with how to fix what cannot start.
    package static func ensureRunning() async throws {
        try await started.value
    }

    private static let started = Task<Void, any Error> {
        let install = "run `bash scripts/setup` (apt-get install -y avahi-daemon avahi-utils libavahi-compat-libdnssd1 dbus)"
        let avahi = try TestEnvironment.systemTool("avahi-daemon", package: "avahi-daemon")
        if try await run(avahi, ["--check"]) == 0 { return }
        guard getuid() == 0 else {
            throw SetupError("avahi-daemon is not running and only root can start it here: start it (service avahi-daemon start) or run the tests as root")
        }
        if !FileManager.default.fileExists(atPath: "/run/dbus/system_bus_socket") {
            let dbus = try TestEnvironment.systemTool("dbus-daemon", package: "dbus")
            try? FileManager.default.createDirectory(atPath: "/run/dbus", withIntermediateDirectories: true)
            let status = try await run(dbus, ["--system", "--fork"])
            guard status == 0 else { throw SetupError("dbus-daemon --system --fork failed with status \(status); \(install)") }
        }
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("quic-tests-avahi-daemon.conf").path
        try configuration.write(toFile: path, atomically: true, encoding: .utf8)
        let status = try await run(avahi, ["--daemonize", "--no-drop-root", "--file", path])
        guard status == 0 else { throw SetupError("avahi-daemon --daemonize failed with status \(status); \(install)") }
        // The daemon is ready once it has registered on the bus and claimed its host name.
        let deadline = ContinuousClock.now + .seconds(10)
        while ContinuousClock.now < deadline {
            if try await run(avahi, ["--check"]) == 0 {
                try await Task.sleep(for: .milliseconds(500))
                return
            }
            try await Task.sleep(for: .milliseconds(100))
        }
        throw SetupError("avahi-daemon started but is not running; \(install)")
    }

    private static func run(_ tool: URL, _ arguments: [String]) async throws -> Int32 {
        try await ChildProcess(tool, arguments).waitForExit(seconds: 20)
    }
}
