import CSluiceLinux
import Sluice
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// The receiver's destination directory, and every file-system operation the receiver does
/// in it. Nothing here follows a path string from the root: each entry's path is walked one
/// component at a time from a descriptor of the directory, with `openat(O_DIRECTORY |
/// O_NOFOLLOW)` and `mkdirat`, so a symbolic link (or anything but a directory) on the way is
/// refused instead of followed, and files are created, renamed and removed only relative to
/// their parent's descriptor. Nothing is ever written outside the directory: an entry that is
/// there already is changed (mode, times, owner, attributes) only through a descriptor of its
/// own (`EntryHandle`), and opened to be read only once it is known to be a regular file,
/// without waiting (`EntryHandle.openRegular`).
final class Destination: @unchecked Sendable {
    let path: String
    let fd: Int32
    /// The permission bits of a sender's mode that files and directories are given
    /// (`permissionBits(keepingModes:umask:)`).
    let permissionBits: UInt32

    /// Opens `path`, which must be a directory.
    init(path: String, permissionBits: UInt32) throws(SluiceError) {
        precondition(permissionBits <= 0o777, "only permission bits: never setuid, setgid or sticky")
        let fd = try openFile(path, flags: O_RDONLY | O_DIRECTORY | O_CLOEXEC, permissions: 0).get()
        self.path = path
        self.fd = fd
        self.permissionBits = permissionBits
    }

    /// The bits of a sender's mode a receiver keeps: `rwxrwxrwx` less `umask`, as `cp` without
    /// `-p` creates files, or with `keepingModes` all nine, as rsync's `-p`; setuid, setgid and
    /// sticky never.
    static func permissionBits(keepingModes: Bool, umask: UInt32) -> UInt32 {
        keepingModes ? 0o777 : 0o777 & ~umask
    }

    /// The mode a file or directory sent with `mode` is given.
    func permissions(_ mode: UInt32) -> mode_t { mode_t(mode & permissionBits) }

    deinit { closeDescriptor(fd) }

    /// A path for messages: the directory joined with the relative path.
    func display(_ relative: String) -> String {
        path.hasSuffix("/") ? path + relative : path + "/" + relative
    }

    /// Opens the directory that will hold the last of `components`, creating missing
    /// directories (mode 0755 less the umask) on the way. Returns the descriptor (to close) and
    /// the relative paths of the directories created.
    /// Opens directory `path` below `directory` in one call (`openat2` with
    /// `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`): -1 with `errno` when a link is on the way, the
    /// path leaves `directory`, something is missing, or the kernel lacks the call.
    static func openBeneath(_ directory: Int32, _ path: String) -> Int32 {
        sluice_open_directory_beneath(directory, path)
    }

