import Foundation
import QuicTestSupport
import Testing

/// The tests' `/proc` reader must read past the 4 KiB where Foundation's readers stop.
@Suite("Reading /proc")
struct ProcFilesTests {
    @Test func wholeFilesAreRead() throws {
        // The test process maps far more than 4 KiB worth of lines, each ending in a newline.
        let maps = try readProcFile("/proc/self/maps")
        #expect(maps.count > 4096, "read \(maps.count) bytes")
        #expect(maps.last == UInt8(ascii: "\n"))
        #expect(String(decoding: maps, as: UTF8.self).contains("[stack]"), "the last mappings are there too")
    }
}
