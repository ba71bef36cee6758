// GettingStarted.md, in order.

import Sluice

final class Printer: ByteStreamDelegate {
    func stream(_ stream: ByteStream, handle event: StreamEvent) {
        guard let input = stream as? ReadStream else { return }
        switch event {
        case .hasBytesAvailable:
            var buffer = [UInt8](repeating: 0, count: 65536)
            let n = input.read(&buffer, maxLength: buffer.count)
            if n > 0 { print("read \(n) bytes") }
        case .endEncountered, .errorOccurred:
            input.close()
            input.remove(from: input.loop!)
        default:
            break
        }
    }
}

enum GettingStarted {
    static func delegateAndLoop() throws {
        let loop = try EventLoop()
        let printer = Printer()
        let input = ReadStream.file(atPath: "/etc/passwd")
        input.delegate = printer  // held weakly, as NSStream holds its delegate
        input.schedule(on: loop)
        input.open()
        loop.run()
    }

    static func pollingMode() throws {
        let text = try ReadStream.file(atPath: "/etc/hostname").readToEnd()
        print("hostname: \(text.count) bytes")
    }

    static func asyncCopy() async throws {
        let writer = AsyncByteWriter(WriteStream.file(atPath: "copy"))
        for try await chunk in ReadStream.file(atPath: "/etc/passwd").chunks(ofAtMost: 1 << 20) {
            try await writer.write(chunk)
        }
        try await writer.finish()
    }

    static func pipelineCopy() async throws {
        let result = try await Pipeline(source: .file(atPath: "in"), sink: .file(atPath: "out")).run()
        if let error = result.error { print("copy failed: \(error)") }
        print("pipeline copied \(result.bytesWritten) bytes")
    }

    static func sharedLoop() throws {
        let loop = try EventLoop.shared
        loop.execute { print("on the shared loop's thread") }
    }
}
