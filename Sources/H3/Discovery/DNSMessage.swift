#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Dispatch
#if canImport(Glibc)
import Glibc
#endif

/// The few pieces of the DNS wire format (RFC 1035 §4.1) an HTTPS-record lookup needs.
package enum DNSMessage {
    static func query(id: UInt16, name: String, type: UInt16) -> [UInt8]? {
        var message: [UInt8] = [UInt8(id >> 8), UInt8(id & 0xff), 0x01, 0x00, 0x00, 0x01, 0, 0, 0, 0, 0, 0]
        let labels = name.split(separator: ".", omittingEmptySubsequences: true)
        guard !labels.isEmpty else { return nil }
        for label in labels {
            let bytes = Array(label.utf8)
            guard !bytes.isEmpty, bytes.count <= 63 else { return nil }
            message.append(UInt8(bytes.count))
            message += bytes
        }
        message += [0, UInt8(type >> 8), UInt8(type & 0xff), 0x00, 0x01]
        return message
    }

    /// Sends `query` over UDP and waits for the answer with the same ID.
    static func exchange(_ query: [UInt8], with server: (host: String, port: UInt16), timeoutMicroseconds: Int) throws -> [UInt8] {
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_DGRAM.rawValue)
        var result: UnsafeMutablePointer<addrinfo>?
        guard getaddrinfo(server.host, String(server.port), &hints, &result) == 0, let address = result else {
            throw HTTPSRecordResolver.Failure(description: "cannot resolve the DNS server \(server.host)")
        }
        defer { freeaddrinfo(address) }
        let socketFD = socket(address.pointee.ai_family, Int32(SOCK_DGRAM.rawValue), 0)
        guard socketFD >= 0 else { throw HTTPSRecordResolver.Failure(description: "cannot open a UDP socket") }
        defer { close(socketFD) }
        // At least 1 µs: a zero SO_RCVTIMEO means no time limit at all.
        let timeoutMicroseconds = max(1, timeoutMicroseconds)
        var timeout = timeval(tv_sec: timeoutMicroseconds / 1_000_000, tv_usec: timeoutMicroseconds % 1_000_000)
        setsockopt(socketFD, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        guard connect(socketFD, address.pointee.ai_addr, address.pointee.ai_addrlen) == 0,
            query.withUnsafeBytes({ send(socketFD, $0.baseAddress, $0.count, 0) }) == query.count
        else { throw HTTPSRecordResolver.Failure(description: "cannot send to the DNS server \(server.host):\(server.port)") }
        let deadline = Date().addingTimeInterval(Double(timeoutMicroseconds) / 1e6)
        var buffer = [UInt8](repeating: 0, count: 4096)
        while Date() < deadline {
            let count = recv(socketFD, &buffer, buffer.count, 0)
            if count < 0 {
                // A connected UDP socket reports the peer's ICMP port unreachable as ECONNREFUSED.
                if errno == ECONNREFUSED {
                    throw HTTPSRecordResolver.Failure(description: "the DNS server \(server.host):\(server.port) refused the query: nothing listens there")
                }
                throw HTTPSRecordResolver.Failure(description: "no answer from the DNS server \(server.host):\(server.port) within \(timeoutMicroseconds / 1000) ms")
            }
            // Ignore stray datagrams that are not the answer to this query.
            if count >= 12, buffer[0] == query[0], buffer[1] == query[1] { return Array(buffer[0..<count]) }
        }
        throw HTTPSRecordResolver.Failure(description: "no answer from the DNS server \(server.host):\(server.port)")
    }

    /// The HTTPS records in the answer section of `message`.
    package static func httpsRecords(in message: [UInt8], id: UInt16) throws -> [HTTPSRecord] {
        var reader = DNSReader(message: message, position: 0)
        guard let responseID = reader.readUInt16(), responseID == id, let flags = reader.readUInt16(),
            let questions = reader.readUInt16(), let answers = reader.readUInt16(),
            reader.readUInt16() != nil, reader.readUInt16() != nil
        else { throw HTTPSRecordResolver.Failure(description: "malformed DNS answer") }
        let rcode = flags & 0x000f
        if rcode == 3 { return [] }  // NXDOMAIN: no such name, so no record.
        guard flags & 0x8000 != 0, rcode == 0 else {
            throw HTTPSRecordResolver.Failure(description: "the DNS server answered with error code \(rcode)")
        }
        for _ in 0..<questions {
            guard reader.readName() != nil, reader.readUInt16() != nil, reader.readUInt16() != nil else {
                throw HTTPSRecordResolver.Failure(description: "malformed DNS question section")
            }
        }
        var records: [HTTPSRecord] = []
        for _ in 0..<answers {
            guard reader.readName() != nil, let type = reader.readUInt16(), reader.readUInt16() != nil,
                reader.readUInt32() != nil, let length = reader.readUInt16(), reader.position + Int(length) <= message.count
            else { throw HTTPSRecordResolver.Failure(description: "malformed DNS answer section") }
            let rdata = message[reader.position..<(reader.position + Int(length))]
            reader.position += Int(length)
            if type == 65 {
                guard let record = HTTPSRecord.parse(rdata: rdata, message: message) else {
                    throw HTTPSRecordResolver.Failure(description: "malformed HTTPS record")
                }
                records.append(record)
            }
        }
        return records
    }
}
