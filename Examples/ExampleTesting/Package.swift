// swift-tools-version:6.0
import PackageDescription

// What the example applications' tests share: the peers they run over loopback (h3get, and
// curl and aioquic from the repository's `.venv`), headless Chromium, and the comparison of an
// exchange over TCP with the same one over HTTP/3. A package of its own, as each example is one;
// it depends on no web framework.
let package = Package(
    name: "ExampleTesting",
    platforms: [.macOS(.v13)],
    products: [
        .library(name: "ExampleTesting", targets: ["ExampleTesting"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-crypto.git", "3.0.0"..<"5.0.0"),
    ],
    targets: [
        .target(
            name: "ExampleTesting",
            dependencies: [.product(name: "Crypto", package: "swift-crypto")],
            swiftSettings: [
                .enableUpcomingFeature("ExistentialAny"),
                .enableUpcomingFeature("MemberImportVisibility"),
            ]
        ),
    ]
)
