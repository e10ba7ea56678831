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
public struct DeferredMetadataLogHandler: LogHandler {
    private var base: any LogHandler
    /// Items set through this handler; on a clash they win over the base handler's, as the
    /// later value would on one handler.
    private var deferredMetadata: Logger.Metadata

    /// Wraps `base`, the application's handler (`logger.handler`), holding `metadata` back
    /// until a message is written.
    public init(base: any LogHandler, metadata: Logger.Metadata = [:]) {
        self.base = base
        self.deferredMetadata = metadata
    }

    /// The base handler's level.
    public var logLevel: Logger.Level {
        get { base.logLevel }
        set { base.logLevel = newValue }
    }

    /// The base handler's metadata provider.
    public var metadataProvider: Logger.MetadataProvider? {
        get { base.metadataProvider }
        set { base.metadataProvider = newValue }
    }

    /// The base handler's items with this handler's over them. Setting it replaces both.
    public var metadata: Logger.Metadata {
        get { base.metadata.merging(deferredMetadata) { _, own in own } }
        set {
            base.metadata = [:]
            deferredMetadata = newValue
        }
    }

    /// One item, this handler's or else the base handler's. Removing one removes it from both.
    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { deferredMetadata[key] ?? base[metadataKey: key] }
        set {
            deferredMetadata[key] = newValue
            if newValue == nil, base[metadataKey: key] != nil { base[metadataKey: key] = nil }
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
