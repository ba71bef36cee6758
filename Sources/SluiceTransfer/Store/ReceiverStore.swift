import CSluiceLinux
import Dispatch
import Sluice
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// A temporary file opened for an incoming file: descriptors and names, all relative to its
/// parent directory's descriptor.
struct OpenedFile: Sendable {
    var parent: Int32
    var name: String
    var temporary: String
    var fd: Int32
    /// Bytes held from an interrupted transfer of the same file.
    var offset: UInt64
    var resumable: Bool
    /// The final path, for messages.
    var display: String
    /// Why a partial found at the temporary name was replaced rather than resumed, to log.
    var startedOver: String? = nil
    /// Created by this transfer: it never carried the resume mark unless `resumable`.
    var fresh = false
    /// The bytes held were all written under the sender's token (`resume-token`).
    var vouched = false
    /// Created without a name (`O_TMPFILE`, `temporary` empty): nothing to remove if it is
    /// abandoned, and named by `linkat` once complete (`Destination.name`).
    var unnamed = false
    /// `parent` is this directory's, shared with other files (`ParentDirectories`): not closed
    /// with the file, but when the last of them lets it go.
    var sharedParent: SharedDirectory? = nil

    /// Closes `parent`, unless it is shared (`sharedParent`).
    func closeParent() {
        if sharedParent == nil { closeDescriptor(parent) }
    }

    /// The same file, its held bytes counted only up to `offset` (at most `self.offset`).
    func continued(at offset: UInt64) -> OpenedFile {
        var copy = self
        copy.offset = min(offset, self.offset)
        return copy
    }
}

/// The receiving side's file-system work, run on a worker pool so that a slow disk holds up
/// only the session waiting for it: creating directories, opening temporary files (with the
/// resume check), settling and renaming finished files, removing abandoned ones. Each call
/// runs on a worker and completes on the session's loop.
final class ReceiverStore: @unchecked Sendable {
    let destination: Destination
    let pool: WorkerPool
    /// Called on the worker before a file is flushed, with its relative path: lets a test
    /// play a slow disk.
    var beforeFsync: (@Sendable (String) -> Void)?
    /// Called on the worker once a file is opened, with its relative path and descriptor: lets
    /// a test put a failing device under the descriptor.
    var afterOpen: (@Sendable (String, Int32) -> Void)?

    /// Worker threads for disk work: enough that one stalled flush leaves others to go on.
    static let diskThreads = 4
    /// Disk work that is still to be handed to `pool`: abandoning a file once the writes a
    /// session's worker had queued for it are done. `finishDiskWork` waits for it first.
    let handingOn = DispatchGroup()

    /// Whether small files are created unnamed and named once complete (`storeUnnamed`):
    /// cleared for good at the first sign that the kernel, the file system or `/proc` cannot.
    private let unnamedFiles: Atomic<Bool>

    init(destination: Destination, pool: WorkerPool = WorkerPool(threads: ReceiverStore.diskThreads)) {
        self.destination = destination
        self.pool = pool
        unnamedFiles = Atomic(sluice_o_tmpfile() != 0 && access("/proc/self/fd", X_OK) == 0)
    }

    /// Creates a DIR entry's directory; returns the rejection, or the relative paths created.
    func makeDirectory(_ request: EntryRequest) -> Result<[String], EntryRejection> {
        destination.makeDirectory(request.components, relative: request.relative, attributes: request.attributes)
    }

    /// Opens (creating it) the temporary file for `request`, after checking what is at its
    /// final name. The offset is what a resumable partial holds, when `continueHeld` (else a
    /// partial starts over, and is kept for a resume all the same).
    func openFile(_ request: EntryRequest, overwrite: Bool, resume: Bool, continueHeld: Bool = true)
        -> Result<OpenedFile, EntryRejection>
    {
        openParent(for: request, overwrite: overwrite).flatMap { parent, name in
            openTemporaryFile(request, in: parent, named: name, resume: resume, continueHeld: continueHeld)
        }
    }

