import H3
import NIOCore
import Vapor

/// Vapor's async body writer over H3's `HTTP3BodyWriter`: each buffer is handed to the server
/// and the write returns once the server has taken it, so QUIC flow control paces the route.
struct HTTP3VaporBodyWriter: AsyncBodyStreamWriter {
    let writer: HTTP3BodyWriter

    func write(_ result: BodyStreamResult) async throws {
        switch result {
        case .buffer(let buffer):
            try await writer.write(buffer.withUnsafeReadableBytes { Array($0) })
        case .end:
            writer.finish()
        case .error(let error):
            writer.fail(error)
        }
    }
}
