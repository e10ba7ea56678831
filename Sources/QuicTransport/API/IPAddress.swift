#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// An IP address of either version, as Network.framework's `IPAddress` protocol: its bytes in
/// network order, the interface it is scoped to, and its kind.
public protocol IPAddress {
    /// An address from its bytes in network order (4 for IPv4, 16 for IPv6) and the interface
    /// it is scoped to; nil when the byte count is wrong.
    init?(_ rawValue: Data, _ interface: NWInterface?)
    /// The address's bytes in network order.
    var rawValue: Data { get }
    /// The interface the address is scoped to, if any.
    var interface: NWInterface? { get }
    /// Whether the address is a loopback address.
    var isLoopback: Bool { get }
    /// Whether the address is link-local.
    var isLinkLocal: Bool { get }
    /// Whether the address is a multicast address.
    var isMulticast: Bool { get }
}

/// An IPv4 address (RFC 791), as Network.framework's `IPv4Address`.
public struct IPv4Address: IPAddress, Hashable, Sendable, CustomDebugStringConvertible {
    /// The four bytes, in network order.
    public let rawValue: Data
    /// The interface the address is scoped to, if any.
    public let interface: NWInterface?

    /// An address from its four bytes in network order; nil for any other count.
    public init?(_ rawValue: Data, _ interface: NWInterface? = nil) {
        guard rawValue.count == 4 else { return nil }
        self.rawValue = Data(rawValue)
        self.interface = interface
    }

    /// An address from dotted-quad text, such as `192.0.2.1`, optionally followed by `%` and an
    /// interface name; nil for anything else (`inet_pton(3)` decides).
    public init?(_ string: String) {
        let (text, interface) = IPAddressText.split(string)
        var address = in_addr()
        guard inet_pton(AF_INET, text, &address) == 1 else { return nil }
        self.init(withUnsafeBytes(of: &address) { Data($0) }, interface)
    }

    /// `0.0.0.0`, every local address.
    public static let any = IPv4Address(Data([0, 0, 0, 0]))!
    /// `255.255.255.255`, the limited broadcast address.
    public static let broadcast = IPv4Address(Data([255, 255, 255, 255]))!
    /// `127.0.0.1`.
    public static let loopback = IPv4Address(Data([127, 0, 0, 1]))!
    /// `224.0.0.1`, every host on the link (RFC 1112).
    public static let allHostsGroup = IPv4Address(Data([224, 0, 0, 1]))!
    /// `224.0.0.2`, every router on the link.
    public static let allRoutersGroup = IPv4Address(Data([224, 0, 0, 2]))!
    /// `224.0.0.22`, where IGMPv3 membership reports go (RFC 3376).
    public static let allReportsGroup = IPv4Address(Data([224, 0, 0, 22]))!
    /// `224.0.0.251`, multicast DNS (RFC 6762).
    public static let mdnsGroup = IPv4Address(Data([224, 0, 0, 251]))!

    /// Whether the address is in `127.0.0.0/8` (RFC 1122 §3.2.1.3).
    public var isLoopback: Bool { rawValue.first == 127 }
    /// Whether the address is in `169.254.0.0/16` (RFC 3927).
    public var isLinkLocal: Bool { rawValue.starts(with: [169, 254]) }
    /// Whether the address is in `224.0.0.0/4` (RFC 5771).
    public var isMulticast: Bool { (rawValue.first ?? 0) & 0xF0 == 0xE0 }

    /// The dotted quad, with `%` and the interface when it is scoped.
    public var debugDescription: String { IPAddressText.format(AF_INET, rawValue, interface) }
}

/// An IPv6 address (RFC 4291), as Network.framework's `IPv6Address`.
public struct IPv6Address: IPAddress, Hashable, Sendable, CustomDebugStringConvertible {
    /// The scope of a multicast address (RFC 4291 §2.7), as Apple's `IPv6Address.Scope`.
    public enum Scope: UInt8, Hashable, Sendable {
        /// This node only (`ff01::/16`).
        case nodeLocal = 1
        /// This link (`ff02::/16`).
        case linkLocal = 2
        /// This site (`ff05::/16`).
        case siteLocal = 5
        /// This organization (`ff08::/16`).
        case organizationLocal = 8
        /// Everywhere (`ff0e::/16`).
        case global = 14
    }

    /// The sixteen bytes, in network order.
    public let rawValue: Data
    /// The interface a scoped (link-local) address belongs to, if any.
    public let interface: NWInterface?

    /// An address from its sixteen bytes in network order; nil for any other count.
    public init?(_ rawValue: Data, _ interface: NWInterface? = nil) {
        guard rawValue.count == 16 else { return nil }
        self.rawValue = Data(rawValue)
        self.interface = interface
    }