    /// `openFile` once the final name's directory `parent` is open (the result's to close).
    private func openTemporaryFile(
        _ request: EntryRequest, in parent: Int32, named name: String, resume: Bool, continueHeld: Bool
    ) -> Result<OpenedFile, EntryRejection> {
        let temporary = Destination.temporaryName(for: name)
        let opened = Destination.openTemporary(
            parent, temporary, header: request.header, resume: resume, continueHeld: continueHeld,
            token: request.attributes.resumeToken, display: destination.display(temporary))
        switch opened {
        case .failure(let rejection):
            closeDescriptor(parent)
            return .failure(rejection)
        case .success(let (fd, offset, resumable, vouched, startedOver, fresh)):
            let file = OpenedFile(
                parent: parent, name: name, temporary: temporary, fd: fd, offset: offset, resumable: resumable,
                display: destination.display(request.relative), startedOver: startedOver, fresh: fresh,
                vouched: vouched)
            // A sparse file is not reserved: its holes are to stay unallocated. Nor is a delta
            // against a sparse file: it keeps the old file's holes (`WriteTarget.keepsHoles`).
            if request.header.sizeKnown, !request.header.sparse,
                !(request.header.delta && Self.isSparse(name, in: parent)),
                request.header.size - min(offset, request.header.size) >= Self.reserveMinimum,
                let rejection = Self.reserve(fd, from: offset, to: request.header.size, display: file.display)
            {
                abandon(file, keep: offset > 0)
                return .failure(rejection)
            }
            afterOpen?(request.relative, fd)
            return .success(file)
        }
    }

    /// Whether `name` in `parent` is a regular file with fewer blocks than its size needs.
    static func isSparse(_ name: String, in parent: Int32) -> Bool {
        var st = stat()
        guard fstatat(parent, name, &st, AT_SYMLINK_NOFOLLOW) == 0, st.st_mode & S_IFMT == S_IFREG else { return false }
        return Int64(st.st_blocks) * 512 < Int64(st.st_size)
    }

    /// Files with fewer bytes than this to come are not reserved: the two calls cost more than
    /// they save (a small file is allocated in one go anyway), and a full disk shows at the
    /// write, which for a small file comes at once.
    static let reserveMinimum: UInt64 = 256 << 10

    /// Reserves the blocks of the bytes still to come, `offset` to `size` (`fallocate` with
    /// `FALLOC_FL_KEEP_SIZE`: the file's size, and with it what a resume finds, stays what was
    /// written). A disk without room refuses the file now, before its data is sent, rather than
    /// after; and the file system allocates the file at once instead of page by page as it is
    /// written (ext4's delayed allocation took a fifth of the receiver's write time). Where the
    /// file system cannot reserve, the file is written as before.
    static func reserve(_ fd: Int32, from offset: UInt64, to size: UInt64, display: String) -> EntryRejection? {
        guard size > offset else { return nil }
        // More than the disk has free is refused before `fallocate` is asked: ext4 allocates
        // what it can before it fails, so a peer announcing 15 TiB would fill the disk, and
        // every other writer on it would meet ENOSPC, until the file was removed.
        var disk = statvfs()
        if fstatvfs(fd, &disk) == 0 {
            let free = UInt64(disk.f_bavail).multipliedReportingOverflow(by: UInt64(disk.f_frsize))
            if !free.overflow && size - offset > free.partialValue {
                return .failed(
                    .io, SluiceError(.system(.noSpace), operation: "fallocate", subject: display).description)
            }
        }
        let (start, length) = (off_t(clamping: offset), off_t(clamping: size - offset))
        let reserved = Result { () throws(SluiceError) in
            try syscallValue("fallocate", display) { fallocate(fd, FALLOC_FL_KEEP_SIZE, start, length) }
        }
        guard case .failure(let error) = reserved, let errno = reserved.failureErrno else { return nil }
        guard [ENOSPC, EDQUOT, EFBIG].contains(errno.rawValue) else { return nil }
        return .failed(.io, error.description)
    }

