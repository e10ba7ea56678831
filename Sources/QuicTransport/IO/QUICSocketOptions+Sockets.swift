#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CQuicLinux
import CQuicShims
import NIOCore

extension QUICSocketOptions {
    /// One socket option: `setsockopt(fd, level, name, &value, sizeof(CInt))`.
    package struct Setting: Equatable {
        package var level: CInt
        package var name: CInt
        package var value: CInt
    }

    /// `IPV6_ADDR_PREFERENCES` and its flags (`linux/in6.h`, RFC 5014), which Glibc does not export.
    private static let ipv6AddressPreferences: CInt = 72
    private static let ipv6PreferTemporary: CInt = 0x0001
    private static let ipv6PreferPublic: CInt = 0x0002

    /// The socket options these settings come to on a socket of this family, set before it
    /// binds or connects.
    package func settings(isIPv6: Bool) -> [Setting] {
        var settings: [Setting] = []
        if isIPv6 {
            let level = CInt(IPPROTO_IPV6)
            if let hopLimit { settings.append(Setting(level: level, name: IPV6_UNICAST_HOPS, value: CInt(hopLimit))) }
            // PROBE: never fragment locally, and leave the path MTU to QUIC's own discovery
            // instead of the kernel's cached ICMP figure.
            settings.append(Setting(level: level, name: IPV6_MTU_DISCOVER, value: disablesFragmentation ? IPV6_PMTUDISC_PROBE : IPV6_PMTUDISC_DONT))
            switch addressPreference {
            case .default: break
            case .temporary: settings.append(Setting(level: level, name: Self.ipv6AddressPreferences, value: Self.ipv6PreferTemporary))
            case .stable: settings.append(Setting(level: level, name: Self.ipv6AddressPreferences, value: Self.ipv6PreferPublic))
            }
            if dscp != 0 { settings.append(Setting(level: level, name: IPV6_TCLASS, value: CInt(dscp) << 2)) }
        } else {
            let level = CInt(IPPROTO_IP)
            if let hopLimit { settings.append(Setting(level: level, name: IP_TTL, value: CInt(hopLimit))) }
            settings.append(Setting(level: level, name: IP_MTU_DISCOVER, value: disablesFragmentation ? IP_PMTUDISC_PROBE : IP_PMTUDISC_DONT))
            if omitsChecksum { settings.append(Setting(level: SOL_SOCKET, name: SO_NO_CHECK, value: 1)) }
            if dscp != 0 { settings.append(Setting(level: level, name: IP_TOS, value: CInt(dscp) << 2)) }
        }
        return settings
    }

    /// Sets them on a socket the caller made.
    package func apply(to descriptor: CInt, isIPv6: Bool) throws {
        for setting in settings(isIPv6: isIPv6) { try setting.apply(to: descriptor) }
    }

    /// A non-blocking, close-on-exec UDP socket of the family with these settings, not yet
    /// bound or connected; closed again when a setting is refused.
    func openSocket(isIPv6: Bool) throws -> CInt {
        let descriptor = socket(isIPv6 ? AF_INET6 : AF_INET, CInt(SOCK_DGRAM.rawValue) | CInt(SOCK_NONBLOCK.rawValue) | CInt(SOCK_CLOEXEC.rawValue), 0)
        guard descriptor >= 0 else { throw IOError(errnoCode: errno, reason: "socket") }
        do {
            try apply(to: descriptor, isIPv6: isIPv6)
            try applySocketLevel(to: descriptor)
        } catch {
            _ = close(descriptor)
            throw error
        }
        return descriptor
    }
}

extension QUICSocketOptions {
    /// The settings of the socket itself, whatever its family: address reuse
    /// (`SO_REUSEADDR` and `SO_REUSEPORT`, so that another socket that sets them too may bind
    /// the same address and port) and the interface it is bound to (`SO_BINDTODEVICE`, which
    /// limits both its sends and its receives to that interface).
    package func applySocketLevel(to descriptor: CInt) throws {
        if reusesAddress {
            try Setting(level: SOL_SOCKET, name: SO_REUSEADDR, value: 1).apply(to: descriptor)
            try Setting(level: SOL_SOCKET, name: SO_REUSEPORT, value: 1).apply(to: descriptor)
        }
        guard let interfaceName else { return }
        let rv = interfaceName.withCString { name in
            setsockopt(descriptor, SOL_SOCKET, SO_BINDTODEVICE, name, socklen_t(strlen(name) + 1))
        }
        guard rv == 0 else {
            throw IOError(errnoCode: errno, reason: "setsockopt(SO_BINDTODEVICE, \(interfaceName))")
        }
    }

    /// The name of the interface that holds a socket's local `address`, for
    /// `prohibitedInterfaceNames`; nil for an address no interface holds.
    func prohibitedInterface(holding address: QUICSocketAddress) -> String? {
        guard !prohibitedInterfaceNames.isEmpty, let name = NWInterface.owning(address)?.name else { return nil }
        return prohibitedInterfaceNames.contains(name) ? name : nil
    }
}

extension QUICSocketOptions {
    /// Whether a listening socket bound to `address` serves both IP versions: the unspecified
    /// IPv6 address `::` does, unless only IPv6 is allowed. Its IPv4 clients are then seen as
    /// v4-mapped addresses (RFC 3493 §3.7), as on Apple's dual-stack listeners.
    func isDualStack(_ address: QUICSocketAddress) -> Bool {
        ipVersion == .any && address.isUnspecifiedIPv6
    }

    /// A listening socket for `address`, as `openSocket` makes one. An IPv6 socket has
    /// `IPV6_V6ONLY` set either way, so that `net.ipv6.bindv6only` does not decide what `::`
    /// serves; a dual-stack one also gets the IPv4 settings, which its IPv4 packets follow.
    func openListeningSocket(for address: QUICSocketAddress) throws -> CInt {
        let isIPv6 = address.family == AF_INET6
        let descriptor = try openSocket(isIPv6: isIPv6)
        guard isIPv6 else { return descriptor }
        let dualStack = isDualStack(address)
        do {
            try Setting(level: CInt(IPPROTO_IPV6), name: IPV6_V6ONLY, value: dualStack ? 0 : 1).apply(to: descriptor)
            if dualStack { try apply(to: descriptor, isIPv6: false) }
        } catch {
            _ = close(descriptor)
            throw error
        }
        return descriptor
    }
}

extension QUICSocketOptions.Setting {
    /// `setsockopt` of this setting on `descriptor`.
    func apply(to descriptor: CInt) throws {
        var value = value
        guard setsockopt(descriptor, level, name, &value, socklen_t(MemoryLayout<CInt>.size)) == 0 else {
            throw IOError(errnoCode: errno, reason: "setsockopt(level \(level), option \(name), \(value))")
        }
    }
}

enum QUICSocketError: Error, CustomStringConvertible {
    /// A listener's address is of the IP version its stack excludes (`IP().version(_:)`).
    case ipVersionExcluded(address: String)

    var description: String {
        switch self {
        case .ipVersionExcluded(let address): return "cannot bind \(address): the protocol stack excludes its IP version"
        }
    }
}
