#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CQuicLinux
import CQuicShims
import NIOCore

/// UDP sockets that share one address with `SO_REUSEPORT`, one per worker, and the classic BPF
/// program that makes the kernel deliver each packet to the worker owning its connection.
///
/// The kernel numbers a reuseport group's sockets in bind order, and a program attached with
/// `SO_ATTACH_REUSEPORT_CBPF` returns the index of the socket to deliver to; an index at or
/// above the group's size makes the kernel fall back to its 4-tuple hash. So the sockets are
/// bound in worker order, and the program returns the worker byte of *our* connection IDs
/// (`QUICConnectionIDFactory`) and out-of-range for everything else:
///
/// - short-header packets (RFC 9000 §17.3): the DCID starts at byte 1 and has our length;
/// - long-header packets of any type and version whose DCID length byte says our length (RFC
///   8999 §5.1 puts it at byte 5 in every version): Handshake packets, and a client's Initials
///   once it has our first Initial, carry an ID we issued, so a client rebound in mid-handshake
///   still reaches its worker;
/// - everything else goes by the 4-tuple hash. A client's first Initials and its 0-RTT carry
///   its own DCID: when that has another length they stay together by 4-tuple, and when it has
///   ours every packet with it gets the same answer, so they stay together too.
///
/// A cBPF load past the end of the packet ends the program with 0, which would pick worker 0,
/// so the program checks the length first. It sees the UDP payload at offset 0.
package enum QUICReuseportGroup {
    /// Binds `count` UDP sockets to `address` with `SO_REUSEPORT`, in order; port 0 picks one
    /// port for all of them. One socket is bound plainly. The descriptors are non-blocking and
    /// close-on-exec; on failure none stays open. `::` makes dual-stack sockets
    /// (`QUICSocketOptions.isDualStack`).
    ///
    /// A port that another socket holds fails with `EADDRINUSE`, even when that socket set
    /// `SO_REUSEPORT` too: the kernel would let a second server of the same user join the group
    /// and take part of the first one's traffic, so a plain socket binds there first to ask.
    /// `options` are set on each socket before it binds; with `reusesAddress` they let other
    /// sockets share the port, so the check is skipped.
    package static func bind(_ address: SocketAddress, count: Int, options: QUICSocketOptions = QUICSocketOptions()) throws -> [CInt] {
        let sharesPort = count > 1
        if sharesPort, address.port != 0, !options.reusesAddress { try checkPortIsFree(address, options: options) }
        var sockets: [CInt] = []
        do {
            var address = address
            for _ in 0..<count {
                let fd = try options.openListeningSocket(for: QUICSocketAddress(nio: address))
                sockets.append(fd)
                var one: CInt = 1
                guard !sharesPort || setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, socklen_t(MemoryLayout<CInt>.size)) == 0 else {
                    throw IOError(errnoCode: errno, reason: "setsockopt(SO_REUSEPORT)")
                }
                let rv = address.withSockAddr { Glibc.bind(fd, $0, socklen_t($1)) }
                guard rv == 0 else { throw IOError(errnoCode: errno, reason: "bind(\(address))") }
                if address.port == 0 {
                    // The first socket picked the port; the rest of the group joins it there.
                    address = try boundAddress(of: fd).nioAddress
                }
            }
        } catch {
            for fd in sockets { close(fd) }
            throw error
        }
        return sockets
    }

    private static func checkPortIsFree(_ address: SocketAddress, options: QUICSocketOptions) throws {
        // Of the same IP versions as the group, so a dual-stack group asks for both.
        let probe = try options.openListeningSocket(for: QUICSocketAddress(nio: address))
        defer { close(probe) }
        guard address.withSockAddr({ Glibc.bind(probe, $0, socklen_t($1)) }) == 0 else {
            throw IOError(errnoCode: errno, reason: "bind(\(address))")
        }
    }

    /// Attaches `program` to the reuseport group that `socket` belongs to.
    package static func attach(_ program: [sock_filter], to socket: CInt) throws {
        var instructions = program
        let rv = instructions.withUnsafeMutableBufferPointer { buffer in
            var fprog = sock_fprog(len: UInt16(buffer.count), filter: buffer.baseAddress)
            return setsockopt(socket, SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF, &fprog, socklen_t(MemoryLayout<sock_fprog>.size))
        }
        guard rv == 0 else { throw IOError(errnoCode: errno, reason: "setsockopt(SO_ATTACH_REUSEPORT_CBPF)") }
    }

    /// The steering program for IDs of `connectionIDLength` bytes whose last byte is the worker,
    /// masked with `steering`.
    package static func steeringProgram(connectionIDLength length: Int, steering: QUICWorkerSteering) -> [sock_filter] {
        var program = BPFAssembler()
        let shortHeaderMinimum = 1 + length
        let longHeaderMinimum = 6 + length
        // Short header: DCID at byte 1.
        program.load(.length)
        program.jump(ifAtLeast: UInt32(shortHeaderMinimum), else: "fallback")
        program.load(.byte(at: 0))
        program.jump(ifAnyBitOf: 0x80, then: "long")
        program.returnUnmaskedWorker(idStart: 1, length: length, steering: steering)
        // Long header, any version (RFC 8999): DCID length at 5, DCID at 6.
        program.label("long")
        program.load(.length)
        program.jump(ifAtLeast: UInt32(longHeaderMinimum), else: "fallback")
        program.load(.byte(at: 5))
        program.jump(ifEqual: UInt32(length), else: "fallback")
        program.returnUnmaskedWorker(idStart: 6, length: length, steering: steering)
        program.label("fallback")
        program.returnConstant(UInt32.max)
        return program.assemble()
    }

    /// The address `fd` is bound to.
    package static func boundAddress(of fd: CInt) throws -> QUICSocketAddress {
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let rv = withUnsafeMutablePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        guard rv == 0 else { throw IOError(errnoCode: errno, reason: "getsockname") }
        return QUICSocketAddress(storage: storage, length: length)
    }
}

