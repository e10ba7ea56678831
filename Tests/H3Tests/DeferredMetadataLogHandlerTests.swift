import Foundation
import H3
import Logging
import Testing

/// `DeferredMetadataLogHandler` prints what the application's handler would have printed had
/// the request's items been set on it: the same items, with the same precedence.
@Suite("DeferredMetadataLogHandler")
struct DeferredMetadataLogHandlerTests {
    /// Records each message with the metadata a printing handler would print with it: its own
    /// items under the message's.
    // @unchecked Sendable: `entries` is read and written only under `lock`.
    final class Recorded: @unchecked Sendable {
        private let lock = NSLock()
        private var entries: [Logger.Metadata] = []
        var all: [Logger.Metadata] { lock.withLock { entries } }
        func append(_ entry: Logger.Metadata) { lock.withLock { entries.append(entry) } }
    }

    struct RecordingHandler: LogHandler {
        let recorded: Recorded
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level = .trace
        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }
        func log(event: LogEvent) {
            recorded.append(metadata.merging(event.metadata ?? [:]) { _, explicit in explicit })
        }
    }

    /// The same changes made to a plain logger and to one with the deferred handler must print
    /// the same metadata.
    @Test func printsWhatTheBaseHandlerWouldHavePrinted() {
        let plainRecord = Recorded()
        let deferredRecord = Recorded()
        var application = Logger(label: "app") { _ in RecordingHandler(recorded: plainRecord) }
        application[metadataKey: "app"] = "todos"
        application[metadataKey: "shared"] = "application"
        var plain = application
        var deferred = Logger(label: "app") { _ in RecordingHandler(recorded: deferredRecord) }
        deferred[metadataKey: "app"] = "todos"
        deferred[metadataKey: "shared"] = "application"
        deferred.handler = DeferredMetadataLogHandler(base: deferred.handler, metadata: ["request-id": "1"])
        plain[metadataKey: "request-id"] = "1"

        for logger in [plain, deferred] {
            logger.info("one")
            logger.info("two", metadata: ["request-id": "explicit", "route": "/"])
        }
        plain[metadataKey: "shared"] = "request"
        deferred[metadataKey: "shared"] = "request"
        plain[metadataKey: "app"] = nil
        deferred[metadataKey: "app"] = nil
        plain.info("three")
        deferred.info("three")

        #expect(deferredRecord.all == plainRecord.all)
        #expect(plainRecord.all.count == 3)
        #expect(plainRecord.all[1]["request-id"] == "explicit")
        #expect(plainRecord.all[2] == ["shared": "request", "request-id": "1"])
        #expect(deferred[metadataKey: "request-id"] == "1")
        #expect(deferred[metadataKey: "app"] == nil)
        #expect(deferred.handler.metadata == ["shared": "request", "request-id": "1"])
    }

    /// The level is the base handler's, so a request's logger filters as the application's does.
    @Test func theLevelIsTheBaseHandlers() {
        let record = Recorded()
        var base = Logger(label: "app") { _ in RecordingHandler(recorded: record) }
        base.logLevel = .warning
        var logger = base
        logger.handler = DeferredMetadataLogHandler(base: base.handler, metadata: ["request-id": "2"])
        logger.info("filtered")
        logger.warning("kept")
        #expect(logger.logLevel == .warning)
        #expect(record.all == [["request-id": "2"]])
    }

    /// Copies of one handler, as adapters hand each request, share its base handler only until
    /// one changes it: a value, as swift-log requires of a handler.
    @Test func copiesChangeOnlyThemselves() {
        let record = Recorded()
        var application = Logger(label: "app") { _ in RecordingHandler(recorded: record) }
        application[metadataKey: "app"] = "todos"
        application.logLevel = .info
        var prototype = application
        prototype.handler = DeferredMetadataLogHandler(base: application.handler)

        var first = prototype
        first.logLevel = .error
        first[metadataKey: "app"] = nil
        first[metadataKey: "request-id"] = "1"
        var second = prototype
        second[metadataKey: "request-id"] = "2"
        second.handler.metadata = ["only": "second"]

        #expect(prototype.logLevel == .info && second.logLevel == .info && first.logLevel == .error)
        #expect(prototype.handler.metadata == ["app": "todos"])
        #expect(first.handler.metadata == ["request-id": "1"])
        #expect(second.handler.metadata == ["only": "second"])
        prototype.info("prototype")
        first.info("filtered")
        second.info("second")
        #expect(record.all == [["app": "todos"], ["only": "second"]])
    }
}
