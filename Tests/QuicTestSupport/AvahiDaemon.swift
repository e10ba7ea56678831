import Foundation
import NIOConcurrencyHelpers
#if canImport(Glibc)
import Glibc
#endif

/// Makes sure avahi-daemon runs on a D-Bus system bus, for the Bonjour tests.
///
/// When no system bus answers (`dbus-send --system`) it starts one (`dbus-daemon --system
/// --fork`, after removing a dead bus's socket and pid file); when no avahi-daemon answers on
/// the bus it stops a stale one (`--kill`) and starts one as root
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
        let dbusSend = try TestEnvironment.systemTool("dbus-send", package: "dbus")
        // The daemon's clients (the DNS-SD library, avahi-browse) reach it over the bus, so a
        // daemon counts only once it answers there: one whose bus has died still passes
        // `--check`, and every lookup through it fails.
        let avahiPing = ["--system", "--print-reply", "--dest=org.freedesktop.Avahi", "/", "org.freedesktop.Avahi.Server.GetVersionString"]
        let running = try await run(avahi, ["--check"]) == 0
        if running, try await run(dbusSend, avahiPing) == 0 { return }
        guard getuid() == 0 else {
            throw SetupError("avahi-daemon is not running, or not on the system bus, and only root can start it here: start it (service avahi-daemon start) or run the tests as root")
        }
        if running {
            _ = try await run(avahi, ["--kill"])
            _ = try await waitUntil({ try await run(avahi, ["--check"]) != 0 })
        }
        let ping = ["--system", "--print-reply", "--dest=org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus.GetId"]
        if try await run(dbusSend, ping) != 0 {
            // No bus answers: a bus that died leaves its socket and pid file, which stop a new one.
            let dbus = try TestEnvironment.systemTool("dbus-daemon", package: "dbus")
            try? FileManager.default.removeItem(atPath: "/run/dbus/system_bus_socket")
            try? FileManager.default.removeItem(atPath: "/run/dbus/pid")
            try? FileManager.default.createDirectory(atPath: "/run/dbus", withIntermediateDirectories: true)
            try startDaemon(dbus, ["--system", "--fork"])
            guard try await waitUntil({ try await run(dbusSend, ping) == 0 }) else {
                throw SetupError("dbus-daemon --system --fork started no bus that answers; \(install)")
            }
        }
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("quic-tests-avahi-daemon.conf").path
        try configuration.write(toFile: path, atomically: true, encoding: .utf8)
        try startDaemon(avahi, ["--daemonize", "--no-drop-root", "--file", path])
        // The daemon is ready once it has registered on the bus and claimed its host name.
        let answers = {
            guard try await run(avahi, ["--check"]) == 0 else { return false }
            return try await run(dbusSend, avahiPing) == 0
        }
        guard try await waitUntil(answers) else {
            throw SetupError("avahi-daemon --daemonize started no daemon that runs; \(install)")
        }
        try await Task.sleep(for: .milliseconds(500))
    }

    /// Polls `ready` every 100 ms for up to 10 seconds.
    private static func waitUntil(_ ready: () async throws -> Bool) async throws -> Bool {
        let deadline = ContinuousClock.now + .seconds(10)
        while ContinuousClock.now < deadline {
            if try await ready() { return true }
            try await Task.sleep(for: .milliseconds(100))
        }
        return false
    }

    /// Starts a daemon that forks into the background, its output to /dev/null. Its launcher is
    /// not waited for: a forked daemon can keep descriptors that Foundation's `Process` watches
    /// to tell that a child ended (dbus-daemon does), so readiness is polled instead. The
    /// launchers are kept, so that no `ChildProcess` deinit kills one while it forks.
    private static func startDaemon(_ tool: URL, _ arguments: [String]) throws {
        let command = ([tool.path] + arguments).joined(separator: " ") + " </dev/null >/dev/null 2>&1"
        let launcher = try ChildProcess(URL(fileURLWithPath: "/bin/sh"), ["-c", command])
        launchers.withLockedValue { $0.append(launcher) }
    }

    private static let launchers = NIOLockedValueBox<[ChildProcess]>([])

    private static func run(_ tool: URL, _ arguments: [String]) async throws -> Int32 {
        try await ChildProcess(tool, arguments).waitForExit(seconds: 20)
    }
}
