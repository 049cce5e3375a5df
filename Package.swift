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
        // Starting child processes without Foundation's `Process` (see SpawnedProcess.swift): the tests' servers
        // and tools, and the CLI's `demo`.
        .target(name: "CProcessSpawning"),
        .target(name: "ProcessSpawning", dependencies: ["CProcessSpawning"]),
        .executableTarget(
            name: "ResumableCLI",
            dependencies: ["Resumable", "CResumable", "LoopbackServer", "ProcessSpawning"]
        ),
        .testTarget(name: "ResumableTests", dependencies: ["Resumable", "LoopbackServer", "ProcessSpawning"]),
        .testTarget(name: "LoopbackServerTests", dependencies: ["LoopbackServer", "ProcessSpawning"]),
        .testTarget(name: "ProcessSpawningTests", dependencies: ["ProcessSpawning"]),
        .testTarget(
            name: "ResumableCLITests",
            dependencies: ["ResumableCLI", "LoopbackServer", "Resumable", "ProcessSpawning", "CProcessSpawning"]),
    ],
    swiftLanguageModes: [.v6]
)
