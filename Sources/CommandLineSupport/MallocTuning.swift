#if canImport(Glibc)
import Glibc
#endif

/// How many freed chunks glibc's per-thread cache (tcache) keeps for each size, instead of 7.
///
/// A QUIC loop allocates and frees in batches: the requests of one read pass, then their
/// responses, each a handful of Swift objects and arrays of the same few sizes. With 7 cached
/// per size, most of a batch misses the cache and goes to the arena's bins, and a 1 KiB body
/// chunk among them consolidates the fast bins on every request. A larger cache keeps a batch
/// in it, so a request costs fewer instructions in both h3serve and h3load.
///
/// The cost is memory a server keeps at rest: cached chunks are in use as far as `malloc_trim`
/// is concerned, and they pin the pages they lie on. Past 32 the instructions saved are few
/// and the memory kept at rest grows fast, so a server keeps 32 and a client, which does not
/// sit at rest for hours, 64. Commit ec1b4da has the measurements that chose them.
public enum MallocCache: Sendable {
    /// h3load and quic-echo: 64 chunks per size.
    case client
    /// h3serve: 32 chunks per size, nearly all of the gain for less memory at rest.
    case server

    /// Freed chunks kept per size and thread (`glibc.malloc.tcache_count`).
    public var tcacheCount: Int {
        switch self {
        case .client: return 64
        case .server: return 32
        }
    }

    /// The `GLIBC_TUNABLES` value for this cache.
    public var tunables: String { "glibc.malloc.tcache_count=\(tcacheCount)" }
}

/// Runs the program again, once, with `GLIBC_TUNABLES` set to `cache`'s tunables: glibc reads
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
public func runWithMallocTunables(_ cache: MallocCache = .client) {
    guard getenv("GLIBC_TUNABLES") == nil else { return }
    var path = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
    let length = readlink("/proc/self/exe", &path, path.count - 1)
    guard length > 0 else { return }
    setenv("GLIBC_TUNABLES", cache.tunables, 1)
    execv(path, CommandLine.unsafeArgv)
    unsetenv("GLIBC_TUNABLES")
}
