import Sluice

#if canImport(Glibc)
    import Glibc
#endif

/// A destination file, written so that its final name never holds a half-written file.
///
/// - A new or replaced file is written to a temporary file in the same directory
///   (`.NAME.sluice-XXXXXX`, created exclusively, mode 0666 less the umask) and renamed into
///   place by `commit()` only after the last byte; `discard()` removes it.
/// - Without `force`, an existing file is left untouched: the check is made before anything is
///   read, and again atomically at the end (`link(2)` fails if the name appeared meanwhile).
/// - `append` writes in place, at the end of the file (created if missing).
/// - An existing file that is not a regular file (`/dev/null`, a FIFO, a terminal) is written
///   in place: there is nothing to replace.
/// - A replaced file takes its name by exchange (`FileReplacement`): as fast as `cat >
///   existing`, and an interrupted copy leaves the old file or the new one at the name.
/// - With `flush` (`--fsync`), the data is on disk before the file takes its final name, and
///   the directory after: a crash then leaves the old file or the whole new one.
/// - With `direct` (`--direct`), a regular file is written by a `DirectFileWriteStream`: whole
///   blocks with `O_DIRECT`, past the page cache.
final class DestinationFile {
    /// How the destination is written.
    enum Plan: Hashable, Sendable {
        /// Through a temporary file renamed into place; `replacing` when a file is there.
        case viaTemporary(replacing: Bool)
        /// Appended to, in place (`O_APPEND`, created if missing).
        case append
        /// Written in place: a device, FIFO or other non-regular file.
        case inPlace
    }

    /// The name the file has when done (a symbolic link's target when `path` is a link).
    let path: String
    let plan: Plan
    /// The temporary file while it exists.
    private(set) var temporaryPath: String?
    /// The stream to write: over the temporary file, or the file itself.
    let stream: WriteStream
    /// Whether `commit()` flushes the file (and its directory) to disk.
    let flush: Bool
    /// `--append --direct` created the file: `discard()` removes it.
    private var createdByAppending = false

    /// Decides how `path` is written, without touching anything: throws 73 when the file exists
    /// without `force`/`append`, or is a directory.
    static func plan(path: String, force: Bool, append: Bool) throws(CLIError) -> (path: String, plan: Plan) {
        var info = stat()
        guard stat(path, &info) == 0 else {
            let error = Errno.current
            if error == .noSuchFile {
                var link = stat()
                if lstat(path, &link) == 0 {
                    // A dangling symbolic link: creating through it would surprise.
                    throw CLIError(.cannotCreate, "\(path): dangling symbolic link")
                }
                return (path, append ? .append : .viaTemporary(replacing: false))
            }
            throw CLIError(
                SluiceError(.system(error), operation: "create", path: path), during: .creatingDestination)
        }
        switch info.st_mode & S_IFMT {
        case S_IFDIR:
            let example = path.hasSuffix("/") ? path + "NAME" : path + "/NAME"
            throw CLIError(.cannotCreate, "\(path): is a directory (name the file to write in it: \(example))")
        case S_IFREG:
            var finalPath = path
            var link = stat()
            if lstat(path, &link) == 0, link.st_mode & S_IFMT == S_IFLNK, let resolved = realpath(path, nil) {
                finalPath = String(cString: resolved)
                free(resolved)
            }
            if append { return (finalPath, .append) }
            guard force else { throw CLIError(.cannotCreate, "\(path): file exists (use --force to replace it)") }
            return (finalPath, .viaTemporary(replacing: true))
        default:
            return (path, .inPlace)
        }
    }