    /// Opens the directory that will hold `request`'s file (creating missing ones) and checks
    /// what is at its final name: nothing, or a file that `overwrite` allows replacing.
    /// Returns the directory's descriptor (to close) and the file's name in it.
    func openParent(for request: EntryRequest, overwrite: Bool) -> Result<(Int32, String), EntryRejection> {
        let parent: Int32
        switch destination.openParent(of: request.components, relative: request.relative) {
        case .failure(let rejection): return .failure(rejection)
        case .success(let (fd, _)): parent = fd
        }
        guard let name = request.components.last else {
            closeDescriptor(parent)
            return .failure(.refused(.invalidPath, "invalid path: empty path"))
        }
        if let kind = Destination.existing(parent, name) {
            if kind == S_IFDIR || !overwrite {
                closeDescriptor(parent)
                return .failure(.refused(.exists, kind == S_IFDIR ? "exists (a directory)" : "exists"))
            }
            // Its pages would otherwise stay cached until the new file replaces it; but a
            // delta's basis is about to be read. Only a regular file is opened for it
            // (`EntryHandle.openRegular`): a device opened would be its driver's to act on, a
            // FIFO's open could wait.
            if kind == S_IFREG, !request.header.delta,
                case .success(let (fd, _)) = EntryHandle.openRegular(
                    parent, name, flags: O_RDONLY, display: destination.display(request.relative))
            {
                FileReplacement.releaseCache(ofReplaced: fd)
                closeDescriptor(fd)
            }
        }
        return .success((parent, name))
    }

    /// Gives the finished file its mode (`Destination.permissions`) and mtime, flushes it when `fsync`, and moves it to its
    /// final name (never over an existing file unless `overwrite`). Closes its descriptors.
    func commit(
        _ file: OpenedFile, header: EntryHeader, relative: String, overwrite: Bool, fsync: Bool,
        attributes: EntryAttributes = EntryAttributes()
    ) -> EntryRejection? {
        defer {
            closeDescriptor(file.fd)
            file.closeParent()
        }
        let settled = settle(file, header: header, attributes: attributes) { () throws(SluiceError) in
            if fsync {
                beforeFsync?(relative)
                try syscallValue("fsync", file.display) { Glibc.fsync(file.fd) }
            }
        }
        if let settled {
            unlinkat(file.parent, file.temporary, 0)
            return .failed(.io, settled.description)
        }
        return rename(file, overwrite: overwrite, fsync: fsync)
    }

    /// Gives the file its size (a sparse file may end in a hole), owner and extended attributes,
    /// mode and mtime (and drops its resume mark), then runs `then`.
    /// `modeSet`: the file was created with its final mode (checked), which needs no `fchmod`.
    private func settle(
        _ file: OpenedFile, header: EntryHeader, attributes: EntryAttributes, modeSet: Bool = false,
        then: () throws(SluiceError) -> Void = { () throws(SluiceError) in }
    ) -> SluiceError? {
        let fd = file.fd
        let mtime = timespec(tv_sec: Int(header.mtimeSeconds), tv_nsec: Int(header.mtimeNanoseconds))
        let times = [timespec(tv_sec: 0, tv_nsec: utimeNow), mtime]
        if file.resumable || !file.fresh {
            fremovexattr(fd, Destination.resumeAttribute)
            fremovexattr(fd, Destination.tokenAttribute)
        }
        let settled = Result { () throws(SluiceError) in
            // A delta's rebuilt file may end in zeros left a hole (`WriteTarget.keepsHoles`).
            if header.sparse || header.delta {
                try syscallValue("ftruncate", file.display) { ftruncate(fd, off_t(clamping: header.size)) }
            }
            if !attributes.isEmpty { try Self.applyAttributes(attributes, to: fd, display: file.display) }
            if !modeSet || !attributes.isEmpty {
                try syscallValue("fchmod", file.display) { fchmod(fd, destination.permissions(header.mode)) }
            }
            try syscallValue("futimens", file.display) { futimens(fd, times) }
            try then()
        }
        if case .failure(let error) = settled { return error }
        return nil
    }

    /// A verified file set aside, its mode and mtime set, to be flushed and renamed with others.
    struct StagedFile: Sendable {
        var opened: OpenedFile
        var request: EntryRequest
    }

