// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "sluice",
    products: [
        .library(name: "Sluice", targets: ["Sluice"]),
        .executable(name: "sluice", targets: ["SluiceCLI"]),
    ],
    targets: [
        .systemLibrary(
            name: "CZlib",
            path: "Sources/CZlib",
            providers: [.apt(["zlib1g-dev"])]
        ),
        .systemLibrary(name: "CSluiceLinux", path: "Sources/CSluiceLinux"),
        .systemLibrary(
            name: "CCrypto",
            path: "Sources/CCrypto",
            providers: [.apt(["libssl-dev"])]
        ),
        // The optional engines (zstd, ISA-L, libdeflate): compiled in where their headers are
        // found, the libraries loaded with dlopen at run time, so one plain `swift build` serves
        // machines with and without them. zlib is linked for libdeflate's block walk.
        .target(
            name: "CSluiceEngines", path: "Sources/CSluiceEngines",
            linkerSettings: [.linkedLibrary("dl"), .linkedLibrary("z")]),
        .target(name: "Sluice", dependencies: ["CZlib", "CSluiceLinux", "CCrypto", "CSluiceEngines"]),
        .executableTarget(name: "SluiceCLI", dependencies: ["Sluice"]),
        .executableTarget(name: "WritingToMemory", dependencies: ["Sluice"], path: "Examples/WritingToMemory"),
        .executableTarget(name: "SocketClient", dependencies: ["Sluice"], path: "Examples/SocketClient"),
        .executableTarget(
            name: "AsyncWritingToMemory", dependencies: ["Sluice"], path: "Examples/AsyncWritingToMemory"),
        .executableTarget(name: "AsyncSocketClient", dependencies: ["Sluice"], path: "Examples/AsyncSocketClient"),
        .executableTarget(name: "URLSessionUpload", dependencies: ["Sluice"], path: "Examples/URLSessionUpload"),
        .executableTarget(name: "sluice-async-bench", dependencies: ["Sluice"], path: "Benchmarks/AsyncBench"),
        // The tests' own threads for test bodies that block (see Tests/TestThreads).
        .target(name: "TestThreads", path: "Tests/TestThreads"),
        .testTarget(
            name: "SluiceTests",
            dependencies: [
                "Sluice", "WritingToMemory", "SocketClient", "AsyncWritingToMemory", "AsyncSocketClient",
                "URLSessionUpload", "TestThreads",
            ]),
        .testTarget(name: "SluiceCLITests", dependencies: ["SluiceCLI", "TestThreads"]),
    ],
    swiftLanguageModes: [.v6]
)
