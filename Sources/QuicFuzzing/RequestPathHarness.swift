import Foundation
import H3
import HTTPTypes

/// The request-path fixture's directory, removed when the process exits.
nonisolated(unsafe) private var fixtureDirectory: String?

/// h3serve's file handler over a root that has ways out: a symbolic link to a file beside the
/// root, one to the root's parent, and the file beside it. Whatever the request path, a
/// response may only carry a file from inside the root.
final class RequestPathHarness: @unchecked Sendable {
    // @unchecked Sendable: libFuzzer calls one input at a time, on one thread.
    static let shared = RequestPathHarness()

    /// The contents of the files inside the root; nothing else may be served.
    private let servable: Set<[UInt8]> = [Array("inside\n".utf8), Array("index\n".utf8)]
    private let handler: HTTP3FileHandler
    /// The same root with listings on: a listing may only name what is inside the root.
    private let browsingHandler: HTTP3FileHandler

    private init() {
        let base = FileManager.default.temporaryDirectory.appendingPathComponent("quic-fuzz-root-\(getpid())")
        let root = base.appendingPathComponent("root")
        try? FileManager.default.removeItem(at: base)
        try! FileManager.default.createDirectory(at: root.appendingPathComponent("sub"), withIntermediateDirectories: true)
        try! Data("outside-secret\n".utf8).write(to: base.appendingPathComponent("outside.txt"))
        try! Data("inside\n".utf8).write(to: root.appendingPathComponent("inside.txt"))
        try! Data("index\n".utf8).write(to: root.appendingPathComponent("sub/index.html"))
        try! FileManager.default.createSymbolicLink(atPath: root.appendingPathComponent("escape.txt").path, withDestinationPath: "../outside.txt")
        try! FileManager.default.createSymbolicLink(atPath: root.appendingPathComponent("up").path, withDestinationPath: "..")
        handler = HTTP3FileHandler(root: root.path, openFileReuse: .zero)
        browsingHandler = HTTP3FileHandler(root: root.path, openFileReuse: .zero, listsDirectories: true)
        // The directory lives as long as the process; only a crash leaves it behind.
        fixtureDirectory = base.path
        atexit { fixtureDirectory.map { _ = try? FileManager.default.removeItem(atPath: $0) } }
    }

    func run(_ input: [UInt8]) {
        let path = String(decoding: input, as: UTF8.self)
        let request = HTTPRequest(method: .get, scheme: "https", authority: "localhost", path: path)
        let response = handler.respond(to: HTTP3ServerRequest(head: request))
        let listing = browsingHandler.respond(to: HTTP3ServerRequest(head: request))
        if listing.file == nil, listing.head.status == .ok {
            // The root's listing names inside.txt and sub/; the ways out are not entries of it.
            let text = String(decoding: listing.body, as: UTF8.self)
            precondition(!text.contains("outside") && !text.contains("escape.txt") && !text.contains("./up/"), "\(path.debugDescription) listed a way out: \(text)")
        }
        guard let file = response.file else {
            precondition(response.head.status != .ok, "200 without a file for \(path.debugDescription)")
            return
        }
        let body = (try? file.readAll()) ?? []
        precondition(servable.contains(body), "\(path.debugDescription) served a file from outside the root: \(String(decoding: body, as: UTF8.self).debugDescription)")
    }
}
