// swift-tools-version:6.2
import PackageDescription

// A to-do API in Vapor, served over HTTP/1.1 and HTTP/3 at once: `swift run` from this folder.
let package = Package(
    name: "VaporTodos",
    platforms: [.macOS(.v13)],
    products: [
        .library(name: "VaporTodosApp", targets: ["VaporTodosApp"]),
        .executable(name: "VaporTodos", targets: ["VaporTodos"]),
    ],
    dependencies: [
        .package(name: "VaporHTTP3", path: "../../Integrations/VaporHTTP3"),
        .package(name: "swift-quic-transport", path: "../.."),
        .package(name: "ExampleTesting", path: "../ExampleTesting"),
        .package(url: "https://github.com/vapor/vapor.git", from: "4.122.3"),
        .package(url: "https://github.com/apple/swift-crypto.git", "3.0.0"..<"5.0.0"),
        .package(url: "https://github.com/swift-server/async-http-client.git", from: "1.37.0"),
    ],
    targets: [
        // The routes and `configure(_:)`, apart from the entry point so tests can serve them.
        .target(
            name: "VaporTodosApp",
            dependencies: [
                .product(name: "VaporHTTP3", package: "VaporHTTP3"),
                .product(name: "H3", package: "swift-quic-transport"),
                .product(name: "QuicTransport", package: "swift-quic-transport"),
                .product(name: "Vapor", package: "vapor"),
                .product(name: "Crypto", package: "swift-crypto"),
            ]
        ),
        .testTarget(
            name: "VaporTodosTests",
            dependencies: [
                "VaporTodosApp",
                .product(name: "ExampleTesting", package: "ExampleTesting"),
                .product(name: "VaporHTTP3", package: "VaporHTTP3"),
                .product(name: "H3", package: "swift-quic-transport"),
                .product(name: "QuicTransport", package: "swift-quic-transport"),
                .product(name: "Vapor", package: "vapor"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
            ]
        ),
        // The benchmark's baseline: the same 1 KiB answer from a bare HTTP3Server handler.
        .executableTarget(
            name: "vapor-todos-bare",
            dependencies: [
                "VaporTodosApp",
                .product(name: "H3", package: "swift-quic-transport"),
                .product(name: "QuicTransport", package: "swift-quic-transport"),
                .product(name: "Vapor", package: "vapor"),
            ]
        ),
        .executableTarget(
            name: "VaporTodos",
            dependencies: [
                "VaporTodosApp",
                .product(name: "Vapor", package: "vapor"),
            ]
        ),
    ]
)
