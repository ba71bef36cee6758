// The code samples of the DocC catalogue (Sources/Sluice/Sluice.docc) and of the doc comments
// that show code, copied as they are written there, so that CI builds every one of them. Each
// file holds the samples of one page with that page's imports (the target checks imports file
// by file: MemberImportVisibility). Run, it runs those that need no network in a temporary
// directory and prints what they did; `DocSampleTests` runs it.

import Foundation

let directory = FileManager.default.temporaryDirectory.appendingPathComponent("sluice-doc-samples-\(getpid())")
try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
defer { try? FileManager.default.removeItem(at: directory) }
guard FileManager.default.changeCurrentDirectoryPath(directory.path) else { exit(1) }
// The inputs the samples name.
for name in ["in", "in.bin", "big.iso"] {
    try Data((0..<300_000).map { UInt8(truncatingIfNeeded: $0 &* 31) }).write(to: URL(fileURLWithPath: name))
}

try GettingStarted.delegateAndLoop()
try GettingStarted.pollingMode()
try await GettingStarted.asyncCopy()
try await GettingStarted.pipelineCopy()
try GettingStarted.sharedLoop()
FoundationOnLinux.uploadRequest()
FoundationOnLinux.boundStreamsOnTwoThreads()
AcrossThreads.makeTheStreamWhereItIsUsed()
try AcrossThreads.cancelAPipelineFromAnotherThread()
try AcrossThreads.twoHalvesTwoThreads()
try await DocComments.directFileWrite()
print("all samples ran")