/// Classic BPF with named jump targets, resolved in `assemble()`; just what the steering
/// program needs.
private struct BPFAssembler {
    enum Source { case length, byte(at: UInt32), word(at: UInt32) }
    private enum Target { case next, label(String) }
    private var instructions: [(code: UInt16, k: UInt32, ifTrue: Target, ifFalse: Target)] = []
    private var labels: [String: Int] = [:]

    mutating func label(_ name: String) { labels[name] = instructions.count }

    mutating func load(_ source: Source) {
        switch source {
        case .length: emit(BPF_LD | BPF_W | BPF_LEN, 0)
        case .byte(let offset): emit(BPF_LD | BPF_B | BPF_ABS, offset)
        case .word(let offset): emit(BPF_LD | BPF_W | BPF_ABS, offset)
        }
    }

    mutating func jump(ifAtLeast k: UInt32, else target: String) {
        instructions.append((UInt16(BPF_JMP | BPF_JGE | BPF_K), k, .next, .label(target)))
    }

    mutating func jump(ifEqual k: UInt32, else target: String) {
        instructions.append((UInt16(BPF_JMP | BPF_JEQ | BPF_K), k, .next, .label(target)))
    }

    mutating func jump(ifAnyBitOf k: UInt32, then target: String) {
        instructions.append((UInt16(BPF_JMP | BPF_JSET | BPF_K), k, .label(target), .next))
    }

    mutating func returnConstant(_ k: UInt32) { emit(BPF_RET | BPF_K, k) }

    /// A = ID's last byte XOR top byte of (the 4 bytes before it × multiplier + addend); return A.
    mutating func returnUnmaskedWorker(idStart: Int, length: Int, steering: QUICWorkerSteering) {
        let workerOffset = UInt32(idStart + length - 1)
        load(.word(at: workerOffset - 4))
        emit(BPF_ALU | BPF_MUL | BPF_K, steering.multiplier)
        emit(BPF_ALU | BPF_ADD | BPF_K, steering.addend)
        emit(BPF_ALU | BPF_RSH | BPF_K, 24)
        emit(BPF_MISC | BPF_TAX, 0)
        load(.byte(at: workerOffset))
        emit(BPF_ALU | BPF_XOR | BPF_X, 0)
        emit(BPF_RET | BPF_A, 0)
    }

    private mutating func emit(_ code: Int32, _ k: UInt32) {
        instructions.append((UInt16(code), k, .next, .next))
    }

    func assemble() -> [sock_filter] {
        instructions.enumerated().map { index, instruction in
            func offset(_ target: Target) -> Int {
                guard case .label(let name) = target else { return 0 }
                guard let destination = labels[name], destination > index else {
                    preconditionFailure("BPF jumps go forward to a defined label: \(name)")
                }
                return destination - index - 1
            }
            let (jt, jf) = (offset(instruction.ifTrue), offset(instruction.ifFalse))
            precondition(jt < 256 && jf < 256, "a conditional BPF jump reaches at most 255 instructions")
            return sock_filter(code: instruction.code, jt: UInt8(jt), jf: UInt8(jf), k: instruction.k)
        }
    }
}
