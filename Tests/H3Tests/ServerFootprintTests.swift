import Foundation
import QuicTestSupport
import Testing

/// What the tools load. The stack imports FoundationEssentials only: libFoundation, its
/// internationalization layer and ICU add about 6 MiB of resident code to a process that uses
/// none of it, which is most of what stood between h3serve's resting RSS and 32 MiB.
@Suite("The tools' footprint", .timeLimit(TestEnvironment.minutes(1)))
struct ServerFootprintTests {
    @Test func h3serveLoadsNeitherFoundationNorICU() async throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("footprint-\(UUID())")
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        // With its TCP listener too: the Alt-Svc side (NIOSSL, HTTP/1.1 and HTTP/2) is loaded.
        let (server, _) = try await startH3serve(root: root)
        defer { server.stop() }
        let maps = try readProcFile("/proc/\(server.processIdentifier)/maps")
        let libraries = Set(maps.split(separator: UInt8(ascii: "\n")).compactMap { line in
            line.contains(UInt8(ascii: "/")) ? line.split(separator: UInt8(ascii: "/")).last.map { String(decoding: $0, as: UTF8.self) } : nil
        })
        #expect(libraries.contains("libFoundationEssentials.so"), "the check reads the maps it means to: \(libraries.sorted())")
        for library in ["libFoundation.so", "libFoundationInternationalization.so", "lib_FoundationICU.so"] {
            #expect(!libraries.contains(library), "h3serve maps \(library); a module it links imports Foundation, not FoundationEssentials")
        }
    }

    /// The other tools link no more: a curl-like h3get run once per fetch pays for every library
    /// it loads (Foundation and ICU cost it about 7 MiB and 2 ms of each run).
    @Test(arguments: ["h3get", "quic-echo", "h3load"])
    func aToolLinksNeitherFoundationNorICU(tool: String) async throws {
        let ldd = try ChildProcess(URL(fileURLWithPath: "/usr/bin/ldd"), [try TestEnvironment.executable(tool).path])
        #expect(try await ldd.waitForExit() == 0, "ldd: \(ldd.standardError)")
        let libraries = ldd.standardOutput
        #expect(libraries.contains("libFoundationEssentials.so"), "the check reads what it means to: \(libraries)")
        for library in ["libFoundation.so", "libFoundationInternationalization.so", "lib_FoundationICU.so"] {
            #expect(!libraries.contains(library), "\(tool) links \(library); it or a module it links imports Foundation")
        }
    }
}
