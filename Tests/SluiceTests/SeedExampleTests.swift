import Foundation
import TestThreads
import Testing

@testable import Sluice

@Suite(.ownThreads) struct SeedExampleTests {
    /// Listings 1–3 of "Writing To Output Streams", built as `Examples/WritingToMemory`.
    @Test func writingToMemoryExampleRuns() throws {
        let binary = productsDirectory().appendingPathComponent("WritingToMemory").path
        let (status, out, _) = try runProcess(binary)
        let text = String(decoding: out, as: UTF8.self)
        #expect(status == 0)
        #expect(text.contains("wrote 6600 bytes in 1024-byte writes; dataWrittenToMemory holds 6600 bytes"))
        #expect(text.contains("contents match"))
    }

    /// The DocC catalogue's samples, built as `Examples/DocSamples`, run.
    @Test func docSamplesRun() throws {
        let binary = productsDirectory().appendingPathComponent("DocSamples").path
        let (status, out, err) = try runProcess(binary)
        let text = String(decoding: out, as: UTF8.self)
        #expect(status == 0, "\(String(decoding: err, as: UTF8.self))")
        #expect(text.contains("pipeline copied 300000 bytes"))
        #expect(text.contains("bound streams: hello from another thread"))
        #expect(text.contains("bound pair: 1048576 bytes"))
        #expect(text.contains("direct: 300000 bytes"))
        #expect(text.hasSuffix("all samples ran\n"))
    }

    /// Every code line of the pages' samples (and README.md's) is in `Examples/DocSamples`
    /// (comments and spacing aside), so the copies the build checks are the samples the pages
    /// show.
    @Test(arguments: [
        ("Sources/Sluice/Sluice.docc/GettingStarted.md", nil), ("Sources/Sluice/Sluice.docc/FoundationOnLinux.md", nil),
        ("Sources/Sluice/Sluice.docc/SwiftConcurrency.md", "## Across threads"), ("README.md", nil),
    ])
    func docSamplesAreCopiedAsWritten(page: String, from heading: String?) throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        var markdown = try String(contentsOf: root.appendingPathComponent(page), encoding: .utf8)
        if let heading, let start = markdown.range(of: heading) { markdown = String(markdown[start.lowerBound...]) }
        let samples = try FileManager.default.contentsOfDirectory(
            atPath: root.appendingPathComponent("Examples/DocSamples").path
        )
        .map { try String(contentsOf: root.appendingPathComponent("Examples/DocSamples/\($0)"), encoding: .utf8) }
        .joined(separator: "\n")
        let copied = Set(samples.split(separator: "\n").map(Self.code))
        let blocks = markdown.components(separatedBy: "```swift\n").dropFirst().map {
            $0.components(separatedBy: "```")[0]
        }
        #expect(!blocks.isEmpty)
        for block in blocks where !block.contains(".package(") {  // manifests: checked by hand
            for line in block.split(separator: "\n") where !Self.code(line).isEmpty {
                let found = copied.contains(Self.code(line))
                #expect(found, "\(page): not in Examples/DocSamples: \(line)")
            }
        }
    }

    /// A line's code: no comment, spaces collapsed.
    private static func code(_ line: Substring) -> String {
        let code = line.range(of: "//").map { line[..<$0.lowerBound] } ?? line
        return code.split(separator: " ").joined(separator: " ")
    }
}