    /// Sets the verified file's mode and mtime and starts its writeback (`sync_file_range`),
    /// leaving it open (and locked) under its temporary name for `commitStaged`. On failure
    /// the file is removed and its descriptors closed.
    func stage(_ file: OpenedFile, header: EntryHeader, attributes: EntryAttributes = EntryAttributes())
        -> EntryRejection?
    {
        let settled = settle(file, header: header, attributes: attributes) { () throws(SluiceError) in
            _ = sync_file_range(file.fd, 0, 0, UInt32(SYNC_FILE_RANGE_WRITE))
        }
        guard let settled else { return nil }
        if !file.unnamed { unlinkat(file.parent, file.temporary, 0) }
        closeDescriptor(file.fd)
        file.closeParent()
        return .failed(.io, settled.description)
    }

    /// What became of a small file written whole (`storeWhole`).
    enum WholeOutcome: Sendable {
        /// Stored under its final name (without fsync).
        case stored
        /// Written and set aside for a batch (with fsync).
        case staged(StagedFile)
        case rejected(EntryRejection)
    }

    /// `storeWhole` for several small files in a row (a BATCH's), in order, by one job: the
    /// directory of the last one is kept open for the next (`ParentDirectories`).
    func storeWholes(
        _ files: [(request: EntryRequest, bytes: UnsafeRawBufferPointer)], overwrite: Bool, fsync: Bool
    ) -> [WholeOutcome] {
        let parents = ParentDirectories(destination)
        defer { parents.close() }
        return files.map { file in
            storeWhole(
                file.request, bytes: file.bytes, overwrite: overwrite || file.request.header.replaces, fsync: fsync,
                parents: parents)
        }
    }

    /// Creates, writes and settles a small file received whole in memory, in one go on a
    /// worker: stored under its final name, or with `fsync` set aside as `stage` does.
    func storeWhole(_ request: EntryRequest, bytes: ArraySlice<UInt8>, overwrite: Bool, fsync: Bool) -> WholeOutcome {
        bytes.withUnsafeBytes { storeWhole(request, bytes: $0, overwrite: overwrite, fsync: fsync) }
    }

    /// `storeWhole` of bytes where they lie (a BATCH's, in the buffer they arrived in).
    func storeWhole(
        _ request: EntryRequest, bytes: UnsafeRawBufferPointer, overwrite: Bool, fsync: Bool,
        parents: ParentDirectories? = nil
    ) -> WholeOutcome {
        if !overwrite, unnamedFiles.load(ordering: .relaxed),
            let outcome = storeUnnamed(request, bytes: bytes, fsync: fsync, parents: parents)
        {
            return outcome
        }
        let file: OpenedFile
        switch openFile(request, overwrite: overwrite, resume: false) {
        case .failure(let rejection): return .rejected(rejection)
        case .success(let opened): file = opened
        }
        if let reason = Self.writeAll(bytes, to: file.fd) {
            abandon(file, keep: false)
            return .rejected(.failed(.io, "write \(quoted(file.display)): \(reason)"))
        }
        if fsync {
            if let rejection = stage(file, header: request.header, attributes: request.attributes) {
                return .rejected(rejection)
            }
            return .staged(StagedFile(opened: file, request: request))
        }
        if let rejection = commit(
            file, header: request.header, relative: request.relative, overwrite: overwrite, fsync: false,
            attributes: request.attributes)
        {
            return .rejected(rejection)
        }
        return .stored
    }

