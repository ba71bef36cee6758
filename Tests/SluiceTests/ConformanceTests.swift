import Foundation
import TestThreads
import Testing

@testable import Sluice

/// The twelve cases of swift-corelibs-foundation's Tests/Foundation/TestStream.swift, ported to
/// sluice's API. Where the original checks nothing when `hasBytesAvailable` is false, the port
/// asserts it.
@Suite(.ownThreads) struct TestStreamConformance {
    let message = Data("Hello, playground".utf8)

    private func readAll(_ stream: ReadStream) -> Data {
        var result = Data()
        var buffer = [UInt8](repeating: 0, count: 5)
        #expect(stream.hasBytesAvailable)
        while stream.hasBytesAvailable {
            let n = stream.read(&buffer, maxLength: buffer.count)
            #expect(n >= 0)
            if n <= 0 { break }
            result.append(contentsOf: buffer[0..<n])
        }
        return result
    }

    @Test func inputStreamWithData() {
        let stream = ReadStream.memory(message)
        #expect(stream.streamStatus == .notOpen)
        stream.open()
        #expect(stream.streamStatus == .open)
        #expect(readAll(stream) == message)
        var byte: UInt8 = 0
        #expect(stream.read(&byte, maxLength: 1) == 0)
        #expect(stream.streamStatus == .atEnd)
        stream.close()
        #expect(stream.streamStatus == .closed)
    }

    @Test func inputStreamWithURL() throws {
        try withTemporaryDirectory { dir in
            let url = URL(fileURLWithPath: dir + "/in.txt")
            try message.write(to: url)
            let stream = try #require(ReadStream(url: url))
            stream.open()
            #expect(stream.streamStatus == .open)
            #expect(readAll(stream) == message)
            stream.close()
            #expect(stream.streamStatus == .closed)
        }
    }

    @Test func inputStreamWithFile() throws {
        try withTemporaryDirectory { dir in
            try message.write(to: URL(fileURLWithPath: dir + "/in.txt"))
            let stream = ReadStream.file(atPath: dir + "/in.txt")
            stream.open()
            #expect(readAll(stream) == message)
            #expect(stream.fileCurrentOffset == UInt64(message.count))
            stream.close()
        }
    }

    @Test func inputStreamHasBytesAvailable() {
        let stream = ReadStream.memory(message)
        #expect(!stream.hasBytesAvailable)  // not open yet
        stream.open()
        #expect(stream.hasBytesAvailable)
        var buffer = [UInt8](repeating: 0, count: message.count)
        #expect(stream.read(&buffer, maxLength: buffer.count) == message.count)
        #expect(stream.read(&buffer, maxLength: buffer.count) == 0)
        #expect(!stream.hasBytesAvailable)
        stream.close()
    }

    @Test func inputStreamInvalidPath() {
        let stream = ReadStream.file(atPath: "/tmp/sluice-no-such-dir-\(UUID().uuidString)/file.txt")
        #expect(stream.streamStatus == .notOpen)
        stream.open()
        #expect(stream.streamStatus == .error)
        #expect(stream.streamError?.errno == .noSuchFile)
        #expect(throws: SluiceError.self) { try stream.readToEnd() }
    }

    @Test func outputStreamCreationToFile() throws {
        try withTemporaryDirectory { dir in
            let path = dir + "/out.txt"
            let stream = WriteStream.file(atPath: path, mode: .truncate)
            stream.open()
            #expect(stream.hasSpaceAvailable)
            #expect(stream.write(all: message))
            #expect(stream.fileCurrentOffset == UInt64(message.count))
            stream.close()
            let written = try Data(contentsOf: URL(fileURLWithPath: path))
            #expect(written == message)
        }
    }

    /// A regular file takes a write larger than the page-cache piece (512 KiB) whole, as
    /// write(2) would: the pieces are the stream's business.
    @Test func aLargeWriteToAFileIsTakenWhole() throws {
        try withTemporaryDirectory { dir in
            let path = dir + "/big"
            let bytes = randomBytes(3 * PageCacheWrites.maxPiece + 17)
            let stream = WriteStream.file(atPath: path, mode: .truncate)
            stream.open()
            let n = bytes.withUnsafeBufferPointer { stream.write($0.baseAddress!, maxLength: $0.count) }
            #expect(n == bytes.count)
            stream.close()
            let written = try Data(contentsOf: URL(fileURLWithPath: path))
            #expect(Array(written) == bytes)
        }
    }

    @Test func outputStreamCreationToFileAppending() throws {
        try withTemporaryDirectory { dir in
            let path = dir + "/out.txt"
            try Data("old ".utf8).write(to: URL(fileURLWithPath: path))
            let stream = WriteStream.file(atPath: path, mode: .append)
            stream.open()
            #expect(stream.write(all: message))
            stream.close()
            let written = try Data(contentsOf: URL(fileURLWithPath: path))
            #expect(written == Data("old ".utf8) + message)
        }
    }

    @Test func outputStreamCreationToBuffer() {
        let stream = WriteStream.toBuffer(capacity: 128)
        stream.open()
        #expect(stream.hasSpaceAvailable)
        #expect(message.withUnsafeBytes { stream.write(from: $0) } == message.count)
        #expect(stream.dataWrittenToMemory == message)
        stream.close()
        #expect(stream.streamStatus == .closed)
    }

    @Test func outputStreamCreationWithURL() throws {
        try withTemporaryDirectory { dir in
            let url = URL(fileURLWithPath: dir + "/out.txt")
            let stream = try #require(WriteStream(url: url, append: true))
            stream.open()
            #expect(stream.write(all: message))
            stream.close()
            let written = try Data(contentsOf: url)
            #expect(written == message)
            #expect(WriteStream(url: URL(string: "https://example.invalid/x")!, append: false) == nil)
        }
    }

    @Test func outputStreamCreationToMemory() {
        let stream = WriteStream.toMemory()
        stream.open()
        #expect(stream.write(all: message))
        #expect(stream.dataWrittenToMemory == message)
        #expect(stream.fileCurrentOffset == UInt64(message.count))
        stream.close()
    }

    @Test func outputStreamHasSpaceAvailable() {
        let stream = WriteStream.toBuffer(capacity: message.count)
        stream.open()
        #expect(stream.hasSpaceAvailable)
        #expect(message.withUnsafeBytes { stream.write(from: $0) } == message.count)
        #expect(!stream.hasSpaceAvailable)
        #expect(message.withUnsafeBytes { stream.write(from: $0) } == 0)
        stream.close()
    }

    @Test func outputStreamWithInvalidPath() {
        let stream = WriteStream.file(atPath: "http:///home/sdsfsdfd", mode: .append)
        stream.open()
        #expect(stream.streamStatus == .error)
        #expect(stream.streamError?.errno == .noSuchFile)
        #expect(message.withUnsafeBytes { stream.write(from: $0) } == -1)
    }
}
