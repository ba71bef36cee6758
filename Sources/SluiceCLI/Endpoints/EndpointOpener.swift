import Sluice

#if canImport(Glibc)
    import Glibc
#endif

/// An endpoint opened for a copy: the stream to use, and for a destination file the handle
/// that renames it into place on success or removes it on failure.
enum OpenedEndpoint {
    case source(ReadStream)
    case destination(WriteStream, DestinationFile?)
}

/// How endpoints are opened: the options that matter to opening.
struct OpenOptions: Sendable {
    var force = false
    var append = false
    /// For connecting and accepting (`--timeout`).
    var timeoutSeconds: Double?
}

extension Endpoint {
    /// Checks, before anything is read, what can be checked of a destination without creating
    /// it: an existing file without `--force` fails here with 73.
    func preflight(as role: EndpointRole, options: OpenOptions) throws(CLIError) {
        guard role == .destination, case .file(let path) = self else { return }
        _ = try DestinationFile.plan(path: path, force: options.force, append: options.append)
    }

    /// Opens the endpoint as `role` on `loop` and calls `completion` on the loop's thread with
    /// its stream, or the error to exit with. Files and stdio complete before this returns;
    /// socket endpoints complete once connected (or, listening, once one connection has been
    /// accepted). The stream is opened (or opening) but not scheduled: the pipeline does that.
    ///
    /// This is the one place where endpoints become streams.
    func open(
        as role: EndpointRole,
        options: OpenOptions,
        on loop: EventLoop,
        completion: @escaping (Result<OpenedEndpoint, CLIError>) -> Void
    ) {
        switch (self, role) {
        case (.file(let path), .source):
            let stream = ReadStream.file(atPath: path)
            stream.open()
            if stream.streamStatus == .error, let error = stream.streamError {
                completion(.failure(CLIError(error, during: .openingSource)))
            } else {
                completion(.success(.source(stream)))
            }
        case (.file(let path), .destination):
            do {
                let file = try DestinationFile(path: path, force: options.force, append: options.append)
                file.stream.open()
                if file.stream.streamStatus == .error, let error = file.stream.streamError {
                    file.discard()
                    completion(.failure(CLIError(error, during: .creatingDestination)))
                } else {
                    completion(.success(.destination(file.stream, file)))
                }
            } catch {
                completion(.failure(error))
            }
        case (.standardIO, .source):
            completion(.success(.source(.standardInput)))
        case (.standardIO, .destination):
            completion(.success(.destination(.standardOutput, nil)))
        case (.tcpConnect, _), (.tcpListen, _), (.unixConnect, _), (.unixListen, _):
            // WIRE: sockets. Replace this case with one per kind, each ending in completion(...)
            // on the loop; close the half of the pair that is not used (closing the write side
            // shuts it down, so the peer sees the end):
            //   .tcpConnect(host, port):  let (input, output) = Socket.connect(host: host, port: port,
            //                                 timeout: options.timeoutSeconds.map { .milliseconds(Int64($0 * 1000)) })
            //       source: output.close(); completion(.success(.source(input)))
            //       destination: input.close(); completion(.success(.destination(output, nil)))
            //       (a refused connect or unknown host surfaces as the pipeline's errorOccurred;
            //        CLIError(_:during:) maps it to 69 — pass .openingSource for it, see CopySession)
            //   .unixConnect(path): the same with Socket.connect(unixPath: path, timeout: ...)
            //   .tcpListen(host, port): let listener = try Socket.listen(host: host, port: port)
            //       try listener.accept(on: loop) { input, output, _ in listener.close(); ...completion }
            //       (errors: CLIError(error, during: .openingSource / .creatingDestination))
            //   .unixListen(path): the same with Socket.listen(unixPath: path)
            completion(
                .failure(CLIError(.unavailable, "\(self): socket endpoints are not built into this version yet")))
        }
    }
}

extension ReadStream {
    /// The size of what the stream reads when it is a regular file (or stdin redirected from
    /// one): for the progress bar and ETA.
    var regularFileSize: UInt64? {
        guard let fd = property(forKey: .fileDescriptor) as? Int32 else { return nil }
        var info = stat()
        guard fstat(fd, &info) == 0, info.st_mode & S_IFMT == S_IFREG else { return nil }
        let offset = lseek(fd, 0, SEEK_CUR)
        let remaining = Int64(info.st_size) - max(0, Int64(offset))
        return UInt64(max(0, remaining))
    }
}

extension ByteStream {
    /// A regular file's device and inode, to tell when a source is also the destination.
    var fileIdentity: (dev_t, ino_t)? {
        guard let fd = property(forKey: .fileDescriptor) as? Int32 else { return nil }
        var info = stat()
        guard fstat(fd, &info) == 0, info.st_mode & S_IFMT == S_IFREG else { return nil }
        return (info.st_dev, info.st_ino)
    }
}
