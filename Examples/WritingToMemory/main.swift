// Listings 1–3 of Apple's "Writing To Output Streams", in Swift on Linux with Sluice:
// create a memory output stream, set the delegate, schedule it on the run loop, open it;
// on each hasSpaceAvailable write up to 1024 bytes from a byte index; when everything is
// written, take the bytes back through dataWrittenToMemory, close, and remove from the loop.

import Foundation
import Sluice

final class MemoryWriter: ByteStreamDelegate {
    let data: [UInt8]
    var byteIndex = 0
    var oStream: WriteStream?
    var result: Data?

    init(data: [UInt8]) { self.data = data }

    // Listing 1: create and initialize the stream.
    func createOutputStream(on loop: EventLoop) {
        print("Creating and opening the output stream...")
        let stream = WriteStream.toMemory()
        stream.delegate = self
        stream.schedule(on: loop)
        stream.open()
        oStream = stream
    }

    func stream(_ stream: ByteStream, handle event: StreamEvent) {
        switch event {
        // Listing 2: handle a space-available event.
        case .hasSpaceAvailable:
            let stream = stream as! WriteStream
            let len = min(1024, data.count - byteIndex)
            let written = data.withUnsafeBufferPointer { bytes in
                stream.write(bytes.baseAddress! + byteIndex, maxLength: len)
            }
            if written > 0 { byteIndex += written }
            if byteIndex == data.count { finish(stream) }
        case .errorOccurred:
            print("Error: \(stream.streamError.map { "\($0)" } ?? "unknown")")
            finish(stream)
        default:
            break
        }
    }

    // Listing 3: take the data written to memory, close, and remove the stream from the loop.
    private func finish(_ stream: ByteStream) {
        if let newData = (stream as? WriteStream)?.dataWrittenToMemory {
            result = newData
        } else {
            print("No data written to memory!")
        }
        stream.close()
        if let loop = stream.loop { stream.remove(from: loop) }
        oStream = nil
    }
}

let message = Array(repeating: Array("Streams on Linux, the Cocoa way. ".utf8), count: 200).joined()
let writer = MemoryWriter(data: Array(message))
let loop = try EventLoop()
writer.createOutputStream(on: loop)
loop.run()

guard let result = writer.result else { exit(1) }
print("wrote \(writer.byteIndex) bytes in 1024-byte writes; dataWrittenToMemory holds \(result.count) bytes")
print(result == Data(message) ? "contents match" : "contents DIFFER")
exit(result == Data(message) ? 0 : 1)