    /// `storeWhole` for a file that may not replace one: created without a name (`O_TMPFILE`),
    /// written and settled, then given its name by `linkat`, which refuses a name that exists.
    /// No temporary name is created, locked and renamed away, and the final name is not looked
    /// up first: a third fewer calls, and one change to the directory instead of three (about
    /// 6 of 34 µs of system time per file; Benchmarks/RESULTS.md). Nil, with nothing left
    /// behind, where the file system cannot (the caller then takes the named way).
    private func storeUnnamed(
        _ request: EntryRequest, bytes: UnsafeRawBufferPointer, fsync: Bool, parents: ParentDirectories?
    )
        -> WholeOutcome?
    {
        guard let name = request.components.last else {
            return .rejected(.refused(.invalidPath, "invalid path: empty path"))
        }
        // The directory's descriptor: the one the job's files in it share (closed when the last
        // lets it go), or one of its own.
        let parent: Int32
        let shared: SharedDirectory?
        if let parents {
            switch parents.open(request) {
            case .failure(let rejection): return .rejected(rejection)
            case .success(let directory): (parent, shared) = (directory.fd, directory)
            }
        } else {
            switch destination.openParent(of: request.components, relative: request.relative) {
            case .failure(let rejection): return .rejected(rejection)
            case .success(let (fd, _)): (parent, shared) = (fd, nil)
            }
        }
        let display = destination.display(request.relative)
        // Made with its final permissions where the umask (or a default ACL) leaves them whole,
        // as `fstat` then shows: no `fchmod` for it. Nobody can open an unnamed file by a name
        // meanwhile.
        let permissions = destination.permissions(request.header.mode)
        let fd = openat(parent, ".", sluice_o_tmpfile() | O_RDWR | O_CLOEXEC, permissions & 0o777)
        guard fd >= 0 else {
            let errno = Errno.current
            if shared == nil { closeDescriptor(parent) }
            // Not supported here (old kernel, file system without it): the named way, from now on.
            if [EOPNOTSUPP, EISDIR, EINVAL, ENOENT].contains(errno.rawValue) {
                unnamedFiles.store(false, ordering: .relaxed)
                return nil
            }
            return .rejected(
                .failed(.io, SluiceError(.system(errno), operation: "openat", subject: display).description))
        }
        let file = OpenedFile(
            parent: parent, name: name, temporary: "", fd: fd, offset: 0, resumable: false, display: display,
            fresh: true,
            unnamed: true, sharedParent: shared)
        afterOpen?(request.relative, fd)
        if let reason = Self.writeAll(bytes, to: fd) {
            abandon(file, keep: false)
            return .rejected(.failed(.io, "write \(quoted(display)): \(reason)"))
        }
        if fsync {
            if let rejection = stage(file, header: request.header, attributes: request.attributes) {
                return .rejected(rejection)
            }
            return .staged(StagedFile(opened: file, request: request))
        }
        var st = stat()
        let modeSet = fstat(fd, &st) == 0 && st.st_mode & 0o7777 == permissions
        if let failure = settle(file, header: request.header, attributes: request.attributes, modeSet: modeSet) {
            abandon(file, keep: false)
            return .rejected(.failed(.io, failure.description))
        }
        switch Destination.name(fd, parent, name, display: display) {
        case .success:
            closeDescriptor(fd)
            file.closeParent()
            return .stored
        case .failure(.unsupported):
            abandon(file, keep: false)
            unnamedFiles.store(false, ordering: .relaxed)
            return nil
        case .failure(.rejected(let rejection)):
            abandon(file, keep: false)
            return .rejected(rejection)
        }
    }

    /// Writes all of `bytes` at offset 0; nil, or why not.
    static func writeAll(_ bytes: UnsafeRawBufferPointer, to fd: Int32) -> String? {
        var done = 0
        while done < bytes.count {
            let n = retryingOnInterrupt {
                pwrite(fd, bytes.baseAddress.map { $0 + done }, bytes.count - done, off_t(done))
            }
            guard n > 0 else { return n < 0 ? "\(Errno.current)" : "wrote nothing" }
            done += n
        }
        return nil
    }

    /// Flushes the file system once (`syncfs`), so that every staged file's data is on disk,
    /// then moves each to its final name: a name never holds a file whose data a crash could
    /// lose. One answer per file, in order; every descriptor closed.
    func commitStaged(_ files: [StagedFile], overwrite: Bool) -> [EntryRejection?] {
        for file in files { beforeFsync?(file.request.relative) }
        if let failure = flushAll() {
            for file in files { abandon(file.opened, keep: false) }
            return files.map { _ in .failed(.io, failure.description) }
        }
        return files.map { file in
            defer {
                closeDescriptor(file.opened.fd)
                file.opened.closeParent()
            }
            return rename(file.opened, overwrite: overwrite || file.request.header.replaces, fsync: false)
        }
    }

