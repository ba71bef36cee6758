import CSluiceLinux

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// Replacing a file with a finished temporary file of the same directory, without the costs a
/// plain `rename(2)` over it has on Linux, and without ever showing a mixture at its name.
///
/// Writing a copy under a temporary name and renaming it over the old file is what keeps a
/// half-written file from ever having the final name. Two costs come with it that `cat >
/// existing` does not pay:
///
/// - ext4 (`auto_da_alloc`) and some other file systems flush the new file's data when a rename
///   replaces an existing file: the rename waits for the writeback of the whole file (about
///   half a second per GiB here). Exchanging the two names with `renameat2(RENAME_EXCHANGE)`
///   and removing the old file under the temporary name is just as atomic — the final name
///   holds the old file or the new one, never neither and never a mixture — and is not
///   subject to that heuristic. Where the file system cannot exchange names, a plain rename
///   is used.
/// - The old file's cached pages stay in memory until it is removed at the end, so the copy
///   needs as many new pages as it writes; truncating in place (`O_TRUNC`) hands the old pages
///   back first. ``releaseCache(ofReplaced:)`` gives them back at the start instead.
///
/// What a crash (power loss, kernel panic) leaves is the file system's business: without
/// ``flush(_:in:display:)`` of the new file before the exchange, the final name may hold the
/// new file with its data not yet on disk — as after `cat > existing`. With it, and the
/// directory flushed after, the final name holds the old file or the complete new one.
public enum FileReplacement {
    /// How `replace` gave the file its name.
    public enum Method: Hashable, Sendable {
        /// `renameat2(RENAME_EXCHANGE)`, then the old file removed.
        case exchanged
        /// `renameat(2)`: nothing was there, or the file system cannot exchange names.
        case renamed
    }

    /// Gives `temporary` the name `name`, both in the directory `directory` (a descriptor, or
    /// `AT_FDCWD` for paths relative to the working directory), replacing the file there.
    ///
    /// Throws, leaving both files as they were, when the exchange or rename fails, or when
    /// what is at `name` turned out to be a directory. `display` names the file in errors.
    @discardableResult
    public static func replace(
        _ temporary: String, with name: String, in directory: Int32 = AT_FDCWD, display: String
    ) throws(SluiceError) -> Method {
        if renameat2(directory, temporary, directory, name, UInt32(RENAME_EXCHANGE)) == 0 {
            // `temporary` now names the old file.
            if unlinkat(directory, temporary, 0) == 0 { return .exchanged }
            let error = Errno.current
            // A directory appeared at the name meanwhile (EISDIR), or the old file cannot be
            // removed: put both back and refuse.
            renameat2(directory, temporary, directory, name, UInt32(RENAME_EXCHANGE))
            throw SluiceError(.system(error), operation: "unlink", path: display, detail: "the replaced file")
        }
        let error = Errno.current
        // EINVAL/ENOTSUP: this file system cannot exchange; ENOENT: nothing (left) to replace.
        guard
            error == .invalidArgument || error == .noSuchFile || error.rawValue == ENOSYS
                || error.rawValue == EOPNOTSUPP
        else {
            throw SluiceError(.system(error), operation: "rename", path: display)
        }
        try syscallValue("rename", display) { renameat(directory, temporary, directory, name) }
        return .renamed
    }

    /// Drops the cached pages of the regular file `descriptor` refers to, a file about to be
    /// replaced (`posix_fadvise(POSIX_FADV_DONTNEED)`), so that the copy reuses them.
    ///
    /// Skipped while the file has dirty pages (`cachestat(2)`; on kernels without it, when the
    /// file changed in the last minute): the kernel would start writing back data that is about
    /// to be deleted. Errors are ignored: this only saves memory.
    public static func releaseCache(ofReplaced descriptor: Int32) {
        var info = stat()
        guard fstat(descriptor, &info) == 0, info.st_mode & S_IFMT == S_IFREG else { return }
        if let dirty = dirtyPages(descriptor) {
            guard dirty == 0 else { return }
        } else {
            var now = timespec()
            clock_gettime(CLOCK_REALTIME, &now)
            guard now.tv_sec - info.st_ctim.tv_sec > 60 else { return }
        }
        _ = posix_fadvise(descriptor, 0, 0, POSIX_FADV_DONTNEED)
    }

    /// How many of the file's cached pages are dirty or being written back (`cachestat(2)`);
    /// nil where the kernel cannot tell (before Linux 6.5).
    static func dirtyPages(_ descriptor: Int32) -> UInt64? {
        var dirty: UInt64 = 0
        return sluice_dirty_pages(descriptor, &dirty) == 0 ? dirty : nil
    }

    /// `releaseCache(ofReplaced:)` for the file at `path` (relative to `directory`), opened
    /// without following a final symbolic link.
    public static func releaseCache(ofReplaced path: String, in directory: Int32 = AT_FDCWD) {
        let fd = openat(directory, path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY)
        guard fd >= 0 else { return }
        releaseCache(ofReplaced: fd)
        close(fd)
    }

    /// Flushes the file at `path` (relative to `directory`) to disk with `fsync(2)`: its data
    /// and metadata, or those of a directory when `path` is one.
    public static func flush(_ path: String, in directory: Int32 = AT_FDCWD, display: String) throws(SluiceError) {
        let fd = try syscallValue("open", display) { openat(directory, path, O_RDONLY | O_CLOEXEC | O_NOCTTY) }
        defer { close(fd) }
        try syscallValue("fsync", display) { fsync(fd) }
    }
}
