// swift-tools-version:6.2
import PackageDescription

// A small Hummingbird 2 application served over HTTP/1.1 (TCP) and HTTP/3 (QUIC) at once.
// `swift run` from this folder starts it; `swift test` runs it for real over loopback.
let package = Package(
    name: "HummingbirdTodos",
    platforms: [.macOS(.v14)],
    dependencies: [
        .package(name: "HummingbirdHTTP3", path: "../../Integrations/HummingbirdHTTP3"),
        .package(name: "swift-quic-transport", path: "../.."),
        .package(name: "ExampleTesting", path: "../ExampleTesting"),
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", from: "2.28.1"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-crypto.git", from: "3.12.3"),
        .package(url: "https://github.com/swift-server/async-http-client.git", from: "1.37.0"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
    ],
    targets: [
        .target(
            name: "TodosApp",
            dependencies: [
                .product(name: "HummingbirdHTTP3", package: "HummingbirdHTTP3"),
                .product(name: "H3", package: "swift-quic-transport"),
                .product(name: "QuicTransport", package: "swift-quic-transport"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdTLS", package: "hummingbird"),
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            resources: [.copy("Public")]
        ),
        .executableTarget(
            name: "HummingbirdTodos",
            dependencies: [
                "TodosApp",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
        // The benchmark's baseline: the same 1 KiB answer from a bare HTTP3Server handler.
        .executableTarget(
            name: "todos-bare",
            dependencies: [
                "TodosApp",
                .product(name: "H3", package: "swift-quic-transport"),
                .product(name: "QuicTransport", package: "swift-quic-transport"),
                .product(name: "HummingbirdHTTP3", package: "HummingbirdHTTP3"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
            ]
        ),
        .testTarget(
            name: "TodosAppTests",
            dependencies: [
                "TodosApp",
                .product(name: "H3", package: "swift-quic-transport"),
                .product(name: "QuicTransport", package: "swift-quic-transport"),
                .product(name: "ExampleTesting", package: "ExampleTesting"),
                .product(name: "HummingbirdHTTP3", package: "HummingbirdHTTP3"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
    ]
)
