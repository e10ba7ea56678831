import Hummingbird
import NIOCore

/// The application's own request context, as any Hummingbird application writes one. It
/// serves HTTP/1.1 and HTTP/3 alike: nothing in it knows which transport a request came over.
public struct TodosRequestContext: RequestContext, RemoteAddressRequestContext {
    public var coreContext: CoreRequestContextStorage
    /// The client's address and port.
    public let remoteAddress: SocketAddress?

    public init(source: ApplicationRequestContextSource) {
        coreContext = CoreRequestContextStorage(source: source)
        remoteAddress = source.channel.remoteAddress
    }

    /// JSON bodies are small; `/upload` streams its body instead of decoding it.
    public var maxUploadSize: Int { 1 << 20 }
}