    /// Whether the file at `path` carries the resume mark of a partial (`resumeAttribute`).
    /// Opened without waiting (a FIFO there has none).
    static func hasResumeMark(_ path: String) -> Bool {
        let fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY)
        guard fd >= 0 else { return false }
        defer { closeDescriptor(fd) }
        return fgetxattr(fd, resumeAttribute, nil, 0) >= 0
    }

    func openParent(of components: [String], relative: String) -> Result<(Int32, [String]), EntryRejection> {
        if components.count > 1 {
            // Most often the directory is there: one call opens it, with the same refusals
            // as the walk below (no link, nothing outside). Missing, refused or unsupported:
            // the walk creates it, or says precisely why not.
            let direct = Self.openBeneath(fd, components.dropLast().joined(separator: "/"))
            if direct >= 0 { return .success((direct, [])) }
        }
        var current = dup(fd)
        guard current >= 0 else {
            return .failure(.failed(.io, "dup \(path): \(Errno.current)"))
        }
        var created: [String] = []
        for (index, name) in components.dropLast().enumerated() {
            let sofar = components[0...index].joined(separator: "/")
            switch Destination.openDirectory(current, name, create: permissions(0o755)) {
            case .success(let (next, wasCreated)):
                closeDescriptor(current)
                current = next
                if wasCreated { created.append(sofar) }
            case .failure(let rejection):
                closeDescriptor(current)
                return .failure(Destination.describe(rejection, display(sofar)))
            }
        }
        return .success((current, created))
    }

    /// How a directory step failed.
    enum StepFailure: Error {
        /// A symbolic link, or something that is not a directory, where a directory was needed.
        case notDirectory
        case system(String, Errno)
    }

    /// Opens directory `name` under `parent` without following a symbolic link; creates it
    /// first with mode `create` (less the process's umask) when missing and `create` is given.
    /// Returns the descriptor and whether it was created.
    static func openDirectory(_ parent: Int32, _ name: String, create: mode_t?) -> Result<(Int32, Bool), StepFailure> {
        var wasCreated = false
        for _ in 0..<2 {
            let opened = Result { () throws(SluiceError) in
                try syscallValue("openat", name) {
                    openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
                }
            }
            switch opened {
            case .success(let dirfd):
                return .success((dirfd, wasCreated))
            case .failure:
                let errno = opened.failureErrno ?? .ioError
                if errno == .noSuchFile, let mode = create, !wasCreated {
                    let made = Result { () throws(SluiceError) in
                        try syscallValue("mkdirat", name) { mkdirat(parent, name, mode) }
                    }
                    if case .failure = made, made.failureErrno != .fileExists {
                        return .failure(.system("mkdir", made.failureErrno ?? .ioError))
                    }
                    wasCreated = made.failureErrno == nil
                    continue
                }
                if errno.rawValue == ELOOP || errno == .notDirectory { return .failure(.notDirectory) }
                return .failure(.system("open", errno))
            }
        }
        return .failure(.system("open", .noSuchFile))
    }

    static func describe(_ failure: StepFailure, _ where_: String) -> EntryRejection {
        switch failure {
        case .notDirectory:
            return .refused(.invalidPath, "\(where_) is a symbolic link or not a directory")
        case .system(let call, let errno):
            return .failed(.io, "\(call) \(quoted(where_)): \(errno)")
        }
    }

    /// Creates directory `components` (and its parents) for a DIR entry. Returns the relative
    /// paths of the directories created (the entry's own last), to apply attributes to later.
    func makeDirectory(_ components: [String], relative: String, attributes: EntryAttributes = EntryAttributes())
        -> Result<[String], EntryRejection>
    {
        switch openParent(of: components, relative: relative) {
        case .failure(let rejection):
            return .failure(rejection)
        case .success(let (parent, createdParents)):
            defer { closeDescriptor(parent) }
            switch Destination.openDirectory(parent, components.last!, create: permissions(0o755)) {
            case .success(let (dirfd, wasCreated)):
                defer { closeDescriptor(dirfd) }
                if !attributes.isEmpty {
                    let applied = Result { () throws(SluiceError) in
                        try ReceiverStore.applyAttributes(attributes, to: dirfd, display: display(relative))
                    }
                    if case .failure(let error) = applied { return .failure(.failed(.io, error.description)) }
                }
                return .success(createdParents + (wasCreated ? [relative] : []))
            case .failure(let failure):
                if case .notDirectory = failure {
                    return .failure(.refused(.exists, "exists (not a directory)"))
                }
                return .failure(Destination.describe(failure, display(relative)))
            }
        }
    }

    /// Sets mode (`permissions`) and modification time of a directory created earlier, walking
    /// to it again without following links. Failures are returned as text, for a warning.
    func applyDirectoryAttributes(_ relative: String, mode: UInt32, mtime: timespec) -> String? {
        let components = relative.split(separator: "/").map(String.init)
        // One call where it can (as `openParent`), else the walk.
        let direct = Self.openBeneath(fd, relative)
        var current = direct >= 0 ? direct : dup(fd)
        guard current >= 0 else { return "dup \(path): \(Errno.current)" }
        defer { closeDescriptor(current) }
        for name in components where direct < 0 {
            switch Destination.openDirectory(current, name, create: nil) {
            case .success(let (next, _)):
                closeDescriptor(current)
                current = next
            case .failure:
                return "cannot reopen \(quoted(display(relative)))"
            }
        }
        let dirfd = current
        let times = [timespec(tv_sec: 0, tv_nsec: utimeNow), mtime]
        // What already holds (a directory a sync left as it was) is not set again.
        var st = stat()
        let known = fstat(dirfd, &st) == 0
        let modeHolds = known && st.st_mode & 0o7777 == permissions(mode)
        let timeHolds = known && st.st_mtim.tv_sec == mtime.tv_sec && st.st_mtim.tv_nsec == mtime.tv_nsec
        let result = Result { () throws(SluiceError) in
            if !modeHolds { try syscallValue("fchmod", display(relative)) { fchmod(dirfd, permissions(mode)) } }
            if !timeHolds { try syscallValue("futimens", display(relative)) { futimens(dirfd, times) } }
        }
        if case .failure(let error) = result { return error.description }
        return nil
    }

    // MARK: Files

    /// The temporary name a file is received under, next to its final name: `.NAME.sluice-part`,
    /// or `.sluice-part.` and 32 hex digits of the name's SHA-256 when that would be too long.
    static func temporaryName(for name: String) -> String {
        let plain = "." + name + ".sluice-part"
        if plain.utf8.count <= Wire.maxComponentBytes { return plain }
        return ".sluice-part." + SHA256Digest.hex(SHA256Digest.hash(name.utf8).prefix(16))
    }

    /// The extended attribute that marks a partial file as resumable: `v1 SIZE SECONDS NANOSECONDS`
    /// of the file being received.
    static let resumeAttribute = "user.sluice.resume"

    /// The extended attribute binding a partial to the sender's token (`ResumeKey.tag(of:)`):
    /// present only while every byte in the partial was written under that token. While a
    /// transfer writes, it holds the tag alone; when the transfer ends and keeps the partial,
    /// the tag and the partial's mtime and size then (`TAG SECONDS.NANOSECONDS SIZE`). Only a
    /// stamped tag whose stamp still matches vouches for the partial: one whose writer never
    /// stamped it (the receiver died) or that changed since (written on the disk) is checked.
    static let tokenAttribute = "user.sluice.token"

    /// The value that vouches for a partial with status `st` written under `tag`.
    private static func stampedToken(_ tag: [UInt8], _ st: stat) -> [UInt8] {
        tag + Array(" \(st.st_mtim.tv_sec).\(st.st_mtim.tv_nsec) \(st.st_size)".utf8)
    }

    /// Whether the partial open as `fd`, with status `st`, carries `tag` stamped as it is now.
    static func carriesToken(_ fd: Int32, _ tag: [UInt8], _ st: stat) -> Bool {
        ReceiverStore.attribute(fd, tokenAttribute, limit: 160) == stampedToken(tag, st)
    }

    /// Marks a partial that starts empty with the token it is written under (or with none).
    /// Where the attribute cannot be set, the partial carries none: it is checked if resumed.
    static func markToken(_ fd: Int32, _ tag: [UInt8]?) {
        guard let tag else {
            fremovexattr(fd, tokenAttribute)
            return
        }
        _ = tag.withUnsafeBytes { fsetxattr(fd, tokenAttribute, $0.baseAddress, $0.count, 0) }
    }

    /// A transfer is done writing to a partial it keeps: its token's tag, if it has one, is
    /// stamped with the partial's mtime and size as they are now.
    static func stampToken(_ fd: Int32) {
        var st = stat()
        guard let value = ReceiverStore.attribute(fd, tokenAttribute, limit: 160), value.count >= 64,
            fstat(fd, &st) == 0
        else { return }
        let stamped = stampedToken(Array(value.prefix(64)), st)
        _ = stamped.withUnsafeBytes { fsetxattr(fd, tokenAttribute, $0.baseAddress, $0.count, 0) }
    }

    static func resumeTag(_ header: EntryHeader) -> [UInt8] {
        Array("v1 \(header.size) \(header.mtimeSeconds) \(header.mtimeNanoseconds)".utf8)
    }

    /// What is at the final name, without following a link: nil when nothing is.
    static func existing(_ parent: Int32, _ name: String) -> mode_t? {
        var st = stat()
        guard fstatat(parent, name, &st, AT_SYMLINK_NOFOLLOW) == 0 else { return nil }
        return st.st_mode & S_IFMT
    }

    /// Why a partial found at a temporary name is not this receiver's to continue: owned by
    /// another user, or writable by group or others (its bytes are then whoever's choice, and
    /// the file stored would stay theirs to change). Nil for a partial the receiver may trust.
    static func untrusted(_ st: stat) -> String? {
        let owner = geteuid()
        if st.st_uid != owner { return "owned by uid \(st.st_uid), not this receiver's \(owner)" }
        if st.st_mode & 0o022 != 0 {
            return "writable by group or others (mode 0\(String(st.st_mode & 0o7777, radix: 8)))"
        }
        return nil
    }

    /// How long opening a temporary file waits for another transfer's lock on it to go.
    static let lockWaitMilliseconds = 1000

    /// Opens (creating it) temporary file `temporary` under `parent` without following a link,
    /// a fresh one when the name is linked elsewhere or the partial there is `untrusted`, and
    /// locks it against a concurrent transfer of the same file (`flock`). Returns the
    /// descriptor, its status, the line to log when an untrusted partial was replaced, and
    /// whether this call created the file (nothing was there: it carries no attribute).
    static func openLocked(_ parent: Int32, _ temporary: String, display: String)
        -> Result<(fd: Int32, status: stat, startedOver: String?, fresh: Bool), EntryRejection>
    {
        var fd: Int32 = -1
        var st = stat()
        st.st_mode = S_IFREG | 0o600
        var startedOver: String?
        // Most often nothing is there: created with O_EXCL, the file is new, ours, unlinked
        // elsewhere, and needs none of the checks below.
        fd = openat(parent, temporary, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        var fresh = fd >= 0
        if !fresh && errno != EEXIST {
            let error = SluiceError(.system(Errno.current), operation: "openat", subject: display)
            return .failure(.failed(.io, error.description))
        }
        if !fresh {
            // A partial is there: opened as a regular file only, without waiting
            // (`EntryHandle.openRegular`); a link, FIFO, socket or device there is refused.
            switch EntryHandle.openRegular(parent, temporary, flags: O_RDWR, display: display) {
            case .success(let (descriptor, status)):
                (fd, st) = (descriptor, status)
                // A partial name linked elsewhere is not ours to write through, nor one another
                // user owns or may write: start a new file.
                let distrust = untrusted(st)
                if st.st_nlink > 1 || distrust != nil {
                    if let distrust {
                        startedOver = "partial \(quoted(display)) \(distrust): not resumed, started over"
                    }
                    closeDescriptor(fd)
                    unlinkat(parent, temporary, 0)
                    fresh = true
                }
            case .failure(.missing):
                fresh = true  // gone meanwhile: created below
            case .failure(.notRegular(let rejection)), .failure(.failed(let rejection)):
                return .failure(rejection)
            }
            if fresh {
                let created = Result { () throws(SluiceError) in
                    try syscallValue("openat", display) {
                        openat(parent, temporary, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
                    }
                }
                switch created {
                case .success(let descriptor): fd = descriptor
                case .failure(let error): return .failure(.failed(.io, error.description))
                }
                st = stat()
                st.st_mode = S_IFREG | 0o600
            }
        }
        let descriptor = fd
        var locked = Result { () throws(SluiceError) in
            try syscall("flock", display) { flock(descriptor, LOCK_EX | LOCK_NB) }
        }
        // A transfer of the same file that just ended may still be closing it (its queued
        // writes finish first): a sender that reconnects at once waits for that, up to a
        // second, rather than be told the file is busy.
        var waited = 0
        while case .success(.wouldBlock) = locked, waited < Self.lockWaitMilliseconds {
            usleep(10_000)
            waited += 10
            locked = Result { () throws(SluiceError) in
                try syscall("flock", display) { flock(descriptor, LOCK_EX | LOCK_NB) }
            }
        }
        switch locked {
        case .success(.processed):
            break
        case .success(.wouldBlock):
            closeDescriptor(fd)
            return .failure(.refused(.busy, "busy: another transfer of this file is in progress"))
        case .failure(let error):
            closeDescriptor(fd)
            return .failure(.failed(.io, error.description))
        }
        // Its status as it is now that it is ours: the transfer that held the lock may have
        // changed it before letting go (truncated it, stamped its token).
        if !fresh { _ = fstat(fd, &st) }
        return .success((fd, st, startedOver, fresh))
    }

    /// Opens (creating it) the temporary file of `header` under `parent`, locked against a
    /// concurrent transfer of the same file. Returns the descriptor and the offset to resume
    /// from: the length of a partial left by an interrupted transfer of the same file (same
    /// size and mtime, marked by `resumeAttribute`) when `continueHeld`, else 0 with the file
    /// emptied. `token`: the sender's (`resume-token`); `vouched` says the bytes held were all
    /// written under it. A partial continued under another token, or none, loses its mark:
    /// nothing vouches for it after that.
    static func openTemporary(
        _ parent: Int32, _ temporary: String, header: EntryHeader, resume: Bool, continueHeld: Bool = true,
        token: [UInt8]? = nil, display: String
    ) -> Result<
        (fd: Int32, offset: UInt64, resumable: Bool, vouched: Bool, startedOver: String?, fresh: Bool), EntryRejection
    > {
        let fd: Int32
        var st: stat
        let startedOver: String?
        let fresh: Bool
        switch openLocked(parent, temporary, display: display) {
        case .failure(let rejection): return .failure(rejection)
        case .success(let (descriptor, status, notice, created)):
            (fd, st, startedOver, fresh) = (descriptor, status, notice, created)
        }
        let descriptor = fd
        let resumable = resume && header.sizeKnown && header.resumable
        var offset: UInt64 = 0
        var vouched = false
        let tokenTag = token.map(ResumeKey.tag(of:))
        if resumable && continueHeld && st.st_size > 0 && UInt64(st.st_size) <= header.size {
            var tag = [UInt8](repeating: 0, count: 128)
            let n = tag.withUnsafeMutableBytes { fgetxattr(descriptor, resumeAttribute, $0.baseAddress, $0.count) }
            if n > 0 && Array(tag[0..<n]) == resumeTag(header) { offset = UInt64(st.st_size) }
            if offset > 0 {
                // The mark goes before a byte is added unless this very token wrote the rest.
                vouched = tokenTag.map { carriesToken(descriptor, $0, st) } ?? false
                if !vouched { fremovexattr(descriptor, tokenAttribute) }
            }
        }
        if offset == 0 {
            // Only a stale partial needs truncating. Truncating a new, empty file to 0 is not
            // free: ext4 then flushes the whole file on close (`auto_da_alloc`), which cost a
            // quarter of a second per GiB received.
            let truncated = Result { () throws(SluiceError) in
                st.st_size == 0 ? 0 : try syscallValue("ftruncate", display) { ftruncate(descriptor, 0) }
            }
            if case .failure(let error) = truncated {
                closeDescriptor(fd)
                return .failure(.failed(.io, error.description))
            }
            if resumable {
                let tag = resumeTag(header)
                // Without user xattrs (some file systems) the partial is simply not resumable.
                let rc = tag.withUnsafeBytes { fsetxattr(descriptor, resumeAttribute, $0.baseAddress, $0.count, 0) }
                if rc != 0 { return .success((fd, 0, false, false, startedOver, fresh)) }
                // A fresh file has no mark to remove; a partial started over may.
                if tokenTag != nil || !fresh { markToken(descriptor, tokenTag) }
            } else if !fresh {
                fremovexattr(descriptor, resumeAttribute)
                fremovexattr(descriptor, tokenAttribute)
            }
        }
        return .success((fd, offset, resumable, vouched, startedOver, fresh))
    }

    /// Why `name(_:_:_:display:)` did not name a file.
    enum NamingFailure: Error {
        /// Linking through `/proc/self/fd` is not possible here.
        case unsupported
        case rejected(EntryRejection)
    }

    /// Whether `linkat(fd, "", AT_EMPTY_PATH)` names an unnamed file here: it needs
    /// `CAP_DAC_READ_SEARCH` (Linux before 6.10), and costs the kernel less than the path through
    /// `/proc/self/fd`, which it walks (2–3 µs a file on ext4). Cleared the first time it is
    /// refused where the path through `/proc` works; tests clear it to take that path.
    static let linksByEmptyPath = Atomic(true)

    /// Gives the unnamed file open as `fd` (`O_TMPFILE`) its `name` within `parent`: `linkat`
    /// with `AT_EMPTY_PATH` where the process may, otherwise through `/proc/self/fd` (which
    /// needs no privilege). An existing name, whatever it is (a link is not followed), is never
    /// replaced.
    static func name(_ fd: Int32, _ parent: Int32, _ name: String, display: String) -> Result<Void, NamingFailure> {
        var refusedEmptyPath = false
        if linksByEmptyPath.load(ordering: .relaxed) {
            if linkat(fd, "", parent, name, sluice_at_empty_path()) == 0 { return .success(()) }
            // ENOENT is also the answer of a directory removed meanwhile: the path through
            // `/proc` tells the two apart.
            refusedEmptyPath = [ENOENT, EPERM, EINVAL].contains(Errno.current.rawValue)
            if !refusedEmptyPath { return failure(Errno.current, parent, name, display: display) }
        }
        let linked = withProcPath(of: fd) { linkat(AT_FDCWD, $0, parent, name, AT_SYMLINK_FOLLOW) }
        if linked == 0 {
            if refusedEmptyPath { linksByEmptyPath.store(false, ordering: .relaxed) }
            return .success(())
        }
        return failure(Errno.current, parent, name, display: display)
    }

    /// What a failed `linkat` of an unnamed file means.
    private static func failure(_ errno: Errno, _ parent: Int32, _ name: String, display: String)
        -> Result<Void, NamingFailure>
    {
        switch errno.rawValue {
        case EEXIST:
            let kind = existing(parent, name)
            return .failure(.rejected(.refused(.exists, kind == S_IFDIR ? "exists (a directory)" : "exists")))
        case ENOENT where access("/proc/self/fd", X_OK) != 0:
            return .failure(.unsupported)  // no /proc
        case EPERM, EOPNOTSUPP, EXDEV:
            return .failure(.unsupported)
        default:
            return .failure(
                .rejected(.failed(.io, SluiceError(.system(errno), operation: "link", subject: display).description)))
        }
    }

    /// Runs `body` with `/proc/self/fd/FD` as a C string, written on the stack: once per file
    /// received whole, where an interpolated string cost an allocation and its formatting.
    static func withProcPath<Value>(of fd: Int32, _ body: (UnsafePointer<CChar>) -> Value) -> Value {
        let prefix = "/proc/self/fd/".utf8
        return withUnsafeTemporaryAllocation(of: CChar.self, capacity: prefix.count + 12) { buffer in
            var at = 0
            for byte in prefix {
                buffer[at] = CChar(bitPattern: byte)
                at += 1
            }
            // The decimal digits of a descriptor (never negative here), most significant first.
            var digits = UInt32(bitPattern: fd)
            let first = at
            repeat {
                buffer[at] = CChar(bitPattern: UInt8(ascii: "0") + UInt8(digits % 10))
                digits /= 10
                at += 1
            } while digits > 0
            var (low, high) = (first, at - 1)
            while low < high {
                buffer.swapAt(low, high)
                low += 1
                high -= 1
            }
            buffer[at] = 0
            guard let base = buffer.baseAddress else { return "/proc/self/fd/\(fd)".withCString(body) }
            return body(UnsafePointer(base))
        }
    }

    /// Moves the finished temporary file to its final name within `parent`: an exchange (or
    /// `renameat`) when replacing is allowed, otherwise `renameat2(RENAME_NOREPLACE)` (or `linkat` + `unlinkat`
    /// where the file system lacks it), so an existing file is never replaced.
    static func commit(_ parent: Int32, _ temporary: String, _ name: String, overwrite: Bool, display: String)
        -> Result<Void, EntryRejection>
    {
        let renamed: Result<Int32, SluiceError>
        if overwrite {
            // By exchange where the file system can: atomic like a rename, without the
            // flush ext4 makes a rename over a file wait for (`FileReplacement`).
            renamed = Result { () throws(SluiceError) in
                try FileReplacement.replace(temporary, with: name, in: parent, display: display)
                return 0
            }
        } else {
            renamed = Result { () throws(SluiceError) in
                try syscallValue("rename", display) {
                    renameat2(parent, temporary, parent, name, UInt32(RENAME_NOREPLACE))
                }
            }
            if let errno = renamed.failureErrno, errno == .invalidArgument || errno.rawValue == ENOSYS {
                let linked = Result { () throws(SluiceError) in
                    try syscallValue("link", display) { linkat(parent, temporary, parent, name, 0) }
                }
                if linked.failureErrno == .fileExists {
                    unlinkat(parent, temporary, 0)
                    return .failure(.refused(.exists, "exists"))
                }
                if case .failure(let error) = linked {
                    unlinkat(parent, temporary, 0)
                    return .failure(.failed(.io, error.description))
                }
                unlinkat(parent, temporary, 0)
                return .success(())
            }
        }
        switch renamed {
        case .success:
            return .success(())
        case .failure(let error):
            unlinkat(parent, temporary, 0)
            if renamed.failureErrno == .fileExists { return .failure(.refused(.exists, "exists")) }
            if renamed.failureErrno == .isDirectory { return .failure(.refused(.exists, "exists (a directory)")) }
            return .failure(.failed(.io, error.description))
        }
    }
}

/// `UTIME_NOW` (a macro Swift does not import): set the time to now.
let utimeNow = (1 << 30) - 1

/// A path quoted for messages, as `SluiceError` quotes paths.
func quoted(_ path: String) -> String { "\"\(path)\"" }
