// swift-tools-version:6.2
import PackageDescription

// Hummingbird 2 over HTTP/3: its own package, so that users of QuicTransport and H3 do not
// download a web framework they do not use.
let package = Package(
    name: "HummingbirdHTTP3",
    platforms: [.macOS(.v14)],
    products: [
        .library(name: "HummingbirdHTTP3", targets: ["HummingbirdHTTP3"])
    ],
    dependencies: [
        .package(name: "swift-quic-transport", path: "../.."),
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", from: "2.28.1"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
    ],
    targets: [
        .target(
            name: "HummingbirdHTTP3",
            dependencies: [
                .product(name: "H3", package: "swift-quic-transport"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: [
                .enableUpcomingFeature("ExistentialAny"),
                .enableUpcomingFeature("MemberImportVisibility"),
            ]
        )
    ]
)
