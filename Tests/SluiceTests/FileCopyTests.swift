import Foundation
import TestThreads
import Testing

@testable import Sluice

/// Real files, copied through the loop and by polling.
@Suite(.ownThreads) struct FileCopyTests {
    static let size = 64 << 20

    @Test(arguments: [512, 4 << 20])
    func sixtyFourMebibyteFileThroughTheLoop(chunkSize: Int) throws {
        try withTemporaryDirectory { dir in
            let data = Data(randomBytes(Self.size, seed: UInt64(chunkSize)))
            try data.write(to: URL(fileURLWithPath: dir + "/src"))
            let loop = try EventLoop()
            let copier = LoopCopier(
                source: .file(atPath: dir + "/src"), sink: .file(atPath: dir + "/dst"), chunkSize: chunkSize)
            copier.run(on: loop)
            #expect(copier.failure == nil)
            let copied = try Data(contentsOf: URL(fileURLWithPath: dir + "/dst"))
            #expect(copied.count == data.count)
            #expect(copied == data)
        }
    }

    @Test func pollingModeCopy() throws {
        try withTemporaryDirectory { dir in
            let data = Data(randomBytes(Self.size, seed: 7))
            try data.write(to: URL(fileURLWithPath: dir + "/src"))
            let source = ReadStream.file(atPath: dir + "/src")
            let sink = WriteStream.file(atPath: dir + "/dst", mode: .createNew, permissions: 0o600)
            source.open()
            sink.open()
            var buffer = [UInt8](repeating: 0, count: 1 << 20)
            while source.hasBytesAvailable {
                let n = buffer.withUnsafeMutableBytes { source.read(into: $0) }
                #expect(n >= 0)
                if n <= 0 { break }
                #expect(sink.hasSpaceAvailable)
                #expect(sink.write(all: buffer[0..<n]))
            }
            #expect(source.streamStatus == .atEnd)
            source.close()
            sink.close()
            let copied = try Data(contentsOf: URL(fileURLWithPath: dir + "/dst"))
            #expect(copied == data)
            let mode = try FileManager.default.attributesOfItem(atPath: dir + "/dst")[.posixPermissions] as? Int
            #expect(mode == 0o600)
        }
    }

    @Test func readFromOffsetAndReportOffset() throws {
        try withTemporaryDirectory { dir in
            try Data("0123456789".utf8).write(to: URL(fileURLWithPath: dir + "/f"))
            let a = ReadStream.file(atPath: dir + "/f", offset: 4)
            a.open()
            #expect(try a.readToEnd() == Data("456789".utf8))
            #expect(a.property(forKey: .fileCurrentOffset) as? UInt64 == 10)

            let b = ReadStream.file(atPath: dir + "/f")
            #expect(b.setProperty(UInt64(8), forKey: .fileCurrentOffset))
            b.open()
            #expect(try b.readToEnd() == Data("89".utf8))
        }
    }

    @Test func writeModesAppendAndCreateNew() throws {
        try withTemporaryDirectory { dir in
            let path = dir + "/f"
            for (mode, text) in [(FileWriteMode.truncate, "abc"), (.append, "def")] {
                let w = WriteStream.file(atPath: path, mode: mode)
                w.open()
                #expect(w.write(all: Array(text.utf8)))
                w.close()
            }
            #expect((try? String(contentsOfFile: path, encoding: .utf8)) == "abcdef")
            let exclusive = WriteStream.file(atPath: path, mode: .createNew)
            exclusive.open()
            #expect(exclusive.streamStatus == .error)
            #expect(exclusive.streamError?.errno == .fileExists)
            #expect((try? String(contentsOfFile: path, encoding: .utf8)) == "abcdef")
        }
    }

    @Test func directoryAsSourceIsAnError() throws {
        try withTemporaryDirectory { dir in
            let r = ReadStream.file(atPath: dir)
            r.open()
            #expect(r.streamStatus == .error)
            #expect(r.streamError?.errno == .isDirectory)
        }
    }
}
