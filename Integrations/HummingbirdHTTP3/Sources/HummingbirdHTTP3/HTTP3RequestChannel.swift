import H3
import NIOCore
import Synchronization

/// The NIO `Channel` a Hummingbird request context sees for a request that came over HTTP/3.
///
/// Hummingbird builds every request context from an `ApplicationRequestContextSource`, which
/// holds the `Channel` of the TCP connection. An HTTP/3 request has no channel of its own (its
/// QUIC stream lives inside our connection), so this stands in for one: it answers what a
/// context asks of a channel, the client's and the server's addresses (Hummingbird's
/// `RemoteAddressRequestContext` reads `remoteAddress`), the connection's event loop and an
/// allocator, and it is active until its response has been written. Reading and writing go
/// through the request and the response, not the channel: those operations fail with
/// `ChannelError.operationUnsupported`. With it, an application's own context type serves both
/// transports unchanged.
final class HTTP3RequestChannel: Channel, ChannelCore, @unchecked Sendable {
    // @unchecked Sendable: the stored properties are constants, and `state` is behind its lock,
    // a `Mutex` held inline: one is made per request, and a lock box of its own was a second
    // allocation and a pthread mutex.
    let eventLoop: any EventLoop
    let localAddress: SocketAddress?
    let remoteAddress: SocketAddress?
    let allocator = ByteBufferAllocator()
    let parent: (any Channel)? = nil
    let isWritable = true
    private let state = Mutex(State())

    private struct State {
        var isClosed = false
        var closePromise: EventLoopPromise<Void>?
        var pipeline: ChannelPipeline?
    }

    init(for request: HTTP3ServerRequest, fallbackEventLoop: @autoclosure () -> any EventLoop) {
        self.eventLoop = request.eventLoop ?? fallbackEventLoop()
        self.localAddress = request.localSocketAddress
        self.remoteAddress = request.remoteSocketAddress
    }

    var isActive: Bool { state.withLock { !$0.isClosed } }

    /// Succeeds once the request's response has been written, as a TCP channel's does when the
    /// connection closes. Made only for a caller that asks.
    var closeFuture: EventLoopFuture<Void> {
        state.withLock { state in
            if state.isClosed { return eventLoop.makeSucceededVoidFuture() }
            if let promise = state.closePromise { return promise.futureResult }
            let promise = eventLoop.makePromise(of: Void.self)
            state.closePromise = promise
            return promise.futureResult
        }
    }

    /// Made only for a caller that asks: handlers do not talk to an HTTP/3 request's channel.
    var pipeline: ChannelPipeline {
        state.withLock { state in
            if let pipeline = state.pipeline { return pipeline }
            let pipeline = ChannelPipeline(channel: self)
            state.pipeline = pipeline
            return pipeline
        }
    }

    var _channelCore: any ChannelCore { self }

    /// Marks the request done: the channel turns inactive and its close future succeeds.
    func requestEnded() {
        let promise = state.withLock { state -> EventLoopPromise<Void>? in
            state.isClosed = true
            defer { state.closePromise = nil }
            return state.closePromise
        }
        promise?.succeed()
    }

    func setOption<Option: ChannelOption>(_ option: Option, value: Option.Value) -> EventLoopFuture<Void> {
        eventLoop.makeFailedFuture(ChannelError.operationUnsupported)
    }

    func getOption<Option: ChannelOption>(_ option: Option) -> EventLoopFuture<Option.Value> {
        eventLoop.makeFailedFuture(ChannelError.operationUnsupported)
    }

    // MARK: ChannelCore: nothing goes through the channel itself.

    func localAddress0() throws -> SocketAddress {
        guard let localAddress else { throw ChannelError.operationUnsupported }
        return localAddress
    }

    func remoteAddress0() throws -> SocketAddress {
        guard let remoteAddress else { throw ChannelError.operationUnsupported }
        return remoteAddress
    }

    func register0(promise: EventLoopPromise<Void>?) { promise?.fail(ChannelError.operationUnsupported) }
    func registerAlreadyConfigured0(promise: EventLoopPromise<Void>?) { promise?.fail(ChannelError.operationUnsupported) }
    func bind0(to: SocketAddress, promise: EventLoopPromise<Void>?) { promise?.fail(ChannelError.operationUnsupported) }
    func connect0(to: SocketAddress, promise: EventLoopPromise<Void>?) { promise?.fail(ChannelError.operationUnsupported) }
    func write0(_ data: NIOAny, promise: EventLoopPromise<Void>?) { promise?.fail(ChannelError.operationUnsupported) }
    func flush0() {}
    func read0() {}
    func close0(error: any Error, mode: CloseMode, promise: EventLoopPromise<Void>?) { promise?.fail(ChannelError.operationUnsupported) }
    func triggerUserOutboundEvent0(_ event: Any, promise: EventLoopPromise<Void>?) { promise?.fail(ChannelError.operationUnsupported) }
    func channelRead0(_ data: NIOAny) {}
    func errorCaught0(error: any Error) {}
}
