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
}
