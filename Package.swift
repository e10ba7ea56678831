// swift-tools-version:6.2
import PackageDescription

let swiftSettings: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("MemberImportVisibility"),
]

// The porting corpus's dependencies, for its Swift 5 and Swift 6 builds alike.
let portedAppDependencies: [Target.Dependency] = [
    "QuicTransport", "QuicTestSupport",
    .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
]

let package = Package(
    name: "swift-quic-transport",
    platforms: [.macOS(.v13)],
    products: [
        .library(name: "QuicTransport", targets: ["QuicTransport"]),
        .library(name: "H3", targets: ["H3"]),
        .executable(name: "quic-echo", targets: ["quic-echo"]),
        .executable(name: "h3get", targets: ["h3get"]),
        .executable(name: "h3serve", targets: ["h3serve"]),
        .executable(name: "h3load", targets: ["h3load"]),
        .executable(name: "quic-netem", targets: ["quic-netem"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-http-types.git", from: "1.8.0"),
        .package(url: "https://github.com/apple/swift-http-structured-headers.git", from: "1.7.0"),
        .package(url: "https://github.com/apple/swift-nio-ssl.git", from: "2.37.6"),
        .package(url: "https://github.com/apple/swift-nio-http2.git", from: "1.46.0"),
        .package(url: "https://github.com/apple/swift-nio-extras.git", from: "1.35.2"),
        .package(url: "https://github.com/swift-server/async-http-client.git", from: "1.37.0"),
        // Documentation only: `swift package generate-documentation` (scripts/docs).
        .package(url: "https://github.com/swiftlang/swift-docc-plugin", from: "1.5.0"),
    ],
    targets: [
        // System libraries (Debian 12: ngtcp2 0.12.1 with GnuTLS, nghttp3 0.8.0).
        .systemLibrary(
            name: "CNGTCP2",
            pkgConfig: "libngtcp2",
            providers: [.apt(["libngtcp2-dev"])]
        ),
        .systemLibrary(
            name: "CNGTCP2Crypto",
            pkgConfig: "libngtcp2_crypto_gnutls gnutls nettle",
            providers: [.apt(["libngtcp2-crypto-gnutls-dev", "libgnutls28-dev", "nettle-dev"])]
        ),
        .systemLibrary(
            name: "CNGHTTP3",
            pkgConfig: "libnghttp3",
            providers: [.apt(["libnghttp3-dev"])]
        ),
        // Logic-free C shim: ngtcp2's and nghttp3's function-like macros and variadics turned
        // into callable functions.
        .target(
            name: "CQuicShims",
            dependencies: ["CNGTCP2", "CNGTCP2Crypto", "CNGHTTP3"]
        ),
        // Logic-free C shim: the Linux system calls and macros glibc hides (recvmmsg, cmsg,
        // epoll_pwait2, openat2), apart from the protocol libraries, as NIO keeps CNIOLinux.
        .target(name: "CQuicLinux"),
        .target(
            name: "QuicTransport",
            dependencies: [
                "CQuicShims", "CQuicLinux",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "H3",
            dependencies: [
                "QuicTransport", "CQuicShims", "CQuicLinux",
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "RawStructuredFieldValues", package: "swift-http-structured-headers"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                .product(name: "NIOHTTPTypes", package: "swift-nio-extras"),
                .product(name: "NIOHTTPTypesHTTP1", package: "swift-nio-extras"),
                .product(name: "NIOHTTPTypesHTTP2", package: "swift-nio-extras"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),
        // What the command-line tools share: the --stats option, HOST:PORT arguments, the trust flags.
        .target(
            name: "CommandLineSupport",
            dependencies: [
                "QuicTransport",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "quic-echo",
            dependencies: [
                "QuicTransport", "CommandLineSupport",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "h3get",
            dependencies: [
                "H3", "CommandLineSupport",
                "QuicTransport",
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            swiftSettings: swiftSettings
        ),
        // An HTTP/3 load generator in the manner of nghttp2's h2load.
        .executableTarget(
            name: "h3load",
            dependencies: [
                "H3", "CommandLineSupport",
                "QuicTransport",
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            swiftSettings: swiftSettings
        ),
        // A user-space impairment relay (this kernel has no netem); no dependency on the stack.
        // Examples/quic-notes: Apple's structured API with Coder, run with `swift run quic-notes`.
        .executableTarget(
            name: "quic-notes",
            dependencies: ["QuicTransport"],
            path: "Examples/quic-notes",
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "quic-netem",
            dependencies: [.product(name: "ArgumentParser", package: "swift-argument-parser")],
            swiftSettings: swiftSettings
        ),
        // Fuzz targets for every parser of untrusted input, and the seeds; quic-fuzz runs them
        // under libFuzzer (scripts/fuzz) and the tests replay Fuzz/corpus and Fuzz/regressions.
        .target(
            name: "QuicFuzzing",
            dependencies: [
                "QuicTransport", "H3",
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),
        .executableTarget(name: "quic-fuzz", dependencies: ["QuicFuzzing"], swiftSettings: swiftSettings),
        // Shared by both test targets: the in-memory client/server pair on a virtual clock.
        .target(
            name: "QuicTestSupport",
            dependencies: [
                "QuicTransport", "CommandLineSupport",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            ],
            path: "Tests/QuicTestSupport",
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "h3serve",
            dependencies: [
                "H3", "CommandLineSupport",
                "QuicTransport",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "QuicTransportTests",
            dependencies: [
                "QuicTransport",
                "QuicTestSupport",
                "CommandLineSupport",
                "CQuicShims",
                "CQuicLinux",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        // Network.framework code written as Apple-platform apps write it, run against real peers;
        // in Swift 5 mode, as most such apps are.
        .testTarget(
            name: "PortedAppTests",
            dependencies: portedAppDependencies,
            swiftSettings: [.swiftLanguageMode(.v5)]
        ),
        // The same corpus in Swift 6 mode, as apps that adopted strict concurrency build it:
        // Tests/PortedAppTestsSwift6 is a symbolic link to Tests/PortedAppTests, so every file
        // added there is built in both modes.
        .testTarget(
            name: "PortedAppTestsSwift6",
            dependencies: portedAppDependencies,
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
        .testTarget(
            name: "FuzzReplayTests",
            dependencies: ["QuicFuzzing", "QuicTestSupport"],
            swiftSettings: swiftSettings
        ),
        // h3load's statistics and report; an executable target can be imported by its tests.
        .testTarget(name: "H3LoadTests", dependencies: ["h3load"], swiftSettings: swiftSettings),
        .testTarget(
            name: "H3Tests",
            dependencies: [
                "H3", "QuicTransport", "CQuicShims", "QuicTestSupport", "CommandLineSupport",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),
    ]
)
