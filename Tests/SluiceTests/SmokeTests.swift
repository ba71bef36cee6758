import Foundation
import Testing

@testable import Sluice

@Test func fileCopyThroughLoop() throws {
    try withTemporaryDirectory { dir in
        let data = randomBytes(3_000_000)
        try Data(data).write(to: URL(fileURLWithPath: dir + "/src"))
        let loop = try EventLoop()
        let copier = LoopCopier(
            source: .file(atPath: dir + "/src"), sink: .file(atPath: dir + "/dst"), chunkSize: 4096)
        copier.run(on: loop)
        #expect(copier.failure == nil)
        #expect(try Data(contentsOf: URL(fileURLWithPath: dir + "/dst")) == Data(data))
    }
}
