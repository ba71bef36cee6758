import Sluice

#if canImport(Glibc)
    import Glibc
#endif

/// What the kernel tells a `TransferWatch`: the directories it watches, and the events it
/// turns into pending changes, moves and removals.
extension TransferWatch {
    /// Watches directory `path` (sent as `relative`) and every directory below it that the
    /// selection takes; a directory that cannot be watched is a warning, and is passed over
    /// by the watch (the `--sync` passes cover it: an overflow's, or the next run's).
    func watchTree(_ path: String, relative: String) {
        guard let watcher else { return }
        if let error = watcher.add(path, relative: relative) {
            guard error.rawValue != ENOENT && error.rawValue != ENOTDIR else { return }
            if error.rawValue == ENOSPC {
                if !warnedLimit {
                    warnedLimit = true
                    warn(
                        "cannot watch \(quoted(path)) and more: the limit of inotify watches is reached "
                            + "(raise fs.inotify.max_user_watches, e.g. sysctl fs.inotify.max_user_watches=524288); "
                            + "what is not watched is gone through again every \(unwatchedPass)")
                }
            } else {
                warn("cannot watch \(quoted(path)): \(error): it is gone through again every \(unwatchedPass)")
            }
            notWatched(relative)
            return
        }
        guard let dir = opendir(path) else { return }
        defer { closedir(dir) }
        while let item = readdir(dir) {
            guard item.pointee.d_type == DT_DIR || item.pointee.d_type == DT_UNKNOWN else { continue }
            let name = withUnsafeBytes(of: item.pointee.d_name) { raw in
                raw.baseAddress.flatMap { String(validatingCString: $0.assumingMemoryBound(to: CChar.self)) }
            }
            guard let name, name != ".", name != ".." else { continue }
            let child = path + "/" + name
            let childRelative = relative + "/" + name
            var st = stat()
            guard lstat(child, &st) == 0, st.st_mode & S_IFMT == S_IFDIR,
                !excluded(childRelative, isDirectory: true)
            else { continue }
            watchTree(child, relative: childRelative)
        }
    }

    /// `relative` could not be watched: it (with what it holds) is gone through as `--sync`
    /// does every `unwatchedPass`, until it is gone.
    private func notWatched(_ relative: String) {
        unwatched.insert(relative)
        guard unwatchedTimer == nil, let loop else { return }
        unwatchedTimer = loop.schedule(after: unwatchedPass, repeating: unwatchedPass) { [weak self] in
            guard let self, !self.stopping else { return }
            let now = monotonicNanoseconds()
            for path in self.unwatched {
                var st = stat()
                if let (local, _) = self.local(path), lstat(local, &st) == 0, st.st_mode & S_IFMT == S_IFDIR {
                    self.pending[path] = now
                } else {
                    self.unwatched.remove(path)
                }
            }
            self.schedule()
        }
    }

    /// For tests: as if `relative` could not be watched.
    func simulateUnwatched(_ relative: String) { notWatched(relative) }

    /// The path here of `relative` (as sent), and its components below its tree.
    func local(_ relative: String) -> (path: String, below: [String])? {
        let parts = relative.split(separator: "/", omittingEmptySubsequences: false).map(String.init)
        guard let first = parts.first, let root = roots[first] else { return nil }
        let below = Array(parts.dropFirst())
        return (below.isEmpty ? root : root + "/" + below.joined(separator: "/"), below)
    }

    /// Whether nothing is at `relative` here now.
    func isGone(_ relative: String) -> Bool {
        guard let (local, _) = local(relative) else { return true }
        var st = stat()
        return lstat(local, &st) != 0 && errno == ENOENT
    }

    /// Whether the selection leaves `relative` out.
    func excluded(_ relative: String, isDirectory: Bool) -> Bool {
        guard let (_, below) = local(relative), !below.isEmpty else { return false }
        return options.selection.excludes(below, isDirectory: isDirectory)
    }

    // MARK: Events

