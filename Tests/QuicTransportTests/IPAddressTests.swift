import Foundation
import QuicTestSupport
import QuicTransport
import Testing

/// Apple's `IPv4Address`, `IPv6Address` and the endpoint forms built on them: parsing, bytes,
/// kinds, and `NWEndpoint.Host`'s choice of case.
@Suite("IP addresses and endpoints")
struct IPAddressTests {
    @Test func ipv4ParsesAndRoundTrips() throws {
        let address = try #require(IPv4Address("192.0.2.17"))
        #expect(address.rawValue == Data([192, 0, 2, 17]))
        #expect(address.debugDescription == "192.0.2.17")
        #expect(IPv4Address(address.rawValue) == address)
        #expect(IPv4Address(Data([1, 2, 3])) == nil, "four bytes or nothing")
        for bad in ["", "256.1.1.1", "1.2.3", "1.2.3.4.5", "::1", "example.com", "1.2.3.4 "] {
            #expect(IPv4Address(bad) == nil, "\(bad)")
        }
        let scoped = try #require(IPv4Address("127.0.0.1%lo"))
        #expect(scoped.interface?.name == "lo")
        #expect(scoped.debugDescription == "127.0.0.1%lo")
        #expect(scoped != IPv4Address.loopback, "the interface is part of the address")
    }

    @Test func ipv4StaticsAndKinds() {
        #expect(IPv4Address.any.debugDescription == "0.0.0.0")
        #expect(IPv4Address.broadcast.debugDescription == "255.255.255.255")
        #expect(IPv4Address.loopback.debugDescription == "127.0.0.1")
        #expect(IPv4Address.allHostsGroup.debugDescription == "224.0.0.1")
        #expect(IPv4Address.allRoutersGroup.debugDescription == "224.0.0.2")
        #expect(IPv4Address.allReportsGroup.debugDescription == "224.0.0.22")
        #expect(IPv4Address.mdnsGroup.debugDescription == "224.0.0.251")
        #expect(IPv4Address.loopback.isLoopback && IPv4Address("127.9.9.9")!.isLoopback)
        #expect(!IPv4Address("128.0.0.1")!.isLoopback)
        #expect(IPv4Address.mdnsGroup.isMulticast && IPv4Address("239.255.255.255")!.isMulticast)
        #expect(!IPv4Address("240.0.0.1")!.isMulticast && !IPv4Address.loopback.isMulticast)
        #expect(IPv4Address("169.254.3.4")!.isLinkLocal && !IPv4Address("169.253.3.4")!.isLinkLocal)
    }

    @Test func ipv6ParsesAndRoundTrips() throws {
        let address = try #require(IPv6Address("2001:db8:0:0:0:0:0:1"))
        #expect(address.rawValue.count == 16)
        #expect(address.rawValue.prefix(4) == Data([0x20, 0x01, 0x0d, 0xb8]))
        #expect(address.debugDescription == "2001:db8::1", "RFC 5952's form")
        #expect(IPv6Address(address.rawValue) == address)
        #expect(IPv6Address("[::1]") == IPv6Address.loopback)
        #expect(IPv6Address(Data(repeating: 0, count: 4)) == nil)
        for bad in ["", "1::2::3", "12345::", "127.0.0.1", "example.com", ":::"] {
            #expect(IPv6Address(bad) == nil, "\(bad)")
        }
        let scoped = try #require(IPv6Address("fe80::1%lo"))
        #expect(scoped.interface?.name == "lo")
        #expect(scoped.isLinkLocal)
        #expect(scoped.debugDescription == "fe80::1%lo")
    }

    @Test func ipv6Kinds() throws {
        #expect(IPv6Address.any.isAny && IPv6Address.any.debugDescription == "::")
        #expect(IPv6Address.loopback.isLoopback && !IPv6Address.any.isLoopback)
        #expect(IPv6Address.linkLocalNodes.debugDescription == "ff02::1")
        #expect(IPv6Address.linkLocalRouters.debugDescription == "ff02::2")
        #expect(IPv6Address.nodeLocalNodes.multicastScope == .nodeLocal)
        #expect(IPv6Address.linkLocalNodes.multicastScope == .linkLocal)
        #expect(IPv6Address("ff0e::101")?.multicastScope == .global)
        #expect(IPv6Address("ff05::2")?.multicastScope == .siteLocal)
        #expect(IPv6Address.loopback.multicastScope == nil)
        let mapped = try #require(IPv6Address("::ffff:192.0.2.1"))
        #expect(mapped.isIPv4Mapped && !mapped.isIPv4Compatabile)
        #expect(mapped.asIPv4 == IPv4Address("192.0.2.1"))
        #expect(IPv6Address("::192.0.2.1")?.isIPv4Compatabile == true)
        #expect(IPv6Address.loopback.asIPv4 == nil, "::1 is not IPv4-compatible")
        #expect(IPv6Address("2002:c000:201::1")?.is6to4 == true)
        #expect(IPv6Address("fd12:3456::1")?.isUniqueLocal == true)
        #expect(IPv6Address("2001:db8::1")?.isUniqueLocal == false)
        #expect(IPv6Address("ff02::fb")?.isMulticast == true)
    }

    /// Both address types through the protocol, as generic Apple code uses them.
    @Test func theProtocolCoversBothVersions() {
        func describe<A: IPAddress>(_ type: A.Type, _ bytes: Data) -> Bool? { A(bytes, nil)?.isLoopback }
        #expect(describe(IPv4Address.self, Data([127, 0, 0, 1])) == true)
        #expect(describe(IPv6Address.self, IPv6Address.loopback.rawValue) == true)
        #expect(describe(IPv6Address.self, Data([127, 0, 0, 1])) == nil)
    }

    /// Apple's `Host(_:)` makes `.ipv4` and `.ipv6` of addresses and `.name` of the rest; the
    /// text form is the same for all.
    @Test func hostPicksItsCase() {
        #expect(NWEndpoint.Host("127.0.0.1") == .ipv4(.loopback))
        #expect(NWEndpoint.Host("::1") == .ipv6(.loopback))
        #expect(NWEndpoint.Host("[::1]") == .ipv6(.loopback))
        #expect(NWEndpoint.Host("localhost") == .name("localhost", nil))
        let literal: NWEndpoint.Host = "192.0.2.1"
        #expect(literal == .ipv4(IPv4Address("192.0.2.1")!))
        #expect(NWEndpoint.Host.ipv6(IPv6Address("fe80::1%lo")!).interface?.name == "lo")
        #expect(NWEndpoint.hostPort(host: .ipv6(.loopback), port: 443).description == "[::1]:443")
        #expect(NWEndpoint.hostPort(host: .ipv4(.loopback), port: 80).description == "127.0.0.1:80")
        #expect(NWEndpoint.Host.ipv4(.loopback).stringValue == "127.0.0.1")
    }
}
