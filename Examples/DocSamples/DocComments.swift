// Samples in doc comments: `DirectFileWriteStream`'s.

import Sluice

#if canImport(Glibc)
    import Glibc
#endif

enum DocComments {
    static func directFileWrite() async throws {
        let fd = open("out.bin", O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        let sink = DirectFileWriteStream(fd: fd, closeWhenDone: true, path: "out.bin")
        let result = try await Pipeline(source: .file(atPath: "in.bin"), sink: sink).run()
        try sink.finishWriting()  // the tail's write error, if any (the pipeline closed the sink)
        print("direct: \(result.bytesWritten) bytes")
    }
}
