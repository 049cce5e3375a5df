// swift-tools-version: 6.0
import PackageDescription

let package = Package(
    name: "Resumable",
    platforms: [.macOS(.v15)],
    products: [
        .library(name: "Resumable", targets: ["Resumable"]),
        .executable(name: "resumable", targets: ["ResumableCLI"]),
    ],
    targets: [
        .target(name: "CResumable"),
        .target(name: "Resumable", dependencies: ["CResumable"]),
        .target(name: "LoopbackServer"),
        .executableTarget(
            name: "ResumableCLI",
            dependencies: ["Resumable", "CResumable", "LoopbackServer"]
        ),
        .testTarget(name: "ResumableTests", dependencies: ["Resumable", "LoopbackServer"]),
        .testTarget(name: "LoopbackServerTests", dependencies: ["LoopbackServer"]),
        .testTarget(name: "ResumableCLITests", dependencies: ["ResumableCLI", "LoopbackServer", "Resumable"]),
    ],
    swiftLanguageModes: [.v6]
)
