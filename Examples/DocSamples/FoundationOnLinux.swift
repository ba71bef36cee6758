// FoundationOnLinux.md: the upload request and the bound streams on two threads, with the
// page's imports.

import Foundation
import SluiceFoundation

#if canImport(FoundationNetworking)
    import FoundationNetworking  // URLRequest and URLSession live here on Linux
#endif

enum FoundationOnLinux {
    static func uploadRequest() {
        var request = URLRequest(url: URL(string: "http://example.com/upload")!)
        request.httpMethod = "PUT"
        request.httpBodyStream = ReadStream.file(atPath: "big.iso").asInputStream()
        print("upload request: \(request.httpMethod ?? "") with a body stream: \(request.httpBodyStream != nil)")
    }

    static func boundStreamsOnTwoThreads() {
        nonisolated(unsafe) let (input, output) = Stream.boundStreams(bufferSize: 4096)
        let writer = Thread {
            output.open()
            let line = Array("hello from another thread\n".utf8)
            _ = output.write(line, maxLength: line.count)  // blocks while the buffer is full
            output.close()
        }
        writer.start()
        input.open()
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 64)
        while true {
            let n = input.read(&buffer, maxLength: buffer.count)  // 0 at the end, -1 on error
            if n <= 0 { break }
            received += buffer[..<n]
        }
        input.close()
        print("bound streams: \(String(decoding: received, as: UTF8.self))", terminator: "")
    }
}