    /// Plans and opens the destination: creates the temporary file, or opens the file in place.
    init(path requestedPath: String, force: Bool, append: Bool, flush: Bool = false, direct: Bool = false)
        throws(CLIError)
    {
        let (path, plan) = try Self.plan(path: requestedPath, force: force, append: append)
        self.path = path
        self.plan = plan
        self.flush = flush
        switch plan {
        case .viaTemporary:
            let (fd, temporary) = try Self.createTemporary(near: path, displayName: requestedPath)
            temporaryPath = temporary
            stream =
                direct
                ? DirectFileWriteStream(fd: fd, closeWhenDone: true, path: requestedPath)
                : .descriptor(fd, closeWhenDone: true, path: requestedPath)
        case .append where direct:
            // Exclusively first, to know whether a failed copy leaves a file of its own (removed
            // by `discard()`, as the buffered stream's pipeline removes the file it created).
            var fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0o666)
            createdByAppending = fd >= 0
            if fd < 0 && Errno.current == .fileExists { fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC) }
            guard fd >= 0 else {
                throw CLIError(
                    SluiceError(.system(.current), operation: "open", path: requestedPath),
                    during: .creatingDestination)
            }
            // Created or not, appending is in place; a regular file (not a FIFO) is written direct.
            stream =
                Self.isRegularFile(fd)
                ? DirectFileWriteStream(fd: fd, closeWhenDone: true, path: requestedPath)
                : .descriptor(fd, closeWhenDone: true, path: requestedPath)
        case .append:
            stream = .file(atPath: path, mode: .append, permissions: 0o666)
        case .inPlace:
            let fd = open(path, O_WRONLY | O_CLOEXEC | O_NOCTTY)
            guard fd >= 0 else {
                throw CLIError(
                    SluiceError(.system(.current), operation: "open", path: requestedPath),
                    during: .creatingDestination)
            }
            stream = .descriptor(fd, closeWhenDone: true, path: requestedPath)
        }
    }

    /// Whether `fd` is open on a regular file.
    static func isRegularFile(_ fd: Int32) -> Bool {
        var info = stat()
        return fstat(fd, &info) == 0 && info.st_mode & S_IFMT == S_IFREG
    }

    /// `dir/.NAME.sluice-XXXXXX`, created with `O_EXCL`.
    private static func createTemporary(near path: String, displayName: String) throws(CLIError) -> (Int32, String) {
        let slash = path.lastIndex(of: "/")
        let directory = slash.map { String(path[...$0]) } ?? ""
        let base = slash.map { String(path[path.index(after: $0)...]) } ?? path
        let letters = Array("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<100 {
            let suffix = String((0..<6).map { _ in letters.randomElement(using: &generator)! })
            let candidate = "\(directory).\(base).sluice-\(suffix)"
            let fd = open(candidate, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o666)
            if fd >= 0 { return (fd, candidate) }
            let error = Errno.current
            if error == .fileExists || error == .interrupted { continue }
            throw CLIError(
                SluiceError(.system(error), operation: "create", path: displayName), during: .creatingDestination)
        }
        throw CLIError(
            SluiceError(
                .system(.fileExists), operation: "create", path: displayName, detail: "no free temporary name"),
            during: .creatingDestination)
    }

    /// Gives the written file its final name (flushing it first with `flush`). Without
    /// `replacing`, fails with 73 if a file of that name appeared while copying (and removes
    /// the temporary file).
    func commit() throws(CLIError) {
        guard case .viaTemporary(let replacing) = plan, let temporary = temporaryPath else {
            if flush, plan == .append { try flushToDisk(path) }
            return
        }
        if flush { try flushToDisk(temporary) }
        if replacing {
            do {
                try FileReplacement.replace(temporary, with: path, display: path)
            } catch {
                discard()
                throw CLIError(error, during: .creatingDestination)
            }
        } else if link(temporary, path) == 0 {
            unlink(temporary)
        } else {
            let error = Errno.current
            if error == .fileExists {
                discard()
                throw CLIError(.cannotCreate, "\(path): file exists (use --force to replace it)")
            }
            // A file system without hard links: check, then rename (not atomic, but close).
            var info = stat()
            if lstat(path, &info) == 0 {
                discard()
                throw CLIError(.cannotCreate, "\(path): file exists (use --force to replace it)")
            }
            guard rename(temporary, path) == 0 else { throw failure("rename", .current) }
        }
        temporaryPath = nil
        if flush { try flushToDisk(directory(of: path)) }
    }

    /// Gives the pages of the file about to be replaced back to the kernel before the copy
    /// needs new ones (`FileReplacement.releaseCache`). Not when it is also the source.
    func releaseReplacedCache(unlessIdentity source: (dev_t, ino_t)?) {
        guard plan == .viaTemporary(replacing: true) else { return }
        var info = stat()
        if let source, stat(path, &info) == 0, info.st_dev == source.0, info.st_ino == source.1 { return }
        FileReplacement.releaseCache(ofReplaced: path)
    }

    private func flushToDisk(_ file: String) throws(CLIError) {
        do {
            try FileReplacement.flush(file, display: file == path || file == temporaryPath ? path : file)
        } catch {
            discard()
            throw CLIError(error, during: .creatingDestination)
        }
    }

    /// The directory holding `path` (`.` for a bare name).
    private func directory(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return "." }
        return slash == path.startIndex ? "/" : String(path[..<slash])
    }

    private func failure(_ operation: String, _ error: Errno) -> CLIError {
        discard()
        return CLIError(SluiceError(.system(error), operation: operation, path: path), during: .creatingDestination)
    }

    /// Removes the temporary file, if any (or the file `--append --direct` created). Idempotent.
    func discard() {
        if createdByAppending {
            unlink(path)
            createdByAppending = false
        }
        guard let temporary = temporaryPath else { return }
        unlink(temporary)
        temporaryPath = nil
    }
}
