@testable import H3
import Testing

@Suite("HTTP3Client authority")
struct HTTP3AuthorityTests {
    @Test(arguments: [
        ("example.com", "example.com", 443),
        ("example.com:8443", "example.com", 8443),
        ("127.0.0.1:26443", "127.0.0.1", 26443),
        ("[::1]", "::1", 443),
        ("[::1]:4433", "::1", 4433),
        ("[2001:db8::1]:65535", "2001:db8::1", 65535),
        ("bücher.example:8080", "bücher.example", 8080),
    ] as [(String, String, Int)])
    func anAuthoritySplitsIntoHostAndPort(authority: String, host: String, port: Int) throws {
        let split = try #require(HTTP3Client.split(authority: authority))
        #expect(split.0 == host)
        #expect(Int(split.1) == port)
    }

    @Test(arguments: ["", ":443", "host:", "host:99999", "host:4x", "a:b:c", "[::1", "[::1]443", "[::1]:", "[]:443", "host:+80", "host:-0", "host:080000"])
    func aMalformedAuthorityIsRefused(authority: String) {
        #expect(HTTP3Client.split(authority: authority) == nil)
    }
}
