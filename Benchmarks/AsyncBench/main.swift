// One measurement per run, for Benchmarks/async.sh: the delegate API against the async and
// Foundation faces of the same streams. Prints the elapsed seconds (monotonic clock).
//
//   sluice-async-bench delegate-read FILE      read FILE in 1 MiB reads on hasBytesAvailable
//   sluice-async-bench chunks-read FILE        for try await chunk in stream.chunks(ofAtMost: 1 MiB)
//   sluice-async-bench delegate-write FILE MIB write MIB × 1 MiB on hasSpaceAvailable
//   sluice-async-bench async-write FILE MIB    the same through AsyncByteWriter
//   sluice-async-bench inputstream-read FILE   the InputStream bridge, 1 MiB buffers
//   sluice-async-bench filehandle-read FILE    FileHandle.readData(ofLength: 1 MiB)

import Foundation
import SluiceFoundation

let chunk = 1 << 20

/// Reads on each hasBytesAvailable until the end; the seeds' reader.
final class DelegateReader: ByteStreamDelegate {
    var buffer = [UInt8](repeating: 0, count: chunk)
    var total = 0
    func stream(_ stream: ByteStream, handle event: StreamEvent) {
        guard let input = stream as? ReadStream else { return }
        switch event {
        case .hasBytesAvailable:
            let n = buffer.withUnsafeMutableBytes { input.read(into: $0) }
            if n > 0 { total += n }
        case .endEncountered, .errorOccurred:
            input.close()
            input.remove(from: input.loop!)
        default: break
        }
    }
}

/// Writes `count` × 1 MiB on each hasSpaceAvailable; the seeds' writer.
final class DelegateWriter: ByteStreamDelegate {
    let block = [UInt8](repeating: 0x5A, count: chunk)
    var remaining: Int
    var offset = 0
    init(count: Int) { remaining = count * chunk }
    func stream(_ stream: ByteStream, handle event: StreamEvent) {
        guard let output = stream as? WriteStream, event == .hasSpaceAvailable else { return }
        let want = min(chunk - offset, remaining)
        let n = block.withUnsafeBytes {
            output.write(from: UnsafeRawBufferPointer(rebasing: $0[offset..<offset + want]))
        }
        if n > 0 {
            remaining -= n
            offset = (offset + n) % chunk
        }
        if remaining == 0 || n < 0 {
            output.close()
            output.remove(from: output.loop!)
        }
    }
}

func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("sluice-async-bench: \(message)\n".utf8))
    exit(1)
}

let args = CommandLine.arguments
guard args.count >= 3 else { fail("usage: MODE FILE [MIB]") }
let mode = args[1]
let path = args[2]
let mebibytes = args.count > 3 ? Int(args[3]) ?? 1024 : 1024
let start = ContinuousClock.now
var bytes = 0

switch mode {
case "delegate-read":
    let loop = try EventLoop()
    let reader = DelegateReader()
    let stream = ReadStream.file(atPath: path)
    stream.delegate = reader
    stream.schedule(on: loop)
    stream.open()
    loop.run()
    bytes = reader.total
case "chunks-read":
    for try await piece in ReadStream.file(atPath: path).chunks(ofAtMost: chunk) { bytes += piece.count }
case "delegate-write":
    let loop = try EventLoop()
    let writer = DelegateWriter(count: mebibytes)
    let stream = WriteStream.file(atPath: path)
    stream.delegate = writer
    stream.schedule(on: loop)
    stream.open()
    loop.run()
    bytes = mebibytes * chunk - writer.remaining
case "async-write":
    let writer = AsyncByteWriter(WriteStream.file(atPath: path))
    let block = [UInt8](repeating: 0x5A, count: chunk)
    for _ in 0..<mebibytes { try await writer.write(block) }
    try await writer.finish()
    bytes = mebibytes * chunk
case "inputstream-read":
    let input = ReadStream.file(atPath: path).asInputStream()
    input.open()
    var buffer = [UInt8](repeating: 0, count: chunk)
    while true {
        let n = input.read(&buffer, maxLength: chunk)
        if n < 0 { fail("\(input.streamError.map { "\($0)" } ?? "read failed")") }
        if n == 0 { break }
        bytes += n
    }
    input.close()
case "filehandle-read":
    guard let handle = FileHandle(forReadingAtPath: path) else { fail("\(path): cannot open") }
    while true {
        let data = handle.readData(ofLength: chunk)
        if data.isEmpty { break }
        bytes += data.count
    }
    handle.closeFile()
default:
    fail("unknown mode \(mode)")
}
let elapsed = start.duration(to: .now)
let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
print(String(format: "%.4f %d", seconds, bytes))
