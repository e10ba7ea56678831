#if canImport(Glibc)
import Glibc
#endif

/// Bonjour's C API (`dns_sd.h`: DNSServiceBrowse, Register, Resolve, QueryRecord), loaded at run
/// time from Avahi's compatibility library, `libdns_sd.so.1` (Debian's
/// `libavahi-compat-libdnssd1`).
///
/// It is opened with `dlopen` on first use rather than linked, so that programs using
/// QuicTransport build and run on machines without Avahi: only `NWBrowser`, a listener's
/// `service` and `.service` endpoints need it, and they fail with `NWError.dns` and a logged
/// reason when it is missing. The declarations below follow `dns_sd.h` exactly (Apple's
/// mDNSResponder header, which Avahi ships unchanged in `avahi-compat-libdns_sd/dns_sd.h`), so no
/// header is needed to build either.
struct DNSServiceLibrary: @unchecked Sendable {
    // @unchecked Sendable: only C function pointers, immutable once loaded.
    typealias Ref = OpaquePointer
    typealias BrowseReply = @convention(c) (
        Ref?, UInt32, UInt32, Int32, UnsafePointer<CChar>?, UnsafePointer<CChar>?, UnsafePointer<CChar>?,
        UnsafeMutableRawPointer?
    ) -> Void
    typealias RegisterReply = @convention(c) (
        Ref?, UInt32, Int32, UnsafePointer<CChar>?, UnsafePointer<CChar>?, UnsafePointer<CChar>?, UnsafeMutableRawPointer?
    ) -> Void
    typealias ResolveReply = @convention(c) (
        Ref?, UInt32, UInt32, Int32, UnsafePointer<CChar>?, UnsafePointer<CChar>?, UInt16, UInt16,
        UnsafePointer<UInt8>?, UnsafeMutableRawPointer?
    ) -> Void
    typealias QueryRecordReply = @convention(c) (
        Ref?, UInt32, UInt32, Int32, UnsafePointer<CChar>?, UInt16, UInt16, UInt16, UnsafeRawPointer?, UInt32,
        UnsafeMutableRawPointer?
    ) -> Void

    typealias BrowseFunction = @convention(c) (
        UnsafeMutablePointer<Ref?>, UInt32, UInt32, UnsafePointer<CChar>, UnsafePointer<CChar>?, BrowseReply,
        UnsafeMutableRawPointer?
    ) -> Int32
    typealias RegisterFunction = @convention(c) (
        UnsafeMutablePointer<Ref?>, UInt32, UInt32, UnsafePointer<CChar>?, UnsafePointer<CChar>, UnsafePointer<CChar>?,
        UnsafePointer<CChar>?, UInt16, UInt16, UnsafeRawPointer?, RegisterReply?, UnsafeMutableRawPointer?
    ) -> Int32
    typealias ResolveFunction = @convention(c) (
        UnsafeMutablePointer<Ref?>, UInt32, UInt32, UnsafePointer<CChar>, UnsafePointer<CChar>, UnsafePointer<CChar>,
        ResolveReply, UnsafeMutableRawPointer?
    ) -> Int32
    typealias QueryRecordFunction = @convention(c) (
        UnsafeMutablePointer<Ref?>, UInt32, UInt32, UnsafePointer<CChar>, UInt16, UInt16, QueryRecordReply,
        UnsafeMutableRawPointer?
    ) -> Int32

    let browse: BrowseFunction
    let register: RegisterFunction
    let resolve: ResolveFunction
    let queryRecord: QueryRecordFunction
    let sockFD: @convention(c) (Ref) -> Int32
    let processResult: @convention(c) (Ref) -> Int32
    let deallocate: @convention(c) (Ref) -> Void

    /// `kDNSServiceFlagsMoreComing`: more replies are queued; wait for them before acting.
    static let flagMoreComing: UInt32 = 0x1
    /// `kDNSServiceFlagsAdd`: a browse or query reply adds (set) or removes (clear) its answer.
    static let flagAdd: UInt32 = 0x2
    /// `kDNSServiceFlagsNoAutoRename`: fail a registration on a name conflict instead of renaming.
    static let flagNoAutoRename: UInt32 = 0x8
    /// `kDNSServiceErr_Unknown`, what Avahi's library returns when it cannot reach avahi-daemon.
    static let errorUnknown: Int32 = -65537
    /// `kDNSServiceErr_ServiceNotRunning`, reported here when the library itself is missing.
    static let errorServiceNotRunning: Int32 = -65563
    /// `kDNSServiceErr_Timeout`, for a resolution that got no answer in time.
    static let errorTimeout: Int32 = -65568

    /// The library, or why it could not be loaded (with what to install).
    static let shared: Result<DNSServiceLibrary, DNSServiceUnavailable> = load()

    private static func load() -> Result<DNSServiceLibrary, DNSServiceUnavailable> {
        guard let handle = dlopen("libdns_sd.so.1", RTLD_NOW | RTLD_LOCAL) else {
            let reason = dlerror().map { String(cString: $0) } ?? "libdns_sd.so.1 not found"
            return .failure(DNSServiceUnavailable(reason: reason))
        }
        func symbol<T>(_ name: String, _ type: T.Type) throws(DNSServiceUnavailable) -> T {
            guard let pointer = dlsym(handle, name) else { throw DNSServiceUnavailable(reason: "libdns_sd.so.1 has no \(name)") }
            return unsafeBitCast(pointer, to: type)
        }
        // Avahi prints a warning about its compatibility layer to stderr on first use unless this
        // is set; set only when unset, once, before any thread of ours reads the environment.
        setenv("AVAHI_COMPAT_NOWARN", "1", 0)
        do throws(DNSServiceUnavailable) {
            return .success(
                DNSServiceLibrary(
                    browse: try symbol("DNSServiceBrowse", BrowseFunction.self),
                    register: try symbol("DNSServiceRegister", RegisterFunction.self),
                    resolve: try symbol("DNSServiceResolve", ResolveFunction.self),
                    queryRecord: try symbol("DNSServiceQueryRecord", QueryRecordFunction.self),
                    sockFD: try symbol("DNSServiceRefSockFD", (@convention(c) (Ref) -> Int32).self),
                    processResult: try symbol("DNSServiceProcessResult", (@convention(c) (Ref) -> Int32).self),
                    deallocate: try symbol("DNSServiceRefDeallocate", (@convention(c) (Ref) -> Void).self)
                )
            )
        } catch {
            return .failure(error)
        }
    }
}

/// Why Bonjour is not available: the library could not be loaded.
struct DNSServiceUnavailable: Error, CustomStringConvertible {
    let reason: String
    var description: String {
        "Bonjour is not available (\(reason)): install Avahi's DNS-SD library and daemon "
            + "(apt-get install libavahi-compat-libdnssd1 avahi-daemon) and start avahi-daemon"
    }
}

/// Text for a `DNSServiceErrorType` (`dns_sd.h`), for `NWError.dns` descriptions.
enum DNSServiceErrorText {
    static func describe(_ code: Int32) -> String {
        switch code {
        case -65537: return "unknown error (is avahi-daemon running?)"
        case -65538: return "no such name"
        case -65539: return "out of memory"
        case -65540: return "bad parameter"
        case -65548: return "name conflict"
        case -65549: return "invalid"
        case -65563: return "service not running"
        case -65568: return "timed out"
        default: return "DNS-SD error"
        }
    }
}