    /// An address from its text (RFC 4291 §2.2, RFC 5952), such as `2001:db8::1`, optionally
    /// in brackets and optionally followed by `%` and an interface name (RFC 4007 §11); nil for
    /// anything else.
    public init?(_ string: String) {
        var string = Substring(string)
        if string.hasPrefix("["), string.hasSuffix("]") { string = string.dropFirst().dropLast() }
        let (text, interface) = IPAddressText.split(String(string))
        var address = in6_addr()
        guard inet_pton(AF_INET6, text, &address) == 1 else { return nil }
        self.init(withUnsafeBytes(of: &address) { Data($0) }, interface)
    }

    /// `::`, every local address.
    public static let any = IPv6Address(Data(repeating: 0, count: 16))!
    /// `::1`.
    public static let loopback = IPv6Address(Data(repeating: 0, count: 15) + [1])!
    /// `ff01::1`, every node on this node.
    public static let nodeLocalNodes = IPv6Address(Data([0xFF, 0x01] + Array(repeating: 0, count: 13) + [1]))!
    /// `ff02::1`, every node on the link.
    public static let linkLocalNodes = IPv6Address(Data([0xFF, 0x02] + Array(repeating: 0, count: 13) + [1]))!
    /// `ff02::2`, every router on the link.
    public static let linkLocalRouters = IPv6Address(Data([0xFF, 0x02] + Array(repeating: 0, count: 13) + [2]))!

    private var bytes: [UInt8] { Array(rawValue) }

    /// Whether the address is `::`.
    public var isAny: Bool { rawValue.allSatisfy { $0 == 0 } }
    /// Whether the address is `::1`.
    public var isLoopback: Bool { self.rawValue == Self.loopback.rawValue }
    /// Whether the address is in `fe80::/10` (RFC 4291 §2.5.6).
    public var isLinkLocal: Bool { bytes[0] == 0xFE && bytes[1] & 0xC0 == 0x80 }
    /// Whether the address is in `ff00::/8` (RFC 4291 §2.7).
    public var isMulticast: Bool { bytes[0] == 0xFF }
    /// Whether the address is IPv4-mapped, `::ffff:a.b.c.d` (RFC 4291 §2.5.5.2).
    public var isIPv4Mapped: Bool { bytes[0..<10].allSatisfy { $0 == 0 } && bytes[10] == 0xFF && bytes[11] == 0xFF }
    /// Whether the address is IPv4-compatible, `::a.b.c.d` (RFC 4291 §2.5.5.1, deprecated),
    /// other than `::` and `::1`; Apple's spelling.
    public var isIPv4Compatabile: Bool {
        bytes[0..<12].allSatisfy { $0 == 0 } && !isAny && !isLoopback
    }
    /// Whether the address is in `2002::/16`, 6to4 (RFC 3056).
    public var is6to4: Bool { bytes[0] == 0x20 && bytes[1] == 0x02 }
    /// Whether the address is in `fc00::/7`, unique local (RFC 4193).
    public var isUniqueLocal: Bool { bytes[0] & 0xFE == 0xFC }
    /// The scope of a multicast address; nil for other addresses or unlisted scopes.
    public var multicastScope: Scope? { isMulticast ? Scope(rawValue: bytes[1] & 0x0F) : nil }
    /// The IPv4 address inside an IPv4-mapped or IPv4-compatible address; nil for others.
    public var asIPv4: IPv4Address? {
        guard isIPv4Mapped || isIPv4Compatabile else { return nil }
        return IPv4Address(Data(bytes[12...]), interface)
    }

    /// The address as RFC 5952 writes it (`inet_ntop(3)`), with `%` and the interface when it
    /// is scoped.
    public var debugDescription: String { IPAddressText.format(AF_INET6, rawValue, interface) }
}

/// Text forms shared by both address types.
enum IPAddressText {
    /// `address%interface` split in two; the interface is nil without a `%`.
    static func split(_ string: String) -> (String, NWInterface?) {
        guard let percent = string.firstIndex(of: "%") else { return (string, nil) }
        let name = String(string[string.index(after: percent)...])
        return (String(string[..<percent]), name.isEmpty ? nil : NWInterface(name: name))
    }

    /// `inet_ntop(3)` of the bytes, with `%name` for a scoped address.
    static func format(_ family: CInt, _ bytes: Data, _ interface: NWInterface?) -> String {
        var buffer = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
        let written = bytes.withUnsafeBytes { inet_ntop(family, $0.baseAddress, &buffer, socklen_t(buffer.count)) }
        let text = written == nil ? "?" : String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return interface.map { "\(text)%\($0.name)" } ?? text
    }
}
