import Logging

/// Sends every logger's messages at `level` and above to standard error: the tools' one log
/// destination, whose level their -v flags pick.
public func logToStandardError(level: Logger.Level) {
    LoggingSystem.bootstrap { label in
        var handler = StreamLogHandler.standardError(label: label)
        handler.logLevel = level
        return handler
    }
}
