#if canImport(Glibc)
import Glibc
#endif

/// The glibc malloc setting the tools run with: a per-thread cache (tcache) of 64 freed chunks
/// for each size instead of 7.
///
/// A QUIC loop allocates and frees in batches: the requests of one read pass, then their
/// responses, each a handful of Swift objects and arrays of the same few sizes. With 7 cached
/// per size, most of a batch misses the cache and goes to the arena's bins, and a 1 KiB body
/// chunk among them consolidates the fast bins on every request. At 64, h3serve spends 4% fewer
/// instructions per 1 KiB GET (61.0k to 58.2k under callgrind, 50 in flight) and h3load 6% fewer
/// per request (76.1k to 71.6k); gtlsserver's allocation pattern gains nothing from it. The
/// cost is at most 64 cached chunks per size per thread.
public let mallocTunables = "glibc.malloc.tcache_count=64"

/// Runs the program again, once, with `GLIBC_TUNABLES` set to `mallocTunables`: glibc reads
/// its tunables only as a process starts, and has no call to change the tcache size later.
///
/// It does nothing when `GLIBC_TUNABLES` is set already, even to an empty string: the user's
/// own setting wins, and an empty one runs the tool with glibc's defaults. The process keeps its
/// ID, descriptors and arguments across the exec. Call it first thing in `main`, before any
/// thread starts. If the exec fails, the tool runs untuned.
///
/// It executes the path `/proc/self/exe` names rather than the link itself: under valgrind the
/// link is valgrind's own tool, and only the name, which valgrind reports as the program's, lets
/// `valgrind --trace-children=yes` follow the exec (`scripts/bench` counts instructions so).
public func runWithMallocTunables() {
    guard getenv("GLIBC_TUNABLES") == nil else { return }
    var path = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
    let length = readlink("/proc/self/exe", &path, path.count - 1)
    guard length > 0 else { return }
    setenv("GLIBC_TUNABLES", mallocTunables, 1)
    execv(path, CommandLine.unsafeArgv)
    unsetenv("GLIBC_TUNABLES")
}
