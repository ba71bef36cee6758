import CSluiceLinux
import Sluice

#if canImport(Glibc)
    import Glibc
#endif

/// An existing entry beneath the destination, held by a descriptor of the entry itself opened
/// without following a link and without opening it for reading or writing
/// (`openat(O_PATH | O_NOFOLLOW)`): a FIFO so held waits for no writer, a device is not its
/// driver's to act on, and a symbolic link is the link, never what it points to.
///
/// Every change the receiver makes to an existing entry's mode, times, owner or extended
/// attributes goes through one (or through a descriptor already open on the entry, such as the
/// file being written), never through a call on its name: between a look at a name and a
/// change by name, another session could swap the name for a link to a file outside the
/// destination. Where a decision was made from an earlier look (`fstatat`), the handle is
/// opened `expecting` that status and refuses an entry that is not the one looked at. And
/// where a change needs `/proc` (a mode; times or attributes on an old kernel) and `/proc` is
/// missing, it fails: it never falls back to a call that follows a link.
final class EntryHandle {
    /// The `O_PATH` descriptor.
    let fd: Int32
    /// The entry's status, read from the descriptor (`fstat`).
    let status: stat
    /// The directory holding the entry (not owned: the caller keeps it open while the handle
    /// lives), and its name there: for `reopen`'s fallback where `/proc` is missing.
    private let parent: Int32
    private let name: String
    /// The entry's path, for messages.
    let display: String

    private init(fd: Int32, status: stat, parent: Int32, name: String, display: String) {
        self.fd = fd
        self.status = status
        self.parent = parent
        self.name = name
        self.display = display
    }

    deinit { closeDescriptor(fd) }

    /// Holds `name` in `parent`. With `expecting`, the status of an earlier look at the name:
    /// an entry of another type, or another file (device and inode), is refused
    /// (`EntryHandle.changed`), as the decision made from that look is not the handle's to act on.
    static func open(_ parent: Int32, _ name: String, display: String, expecting: stat? = nil)
        -> Result<EntryHandle, SluiceError>
    {
        Result { () throws(SluiceError) -> EntryHandle in
            let fd = try syscallValue("open", display) {
                openat(parent, name, sluice_o_path() | O_NOFOLLOW | O_CLOEXEC)
            }
            var st = stat()
            guard fstat(fd, &st) == 0 else {
                let errno = Errno.current
                closeDescriptor(fd)
                throw SluiceError(.system(errno), operation: "fstat", path: display)
            }
            // From here the descriptor is closed with the handle.
            let handle = EntryHandle(fd: fd, status: st, parent: parent, name: name, display: display)
            if let expecting, !handle.isSame(as: expecting) { throw changed(display) }
            return handle
        }
    }

    /// The refusal of an entry that is not the one an earlier look saw.
    static func changed(_ display: String) -> SluiceError {
        SluiceError(.refused, operation: "open", path: display, detail: "changed while it was looked at")
    }

    /// Whether `other` is the status of this very entry: the same type, device and inode.
    func isSame(as other: stat) -> Bool {
        status.st_dev == other.st_dev && status.st_ino == other.st_ino
            && status.st_mode & S_IFMT == other.st_mode & S_IFMT
    }

    /// The entry's type bits (`S_IFMT`).
    var type: mode_t { status.st_mode & S_IFMT }

    /// The entry through `/proc`: a path that leads to the entry itself, whatever its name now
    /// holds (the magic link of the descriptor is not followed further).
    private var procPath: String { "/proc/self/fd/\(fd)" }

    /// Sets the entry's permission bits (`chmod` of `/proc/self/fd/N`, as the C library's
    /// `fchmodat(AT_SYMLINK_NOFOLLOW)` does, but on the entry held). A symbolic link's mode is
    /// never changed (Linux keeps none): refused with `EOPNOTSUPP`. Without `/proc`, fails.
    func changeMode(_ mode: mode_t) throws(SluiceError) {
        guard type != S_IFLNK else {
            throw SluiceError(.system(Errno(rawValue: EOPNOTSUPP)), operation: "chmod", path: display)
        }
        let path = procPath
        try syscallValue("chmod", display) { chmod(path, mode) }
    }

    /// Sets the entry's owner and group (`fchownat(fd, "", AT_EMPTY_PATH)`): a link's are the
    /// link's own. A change of owner clears setuid and setgid bits; set the mode after it.
    func changeOwner(_ uid: uid_t, _ gid: gid_t) throws(SluiceError) {
        let fd = fd
        try syscallValue("chown", display) { fchownat(fd, "", uid, gid, sluice_at_empty_path() | AT_SYMLINK_NOFOLLOW) }
    }

    /// Sets the entry's access and modification times (`utimensat(fd, "", AT_EMPTY_PATH)`, a
    /// link's own times for a link). On a kernel that refuses `AT_EMPTY_PATH` there (`EINVAL`,
    /// older kernels): `utimensat` of `/proc/self/fd/N` for anything but a link; for a link,
    /// `utimensat(AT_SYMLINK_NOFOLLOW)` of its name in its directory, which never follows,
    /// once the name is seen to hold this very link still.
    func setTimes(_ times: [timespec]) throws(SluiceError) {
        let fd = fd
        if utimensat(fd, "", times, sluice_at_empty_path()) == 0 { return }
        guard errno == EINVAL else {
            throw SluiceError(.system(.current), operation: "utimensat", path: display)
        }
        if type != S_IFLNK {
            let path = procPath
            try syscallValue("utimensat", display) { utimensat(AT_FDCWD, path, times, 0) }
            return
        }
        var st = stat()
        guard fstatat(parent, name, &st, AT_SYMLINK_NOFOLLOW) == 0, isSame(as: st) else { throw Self.changed(display) }
        let (parent, name) = (parent, name)
        try syscallValue("utimensat", display) { utimensat(parent, name, times, AT_SYMLINK_NOFOLLOW) }
    }

