// The WritingToMemory example with async/await: no delegate and no loop to run. An
// AsyncByteWriter writes the message to a memory stream 1024 bytes at a time on sluice's shared
// loop; `finish()` returns once every byte is in and the stream is closed, and the bytes come
// back through the writer's `dataWrittenToMemory`.

import Foundation
import Sluice

@main
struct AsyncWritingToMemory {
    static func main() async throws {
        let message = Array(Array(repeating: Array("Streams on Linux, the Cocoa way. ".utf8), count: 200).joined())
        // The writer takes the stream (`sending`: the compiler checks nothing else touches it).
        let writer = AsyncByteWriter(WriteStream.toMemory())
        var byteIndex = 0
        while byteIndex < message.count {
            let end = min(byteIndex + 1024, message.count)
            try await writer.write(Array(message[byteIndex..<end]))
            byteIndex = end
        }
        try await writer.finish()
        guard let result = writer.dataWrittenToMemory else {
            print("No data written to memory!")
            exit(1)
        }
        print("wrote \(byteIndex) bytes in 1024-byte writes; dataWrittenToMemory holds \(result.count) bytes")
        print(result == Data(message) ? "contents match" : "contents DIFFER")
        exit(result == Data(message) ? 0 : 1)
    }
}
