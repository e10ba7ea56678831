extension NWBrowser {
    /// One service the browser found, matching Apple's `NWBrowser.Result`.
    public struct Result: Hashable, Sendable {
        /// Extra data the service advertises, matching Apple's `NWBrowser.Result.Metadata`.
        public enum Metadata: Hashable, Sendable {
            /// The service's TXT record, for a `.bonjourWithTXTRecord` browser.
            case bonjour(NWTXTRecord)
            /// No metadata, for a `.bonjour` browser.
            case none
        }

        /// How a result differs from an earlier one, matching Apple's `NWBrowser.Result.Change`.
        public enum Change: Hashable, Sendable {
            /// What changed within a result, matching Apple's `NWBrowser.Result.Change.Flags`.
            public struct Flags: OptionSet, Hashable, Sendable {
                public let rawValue: UInt8
                public init(rawValue: UInt8) { self.rawValue = rawValue }
                /// Nothing changed.
                public static let identical = Flags([])
                /// The service is now seen on another interface too.
                public static let interfaceAdded = Flags(rawValue: 1 << 0)
                /// The service is no longer seen on one of its interfaces.
                public static let interfaceRemoved = Flags(rawValue: 1 << 1)
                /// Its TXT record changed.
                public static let metadataChanged = Flags(rawValue: 1 << 2)
            }

            /// The result did not change.
            case identical
            /// A service appeared.
            case added(Result)
            /// A service went away.
            case removed(Result)
            /// A service's interfaces or metadata changed.
            case changed(old: Result, new: Result, flags: Flags)

            /// The change from `old` to `new` (nil for absent), matching Apple's `init(between:_:)`.
            public init(between old: Result?, _ new: Result?) {
                switch (old, new) {
                case (nil, nil): self = .identical
                case (nil, let new?): self = .added(new)
                case (let old?, nil): self = .removed(old)
                case (let old?, let new?):
                    var flags: Flags = []
                    if old.metadata != new.metadata { flags.insert(.metadataChanged) }
                    if !Set(new.interfaces).isSubset(of: old.interfaces) { flags.insert(.interfaceAdded) }
                    if !Set(old.interfaces).isSubset(of: new.interfaces) { flags.insert(.interfaceRemoved) }
                    self = flags.isEmpty && old == new ? .identical : .changed(old: old, new: new, flags: flags)
                }
            }
        }

        /// The service, as a `.service` endpoint to connect to, matching Apple's `endpoint`.
        public let endpoint: NWEndpoint
        /// Its TXT record, or `.none`, matching Apple's `metadata`.
        public let metadata: Metadata
        /// The interfaces it was seen on, matching Apple's `interfaces`.
        public let interfaces: [NWInterface]
    }
}