    /// A descriptor of the entry open with `flags` (`O_RDONLY`, `O_RDWR`, with `O_DIRECTORY` for
    /// a directory), to read or change its bytes or extended attributes: opened through
    /// `/proc/self/fd/N`, so that it is the very entry held. Where `/proc` is missing, its name is
    /// opened without following a link, without waiting (`O_NONBLOCK`), and checked to be the
    /// entry held. The caller closes it. Only for a regular file or a directory: anything else
    /// is refused, never opened (a FIFO's open would wait, a device's is its driver's).
    func reopen(_ flags: Int32) throws(SluiceError) -> Int32 {
        guard type == S_IFREG || type == S_IFDIR else {
            throw SluiceError(.system(Errno(rawValue: EOPNOTSUPP)), operation: "open", path: display)
        }
        let extra = O_CLOEXEC | O_NONBLOCK | O_NOCTTY
        let path = procPath
        var fd = retryingOnInterrupt { Glibc.open(path, flags | extra) }
        if fd < 0 && errno == ENOENT {
            // No /proc: by name, checked below.
            let (parent, name) = (parent, name)
            fd = try syscallValue("open", display) { openat(parent, name, flags | extra | O_NOFOLLOW) }
        } else if fd < 0 {
            throw SluiceError(.system(.current), operation: "open", path: display)
        }
        var st = stat()
        guard fstat(fd, &st) == 0, isSame(as: st) else {
            closeDescriptor(fd)
            throw Self.changed(display)
        }
        // A regular file or directory does not wait: the descriptor behaves as any other.
        let status = fcntl(fd, F_GETFL)
        if status >= 0 { _ = fcntl(fd, F_SETFL, status & ~O_NONBLOCK) }
        return fd
    }

    /// What the entry is, for a message: "a FIFO", "a socket", …
    var kind: String { Self.kind(type) }

    /// What an entry of type `type` (`S_IFMT` bits) is, for a message.
    static func kind(_ type: mode_t) -> String {
        switch type {
        case S_IFREG: return "a regular file"
        case S_IFDIR: return "a directory"
        case S_IFLNK: return "a symbolic link"
        case S_IFIFO: return "a FIFO"
        case S_IFSOCK: return "a socket"
        case S_IFCHR: return "a character device"
        case S_IFBLK: return "a block device"
        default: return "of unknown type"
        }
    }
}

/// Why `EntryHandle.openRegular` opened nothing.
enum RegularFileFailure: Error, Equatable {
    /// Nothing is at the name.
    case missing
    /// Something other than a regular file is, or not the file expected: that file fails.
    case notRegular(EntryRejection)
    /// It could not be opened (permissions, `/proc` and the name both failing).
    case failed(EntryRejection)
}

extension EntryHandle {
    /// Opens the existing regular file `name` in `parent` with `flags` (`O_RDONLY`, `O_RDWR`),
    /// never waiting: the one open of an existing entry that the receiver reads (a delta's basis,
    /// a file compared by content, a partial to resume). The entry is held first (`open`, which
    /// opens nothing), its type read with `fstat`, and only a regular file is opened, as that
    /// very file (`reopen`). A FIFO, socket, device, link or directory at the name is refused as
    /// "not a regular file", naming it; with `expecting` (an earlier look's status), so is
    /// another file than the one looked at. Returns the descriptor (to close) and the status.
    static func openRegular(_ parent: Int32, _ name: String, flags: Int32, display: String, expecting: stat? = nil)
        -> Result<(fd: Int32, status: stat), RegularFileFailure>
    {
        let handle: EntryHandle
        switch open(parent, name, display: display, expecting: expecting) {
        case .success(let held): handle = held
        case .failure(let error): return .failure(failure(error, missingAllowed: true))
        }
        guard handle.type == S_IFREG else {
            return .failure(.notRegular(notRegular(display, handle.type)))
        }
        do {
            return .success((try handle.reopen(flags), handle.status))
        } catch {
            return .failure(failure(error, missingAllowed: false))
        }
    }

    /// `openRegular`'s failure for `error`: nothing there (with `missingAllowed`), not the file
    /// looked at, or an open that failed. (Decided with `if`, not with `where` clauses in a
    /// `switch` over a `Result`: Swift 6.3's optimizer crashes on those here, in a release build.)
    private static func failure(_ error: SluiceError, missingAllowed: Bool) -> RegularFileFailure {
        if missingAllowed && error.errno == .noSuchFile { return .missing }
        if error.code == .refused { return .notRegular(.refused(.invalidPath, error.description)) }
        return .failed(.failed(.io, error.description))
    }

    /// The refusal of an entry of type `type` at `display` where a regular file was expected.
    static func notRegular(_ display: String, _ type: mode_t) -> EntryRejection {
        .refused(.invalidPath, "\(quoted(display)): not a regular file (\(kind(type)))")
    }
}
