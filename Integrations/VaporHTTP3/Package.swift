// swift-tools-version:6.2
import PackageDescription

// VaporHTTP3: a Vapor 4 application serves every route over HTTP/3 as well as TCP,
// with `app.servers.use(.http3(...))`. Its own package, so the QUIC stack does not depend on Vapor.
let swiftSettings: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("MemberImportVisibility"),
]

let package = Package(
    name: "VaporHTTP3",
    platforms: [.macOS(.v13)],
    products: [
        .library(name: "VaporHTTP3", targets: ["VaporHTTP3"]),
    ],
    dependencies: [
        .package(name: "swift-quic-transport", path: "../.."),
        .package(url: "https://github.com/vapor/vapor.git", from: "4.122.3"),
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-http-types.git", from: "1.8.0"),
        .package(url: "https://github.com/apple/swift-crypto.git", "3.0.0"..<"5.0.0"),
        .package(url: "https://github.com/swift-server/async-http-client.git", from: "1.37.0"),
    ],
    targets: [
        .target(
            name: "VaporHTTP3",
            dependencies: [
                .product(name: "H3", package: "swift-quic-transport"),
                .product(name: "Vapor", package: "vapor"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "VaporHTTP3Tests",
            dependencies: [
                "VaporHTTP3",
                .product(name: "H3", package: "swift-quic-transport"),
                .product(name: "QuicTransport", package: "swift-quic-transport"),
                .product(name: "Vapor", package: "vapor"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
    ]
)
