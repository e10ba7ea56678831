import Logging

/// A request's log handler for framework adapters: the application's handler, with metadata
/// set on the request's logger held beside it and handed over only when a message is written.
/// What the application's handler prints is the same as if the items had been set on it.
///
/// Web frameworks give every request a logger with an ID set (Hummingbird's `hb.request.id`,
/// Vapor's `request-id`) and read it back. On swift-log's `StreamLogHandler`, setting one
/// item renders all of them again (its `prettyMetadata`): about 7.7k instructions per request
/// measured with callgrind, a fifth of what a bare ``HTTP3Server`` handler costs, spent on every
/// request although most never log. Here an item costs a dictionary insertion.
///
/// Made once and copied for each request, it allocates nothing until an item is set: the base
/// handler sits in a box the copies share until one of them changes it, so the handler is two
/// words, which a `Logger` holds in place. A handler larger than three words is boxed by every
/// `Logger` that holds it, and boxed again when a copy of that logger is first changed.
public struct DeferredMetadataLogHandler: LogHandler {
    private var baseBox: BaseBox
    /// Items set through this handler; on a clash they win over the base handler's, as the
    /// later value would on one handler.
    private var deferredMetadata: Logger.Metadata

    /// The base handler, shared by copies and copied before one of them changes it.
    // @unchecked Sendable: `handler` is changed only through `changeBase`, on a box no other
    // copy shares.
    private final class BaseBox: @unchecked Sendable {
        var handler: any LogHandler

        init(_ handler: any LogHandler) {
            self.handler = handler
        }
    }

    /// Wraps `base`, the application's handler (`logger.handler`), holding `metadata` back
    /// until a message is written.
    public init(base: any LogHandler, metadata: Logger.Metadata = [:]) {
        self.baseBox = BaseBox(base)
        self.deferredMetadata = metadata
    }

    private var base: any LogHandler { baseBox.handler }

    /// Changes this copy's base handler, first giving it a box of its own if it shares one.
    private mutating func changeBase(_ change: (inout any LogHandler) -> Void) {
        if !isKnownUniquelyReferenced(&baseBox) { baseBox = BaseBox(baseBox.handler) }
        change(&baseBox.handler)
    }

    /// The base handler's level.
    public var logLevel: Logger.Level {
        get { base.logLevel }
        set { changeBase { $0.logLevel = newValue } }
    }

    /// The base handler's metadata provider.
    public var metadataProvider: Logger.MetadataProvider? {
        get { base.metadataProvider }
        set { changeBase { $0.metadataProvider = newValue } }
    }

    /// The base handler's items with this handler's over them. Setting it replaces both.
    public var metadata: Logger.Metadata {
        get { base.metadata.merging(deferredMetadata) { _, own in own } }
        set {
            changeBase { $0.metadata = [:] }
            deferredMetadata = newValue
        }
    }

    /// One item, this handler's or else the base handler's. Removing one removes it from both.
    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { deferredMetadata[key] ?? base[metadataKey: key] }
        set {
            deferredMetadata[key] = newValue
            if newValue == nil, base[metadataKey: key] != nil { changeBase { $0[metadataKey: key] = nil } }
        }
    }

    /// Hands the message to the base handler with the held items as explicit metadata, under
    /// the message's own, which swift-log lets win over a handler's.
    public func log(event: LogEvent) {
        guard !deferredMetadata.isEmpty else { return base.log(event: event) }
        var event = event
        event.metadata = deferredMetadata.merging(event.metadata ?? [:]) { _, explicit in explicit }
        base.log(event: event)
    }
}
