// README.md's four samples, copied as they are written there, so that CI builds them (the
// copy check in `SeedExampleTests` reads README.md too). Built, not run: they name a key file,
// a host and files this machine need not have.

import Foundation
import FoundationNetworking  // URLRequest, on Linux
import Sluice
import SluiceFoundation  // imports Sluice too
import SluiceTransfer  // imports Sluice too

enum Readme {
    static func delegateOnALoop() throws {
        final class Printer: ByteStreamDelegate {
            func stream(_ stream: ByteStream, handle event: StreamEvent) {
                guard let input = stream as? ReadStream else { return }
                if event == .hasBytesAvailable {
                    var buffer = [UInt8](repeating: 0, count: 65536)
                    print("read", input.read(&buffer, maxLength: buffer.count), "bytes")
                } else if event == .endEncountered || event == .errorOccurred {
                    input.close()
                    input.remove(from: input.loop!)
                }
            }
        }

        let loop = try EventLoop()
        let printer = Printer()
        let input = ReadStream.file(atPath: "/etc/services")
        input.delegate = printer  // held weakly, as NSStream holds its delegate
        input.schedule(on: loop)
        input.open()
        loop.run()  // returns when nothing is left scheduled
    }

    static func pipelineAndAsync() async throws {
        let result = try await Pipeline(
            source: .file(atPath: "big.iso"), stages: [try Deflate(format: .gzip, level: 1)],
            sink: .file(atPath: "big.iso.gz")
        ).run()  // on a shared loop thread; cancellable
        print(result.bytesWritten, result.sourceBoundSeconds, result.sinkBoundSeconds)

        let writer = AsyncByteWriter(WriteStream.file(atPath: "copy.iso"))
        for try await chunk in ReadStream.file(atPath: "big.iso").chunks(ofAtMost: 1 << 20) {
            try await writer.write(chunk)  // suspends while the writer's queue is full
        }
        try await writer.finish()
    }

    static func foundationUpload() {
        var request = URLRequest(url: URL(string: "http://example.com/upload")!)
        request.httpMethod = "PUT"
        request.httpBodyStream = ReadStream.file(atPath: "big.iso").asInputStream()
        let (input, output) = Stream.boundStreams(bufferSize: 1 << 16)  // Linux's missing getBoundStreams
        _ = (request, input, output)
    }

    static func transfers() throws {
        let loop = try EventLoop()
        let key = PreSharedKey.derive(from: try KeyFile.load(path: "/etc/sluice.key"))  // `sluice keygen`

        // The receiving side: serves every sender that holds the key.
        let receiver = try TransferReceiver(directory: "/srv/in")
        try receiver.accept(from: try Socket.listen(port: 9000), on: loop, preSharedKey: key)

        // The sending side: TLS 1.3 with the same key, then the files.
        var settings = TLSSettings(role: .client)
        settings.preSharedKey = key
        let context = try TLSContext(settings)
        let (input, output) = TLS.secure(Socket.connect(host: "backup.local", port: 9000), context: context)
        let sender = try TransferSender(paths: ["photos"], options: TransferSendOptions(compress: true))
        sender.start(input: input, output: output, on: loop) { summary in
            print(summary.files, "files", summary.succeeded ? "stored" : "not all stored")
        }
        loop.run()
    }
}
