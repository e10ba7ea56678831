import Foundation

/// One exchange's status and body, as the same request over TCP and over HTTP/3 must give it.
public struct Exchange: Equatable, Sendable, CustomStringConvertible {
    public var status: Int
    /// The body, with a JSON body's object keys sorted: the encoder's key order is its own affair.
    public var body: String
    public var description: String { "\(status) \(body)" }

    public init(status: Int, body: some Sequence<UInt8>) {
        self.status = status
        let bytes = Data(body)
        if let json = try? JSONSerialization.jsonObject(with: bytes, options: [.fragmentsAllowed]),
            let sorted = try? JSONSerialization.data(withJSONObject: json, options: [.sortedKeys, .fragmentsAllowed])
        {
            self.body = String(decoding: sorted, as: UTF8.self)
        } else {
            self.body = String(decoding: bytes, as: UTF8.self)
        }
    }
}
