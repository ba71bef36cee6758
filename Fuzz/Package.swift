// swift-tools-version:6.0
// The libFuzzer targets of sluice: a package of its own, so the sanitizer flags it is built
// with (`-sanitize=fuzzer,address`) never reach the root package's normal build and tests.
// Build and run with `Fuzz/run.sh`; see the README's development section. `SLUICE_ROOT` is
// where the root package is (run.sh points it at a link named `sluice`).
import PackageDescription

let sluice = Target.Dependency.product(name: "Sluice", package: "sluice")
let transfer = Target.Dependency.product(name: "SluiceTransfer", package: "sluice")

/// A libFuzzer target: one executable per parser.
func fuzzTarget(_ name: String) -> Target {
    .executableTarget(name: name, dependencies: ["FuzzDriver", "FuzzSupport", sluice, transfer])
}

let package = Package(
    name: "sluice-fuzz",
    dependencies: [.package(path: Context.environment["SLUICE_ROOT"] ?? "..")],
    targets: [
        .systemLibrary(name: "CLibFuzzer"),
        // libFuzzer's driver: only in the fuzz targets, which are linked with -sanitize=fuzzer.
        .target(name: "FuzzDriver", dependencies: ["CLibFuzzer"]),
        // What the targets and the seed generator share.
        .target(name: "FuzzSupport", dependencies: [sluice, transfer]),
        fuzzTarget("FuzzInflate"),
        fuzzTarget("FuzzFrames"),
        fuzzTarget("FuzzReceiver"),
        fuzzTarget("FuzzSender"),
        fuzzTarget("FuzzParsers"),
        fuzzTarget("FuzzTLSReceiver"),
        // Writes the seed corpora (make-seeds.sh); built without sanitizers.
        .executableTarget(name: "MakeSeeds", dependencies: ["FuzzSupport", sluice, transfer]),
    ],
    swiftLanguageModes: [.v6]
)
