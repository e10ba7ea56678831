import Dispatch

/// One DNS-SD operation (a browse, a registration, a resolve or a record query): it owns its
/// `DNSServiceRef` and feeds the replies to `handler`.
///
/// The daemon's replies arrive on the ref's socket (`DNSServiceRefSockFD`); a dispatch read source
/// on `queue` calls `DNSServiceProcessResult`, which runs the C callback, which calls `handler`,
/// all on `queue`. Call `start` and `cancel` on `queue` too. `cancel` stops the source, and the
/// source's cancel handler deallocates the ref (and so closes its socket) once the source no
/// longer watches it. Until then the source's handlers keep the operation alive, so the
/// `Unmanaged` context the C library holds stays valid: an owner must cancel every operation it
/// starts.
// @unchecked Sendable: every stored property is read and written only on `queue`.
final class DNSServiceOperation: @unchecked Sendable {
    /// A reply, as `dns_sd.h`'s callbacks give it, with C strings made Swift strings.
    enum Reply {
        /// `DNSServiceBrowseReply`: an instance appeared (`flagAdd` set) or went.
        case browse(flags: UInt32, interface: UInt32, name: String, type: String, domain: String)
        /// `DNSServiceRegisterReply`: the registered name, after any automatic rename.
        case register(name: String, type: String, domain: String)
        /// `DNSServiceResolveReply`: the host that serves the instance, its port (host order) and TXT record.
        case resolve(interface: UInt32, hostTarget: String, port: UInt16, txt: [UInt8])
        /// `DNSServiceQueryRecordReply`: one resource record's data.
        case record(flags: UInt32, interface: UInt32, type: UInt16, data: [UInt8])
        /// A callback's or `DNSServiceProcessResult`'s error code.
        case failure(Int32)
    }

    let library: DNSServiceLibrary
    let queue: DispatchQueue
    private let handler: (Reply) -> Void
    private var ref: DNSServiceLibrary.Ref?
    private var source: (any DispatchSourceRead)?

    init(library: DNSServiceLibrary, queue: DispatchQueue, handler: @escaping (Reply) -> Void) {
        self.library = library
        self.queue = queue
        self.handler = handler
    }

    deinit {
        // Only a ref that never got a source is still here; the source's cancel handler frees the others.
        if let ref { library.deallocate(ref) }
    }

    /// The context pointer to pass to the C call: this operation, unretained.
    var context: UnsafeMutableRawPointer { Unmanaged.passUnretained(self).toOpaque() }

    /// Starts the operation with `call` (one of the library's functions, given `&ref` and
    /// `context`) and watches its socket; returns the call's error code, 0 when started.
    func start(_ call: (UnsafeMutablePointer<DNSServiceLibrary.Ref?>) -> Int32) -> Int32 {
        dispatchPrecondition(condition: .onQueue(queue))
        var newRef: DNSServiceLibrary.Ref?
        let code = call(&newRef)
        guard code == 0, let newRef else { return code == 0 ? DNSServiceLibrary.errorUnknown : code }
        ref = newRef
        let fd = library.sockFD(newRef)
        let source = DispatchSource.makeReadSource(fileDescriptor: fd, queue: queue)
        source.setEventHandler { [self] in
            guard let ref else { return }
            let code = library.processResult(ref)
            if code != 0 { handler(.failure(code)) }
        }
        source.setCancelHandler { [self] in
            if let ref { library.deallocate(ref) }
            ref = nil
        }
        self.source = source
        source.resume()
        return 0
    }

    /// Stops the operation: no reply is handled after this returns.
    func cancel() {
        dispatchPrecondition(condition: .onQueue(queue))
        source?.cancel()
        source = nil
    }

    fileprivate func deliver(_ reply: Reply) {
        // A reply already read when `cancel` ran is dropped.
        guard source != nil else { return }
        handler(reply)
    }

    private static func operation(_ context: UnsafeMutableRawPointer?) -> DNSServiceOperation? {
        context.map { Unmanaged<DNSServiceOperation>.fromOpaque($0).takeUnretainedValue() }
    }

    static let browseReply: DNSServiceLibrary.BrowseReply = { _, flags, interface, error, name, type, domain, context in
        guard let operation = operation(context) else { return }
        guard error == 0 else { return operation.deliver(.failure(error)) }
        operation.deliver(
            .browse(flags: flags, interface: interface, name: string(name), type: string(type), domain: string(domain))
        )
    }

    static let registerReply: DNSServiceLibrary.RegisterReply = { _, _, error, name, type, domain, context in
        guard let operation = operation(context) else { return }
        guard error == 0 else { return operation.deliver(.failure(error)) }
        operation.deliver(.register(name: string(name), type: string(type), domain: string(domain)))
    }

    static let resolveReply: DNSServiceLibrary.ResolveReply = { _, _, interface, error, _, host, port, txtLength, txt, context in
        guard let operation = operation(context) else { return }
        guard error == 0 else { return operation.deliver(.failure(error)) }
        let bytes = txt.map { Array(UnsafeBufferPointer(start: $0, count: Int(txtLength))) } ?? []
        operation.deliver(.resolve(interface: interface, hostTarget: string(host), port: UInt16(bigEndian: port), txt: bytes))
    }

    static let recordReply: DNSServiceLibrary.QueryRecordReply = { _, flags, interface, error, _, type, _, length, data, _, context in
        guard let operation = operation(context) else { return }
        guard error == 0 else { return operation.deliver(.failure(error)) }
        let bytes = data.map { Array(UnsafeRawBufferPointer(start: $0, count: Int(length))) } ?? []
        operation.deliver(.record(flags: flags, interface: interface, type: type, data: bytes))
    }

    private static func string(_ pointer: UnsafePointer<CChar>?) -> String {
        pointer.map { String(cString: $0) } ?? ""
    }
}
