// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "sluice",
    products: [
        .library(name: "Sluice", targets: ["Sluice"]),
        // The transfer layer (send/receive of files and trees: protocol, sessions, store), on
        // top of the stream library; the core never names one of its types.
        .library(name: "SluiceTransfer", targets: ["SluiceTransfer"]),
        // The bridges to Foundation's InputStream/OutputStream, in a module of their own so that
        // a program using Sluice alone loads FoundationEssentials, not Foundation and ICU.
        .library(name: "SluiceFoundation", targets: ["SluiceFoundation"]),
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
        .target(
            name: "Sluice", dependencies: ["CZlib", "CSluiceLinux", "CCrypto", "CSluiceEngines"],
            exclude: ["Foundation"]),
        .target(
            name: "SluiceTransfer", dependencies: ["Sluice", "CZlib", "CSluiceLinux", "CCrypto", "CSluiceEngines"]),
        .target(name: "SluiceFoundation", dependencies: ["Sluice"], path: "Sources/Sluice/Foundation"),
        // The command's release build carries the Swift runtime and FoundationEssentials in
        // itself (-static-stdlib; lld, which links them without the GNU linkers' glibc
        // warnings): a process starts in about half the time (no loader resolving a dozen
        // shared libraries), and `receive CODE` waits on that start. Debug builds, which the
        // tests link against, stay dynamic.
        .executableTarget(
            name: "SluiceCLI", dependencies: ["Sluice", "SluiceTransfer"],
            swiftSettings: [.unsafeFlags(["-static-stdlib"], .when(configuration: .release))],
            linkerSettings: [.unsafeFlags(["-static-stdlib", "-use-ld=lld"], .when(configuration: .release))]),
        .executableTarget(name: "WritingToMemory", dependencies: ["Sluice"], path: "Examples/WritingToMemory"),
        .executableTarget(name: "SocketClient", dependencies: ["Sluice"], path: "Examples/SocketClient"),
        .executableTarget(
            name: "AsyncWritingToMemory", dependencies: ["Sluice"], path: "Examples/AsyncWritingToMemory"),
        .executableTarget(name: "AsyncSocketClient", dependencies: ["Sluice"], path: "Examples/AsyncSocketClient"),
        .executableTarget(
            name: "URLSessionUpload", dependencies: ["SluiceFoundation"], path: "Examples/URLSessionUpload"),
        // The DocC catalogue's code samples, built (and run by the tests) so that none rots.
        .executableTarget(
            name: "DocSamples", dependencies: ["Sluice", "SluiceFoundation", "SluiceTransfer"],
            path: "Examples/DocSamples",
            swiftSettings: [.enableUpcomingFeature("MemberImportVisibility")]),
        .executableTarget(
            name: "sluice-async-bench", dependencies: ["SluiceFoundation"], path: "Benchmarks/AsyncBench"),
        // The tests' own threads for test bodies that block (see Tests/TestThreads).
        .target(name: "TestThreads", path: "Tests/TestThreads"),
        .testTarget(
            name: "SluiceTests",
            dependencies: [
                "Sluice", "SluiceTransfer", "SluiceFoundation", "WritingToMemory", "SocketClient",
                "AsyncWritingToMemory",
                "AsyncSocketClient", "URLSessionUpload", "DocSamples", "TestThreads",
            ]),
        .testTarget(name: "SluiceCLITests", dependencies: ["SluiceCLI", "TestThreads"]),
    ],
    swiftLanguageModes: [.v6]
)