    /// Flushes the destination's file system (`syncfs`): what was written and renamed there is
    /// on disk when it returns nil.
    func flushAll() -> SluiceError? {
        let flushed = Result { () throws(SluiceError) in
            try syscallValue("syncfs", destination.path) { syncfs(destination.fd) }
        }
        if case .failure(let error) = flushed { return error }
        return nil
    }

    /// Moves a settled temporary file to its final name; with `fsync`, flushes its directory.
    private func rename(_ file: OpenedFile, overwrite: Bool, fsync: Bool) -> EntryRejection? {
        if file.unnamed {
            switch Destination.name(file.fd, file.parent, file.name, display: file.display) {
            case .success:
                if fsync { _ = Glibc.fsync(file.parent) }
                return nil
            case .failure(.unsupported):
                // It could be created unnamed but not named (`/proc` went away): its bytes are gone.
                unnamedFiles.store(false, ordering: .relaxed)
                return .failed(.io, "link \(quoted(file.display)): cannot name a file created unnamed")
            case .failure(.rejected(let rejection)):
                return rejection
            }
        }
        let committed = Destination.commit(
            file.parent, file.temporary, file.name, overwrite: overwrite, display: file.display)
        switch committed {
        case .success:
            if fsync { _ = Glibc.fsync(file.parent) }
            return nil
        case .failure(let rejection):
            return rejection
        }
    }

    /// Closes an unfinished file, keeping its data for a resume when `keep` and it may be.
    func abandon(_ file: OpenedFile, keep: Bool) {
        if keep && file.resumable {
            // Truncating to its own size gives back the blocks reserved past what was written.
            var st = stat()
            if fstat(file.fd, &st) == 0 { _ = ftruncate(file.fd, st.st_size) }
            // Written under a token: vouched for as it is now, and only so.
            Destination.stampToken(file.fd)
        } else if !file.unnamed {
            unlinkat(file.parent, file.temporary, 0)
        }
        closeDescriptor(file.fd)
        file.closeParent()
    }

    /// Sets mode and mtime of directories created by a session, deepest first; returns the
    /// first few warnings (`SessionWarnings.shown`) and how many more there were.
    func settleDirectories(_ directories: DirectoriesToSettle) -> (warnings: [String], more: Int) {
        var warnings: [String] = []
        var more = 0
        directories.forEachLastFirst { path, mode, mtime in
            guard let warning = destination.applyDirectoryAttributes(path, mode: mode, mtime: mtime) else { return }
            if warnings.count < SessionWarnings.shown { warnings.append(warning) } else { more += 1 }
        }
        return (warnings, more)
    }
}

/// The directory of the last small file a job stored, kept open for the next ones in the same
/// directory: a BATCH's files mostly share theirs. Its descriptor is shared, not duplicated
/// for each file (an `fcntl(F_DUPFD_CLOEXEC)` and a `close` per file, 2 of a small file's 8
/// system calls): each file holds the `SharedDirectory`, and the descriptor is closed once the
/// last of them — or this, when the job moves on to another directory — lets it go. Lives for
/// one job (a few milliseconds); with fsync, its staged files hold it until they are named.
final class ParentDirectories {
    private let destination: Destination
    private var kept: (path: ArraySlice<String>, directory: SharedDirectory)?

    init(_ destination: Destination) { self.destination = destination }

    /// `request`'s directory, opened as `Destination.openParent` opens it, or the one kept
    /// when it is the same.
    func open(_ request: EntryRequest) -> Result<SharedDirectory, EntryRejection> {
        let path = request.components.dropLast()
        if let kept, kept.path == path { return .success(kept.directory) }
        kept = nil
        switch destination.openParent(of: request.components, relative: request.relative) {
        case .failure(let rejection):
            return .failure(rejection)
        case .success(let (fd, _)):
            let directory = SharedDirectory(fd)
            kept = (path, directory)
            return .success(directory)
        }
    }

    /// Lets the kept directory go (closed now unless a staged file still holds it).
    func close() {
        kept = nil
    }
}

/// A directory's descriptor shared by the files a job stores in it: closed when the last
/// holder lets it go.
final class SharedDirectory: Sendable {
    let fd: Int32

    init(_ fd: Int32) { self.fd = fd }

    deinit { closeDescriptor(fd) }
}