    /// One read's events: what changed becomes pending, renames pair up by cookie (a half
    /// without its pair in the read moved in or out of the trees).
    func handle(_ events: [InotifyEvent]) {
        eventsSeen += events.count
        guard !stopping, !dropsEvents else { return }
        let now = monotonicNanoseconds()
        let quiet = now + UInt64(settle.nanoseconds)
        // A file closed goes at once but for a breath (at most the settle time), so that the
        // rename of an editor's temporary over the file it saves, which follows its close within
        // microseconds, is seen first: the temporary is never sent, the file is.
        let closed = now + min(UInt64(settle.nanoseconds), Self.closeGrace)
        var movedFrom: [UInt32: (path: String, isDirectory: Bool)] = [:]
        for event in events {
            if event.has(IN_Q_OVERFLOW) {
                overflowed()
                continue
            }
            if event.has(IN_IGNORED) {
                watcher?.dropped(event.watch)
                continue
            }
            guard let directory = watcher?.relative(of: event.watch) else { continue }
            guard let name = event.name else {
                if event.undecodable { warn("a name in \(quoted(directory)) that is not valid UTF-8 is not sent") }
                continue
            }
            let path = directory + "/" + name
            if excluded(path, isDirectory: event.isDirectory) { continue }
            if event.has(IN_MOVED_FROM) {
                movedFrom[event.cookie] = (path, event.isDirectory)
            } else if event.has(IN_MOVED_TO) {
                if let from = movedFrom.removeValue(forKey: event.cookie) {
                    moved(from.path, to: path, isDirectory: event.isDirectory, at: now)
                } else {
                    appeared(path, isDirectory: event.isDirectory, at: now)
                }
            } else if event.has(IN_CREATE) {
                unsent.insert(path)
                if event.isDirectory {
                    appeared(path, isDirectory: true, at: now)
                } else {
                    change(path, at: quiet)
                }
            } else if event.has(IN_CLOSE_WRITE) {
                change(path, at: closed)
            } else if event.has(IN_MODIFY) || event.has(IN_ATTRIB) {
                change(path, at: quiet)
            } else if event.has(IN_DELETE) {
                gone(path, isDirectory: event.isDirectory, at: now)
            }
        }
        for (_, from) in movedFrom { gone(from.path, isDirectory: from.isDirectory, at: now) }
        schedule()
    }

    /// `path` changed: it goes at `due` (a write pushes a quiet file's time back; a close
    /// makes it due now).
    private func change(_ path: String, at due: UInt64) {
        pending[path] = due
    }

    /// A directory made or moved in (watched, then walked whole), or a file moved in.
    private func appeared(_ path: String, isDirectory: Bool, at now: UInt64) {
        if isDirectory, let (local, _) = local(path) { watchTree(local, relative: path) }
        pending[path] = now
    }

    /// A path removed: at its turn, removed at the receiver (with `delete`) if it is still
    /// gone then.
    private func gone(_ path: String, isDirectory: Bool, at now: UInt64) {
        if isDirectory { watcher?.forget(below: path) }
        pending[path] = now
    }

    /// A rename within the trees: a MOVE, unless the receiver cannot have `from` yet.
    private func moved(_ from: String, to: String, isDirectory: Bool, at now: UInt64) {
        if isDirectory { watcher?.renamed(from: from, to: to) }
        // What was pending below `from` is pending below `to` now.
        for (path, due) in pending where path == from || path.hasPrefix(from + "/") {
            pending[path] = nil
            pending[to + path.dropFirst(from.count)] = due
        }
        let neverSent = unsent.contains(from)
        for path in unsent where path == from || path.hasPrefix(from + "/") {
            unsent.remove(path)
            unsent.insert(to + path.dropFirst(from.count))
        }
        guard sender.firstPassDone, !neverSent else {
            // Not at the receiver (or the first pass still runs): both paths are looked at
            // in their turn, as a removal and a change.
            pending[from] = now
            pending[to] = now
            return
        }
        // Pending changes under `from` were re-keyed: they are fed after the MOVE.
        listingSees(move: from, to: to)
        moves += 1
        changesSent += 1
        touch(from)
        touch(to, isDirectory: isDirectory)
        inFlight[to] = now
        sender.watchMove(from: from, to: to)
        // A file moved is looked at again under its new name once the MOVE is in: a change
        // fed before the rename may have read it under the old one.
        if !isDirectory { pending[to] = pending[to] ?? now + UInt64(settle.nanoseconds) }
    }

    /// Events were lost: every tree is watched again and gone through as `--sync` does.
    private func overflowed() {
        overflows += 1
        warn("inotify queue overflow: going through the trees again (--sync)")
        let now = monotonicNanoseconds()
        for (name, path) in roots {
            watchTree(path, relative: name)
            pending[name] = now
        }
    }

    /// For tests: as if the kernel's queue overflowed.
    func simulateOverflow() {
        handle([InotifyEvent(watch: -1, mask: UInt32(IN_Q_OVERFLOW), cookie: 0, name: nil)])
        eventsSeen -= 1
    }
}
