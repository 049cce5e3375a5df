// swift-tools-version: 6.0
import PackageDescription

// A throwaway-sized benchmark kept out of the main package: it depends on the library by path, so building it
// compiles only `Resumable`. Build in release mode: `swift build -c release --package-path Benchmarks/TransportThroughput`.
let package = Package(
    name: "TransportThroughput",
    platforms: [.macOS(.v15)],
    dependencies: [.package(name: "Resumable", path: "../..")],
    targets: [
        .executableTarget(
            name: "TransportThroughput",
            dependencies: [.product(name: "Resumable", package: "Resumable")]
        )
    ],
    swiftLanguageModes: [.v6]
)
