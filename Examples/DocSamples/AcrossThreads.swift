// SwiftConcurrency.md, "Across threads" (the pipeline's cancel is also `Pipeline.cancel()`'s
// doc comment, and the bound pair's halves `boundPair(bufferSize:)`'s).

import Foundation
import Sluice

enum AcrossThreads {
    static func makeTheStreamWhereItIsUsed() {
        let done = DispatchSemaphore(value: 0)  // not in the page: the run waits for the thread
        let path = "/etc/passwd"
        let reader = Thread {
            // Made, read and dropped on this thread: only the path crossed.
            let bytes = (try? ReadStream.file(atPath: path).readToEnd())?.count ?? 0
            print("\(bytes) bytes")
            done.signal()
        }
        reader.start()
        done.wait()
    }

    static func cancelAPipelineFromAnotherThread() throws {
        let loop = try EventLoop()
        let pipeline = Pipeline(source: .file(atPath: "in"), sink: .file(atPath: "out"))
        pipeline.start(on: loop) { result in print(result.error.map { "\($0)" } ?? "copied") }

        nonisolated(unsafe) let running = pipeline  // used on the loop's thread only, below
        let cancel: @Sendable () -> Void = { loop.execute { running.cancel() } }

        Thread { cancel() }.start()  // any thread: a watchdog, a signal handler, a UI
        loop.run()
    }

    static func twoHalvesTwoThreads() throws {
        nonisolated(unsafe) let (reader, writer) = boundPair(bufferSize: 64 * 1024)
        let producer = Thread {
            writer.open()  // polling mode: a write blocks while the buffer is full
            let block = [UInt8](repeating: 7, count: 4096)
            for _ in 0..<256 {
                guard writer.write(all: block) else { break }  // false: the reader has closed
            }
            writer.close()
        }
        producer.start()
        reader.open()
        let received = try reader.readToEnd()  // 1 MiB, never more than 64 KiB in the buffer
        print("bound pair: \(received.count) bytes")
    }
}
