import CSluiceLinux
import Sluice
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// The receiver's side of what a file is besides its bytes: links, extended attributes and
/// owners. Everything works relative to descriptors opened beneath the destination, never
/// following a link; an existing entry is changed through a descriptor of its own
/// (`EntryHandle`), never by name.
extension ReceiverStore {
    /// Creates the link `request` names: a symbolic link holding `link.target` as written, or
    /// a hard link to `link.target`, a file of this session (the machine checked that). Made
    /// under a temporary name, given its owner and mtime, then moved to its name as a file is
    /// (never over an existing one without `overwrite`, never over a directory).
    func makeLink(_ request: EntryRequest, _ link: LinkHeader, overwrite: Bool) -> EntryRejection? {
        placeEntry(request, overwrite: overwrite) { parent, temporary, display in
            makeLink(link, request.attributes.owner, in: parent, temporary, display: display)
        }
    }

    /// Makes an entry under a temporary name in the directory that will hold `request`'s
    /// (`make`, given that directory's descriptor, the temporary name and the path to show),
    /// then moves it to its name as a file is: never over an existing one without `overwrite`,
    /// never over a directory. What `make` made is removed when it fails.
    func placeEntry(
        _ request: EntryRequest, overwrite: Bool, _ make: (Int32, String, String) -> EntryRejection?
    ) -> EntryRejection? {
        let parent: Int32
        let name: String
        switch openParent(for: request, overwrite: overwrite) {
        case .failure(let rejection): return rejection
        case .success(let (fd, last)): (parent, name) = (fd, last)
        }
        defer { closeDescriptor(parent) }
        let display = destination.display(request.relative)
        let temporary = Destination.linkTemporaryName()
        if let rejection = make(parent, temporary, display) {
            unlinkat(parent, temporary, 0)
            return rejection
        }
        switch Destination.commit(parent, temporary, name, overwrite: overwrite, display: display) {
        case .success: return nil
        case .failure(let rejection): return rejection
        }
    }

    /// `makeLink`'s link, at `temporary` in `parent`.
    private func makeLink(
        _ link: LinkHeader, _ owner: EntryOwner?, in parent: Int32, _ temporary: String, display: String
    ) -> EntryRejection? {
        switch link.kind {
        case .symbolic:
            let made = Result { () throws(SluiceError) in
                try syscallValue("symlink", display) {
                    (link.target + [0]).withUnsafeBufferPointer { target in
                        target.withMemoryRebound(to: CChar.self) { symlinkat($0.baseAddress!, parent, temporary) }
                    }
                }
            }
            if case .failure(let error) = made { return .failed(.io, error.description) }
            // Its owner and mtime set on the link made, held (`EntryHandle`), not by name.
            let settled = Result { () throws(SluiceError) in
                let handle = try EntryHandle.open(parent, temporary, display: display).get()
                guard handle.type == S_IFLNK else { throw EntryHandle.changed(display) }
                if let owner {
                    let (uid, gid) = OwnerNames.shared.local(owner)
                    try handle.changeOwner(uid, gid)
                }
                let mtime = timespec(tv_sec: Int(link.mtimeSeconds), tv_nsec: Int(link.mtimeNanoseconds))
                // A link's mtime is kept where the kernel can, and not missed where it cannot.
                _ = try? handle.setTimes([timespec(tv_sec: 0, tv_nsec: utimeNow), mtime])
            }
            if case .failure(let error) = settled { return .failed(.io, error.description) }
        case .hard:
            let target = String(decoding: link.target, as: UTF8.self)
            let components = target.split(separator: "/").map(String.init)
            guard let targetName = components.last else { return .refused(.invalidPath, "invalid link target") }
            let targetParent =
                components.count > 1
                ? Destination.openBeneath(destination.fd, components.dropLast().joined(separator: "/"))
                : dup(destination.fd)
            guard targetParent >= 0 else {
                return .refused(.invalidPath, "hard link to \(quoted(target)): its directory cannot be opened")
            }
            defer { closeDescriptor(targetParent) }
            var st = stat()
            guard fstatat(targetParent, targetName, &st, AT_SYMLINK_NOFOLLOW) == 0, st.st_mode & S_IFMT == S_IFREG
            else {
                return .refused(.invalidPath, "hard link to \(quoted(target)): not a regular file")
            }
            let made = Result { () throws(SluiceError) in
                try syscallValue("link", display) { linkat(targetParent, targetName, parent, temporary, 0) }
            }
            if case .failure(let error) = made { return .failed(.io, error.description) }
        }
        return nil
    }

    /// Sets what XATTR and OWNER said on an open file or directory: the owner first (a change of
    /// owner clears setuid and setgid bits, and the mode is set after it).
    static func applyAttributes(_ attributes: EntryAttributes, to fd: Int32, display: String) throws(SluiceError) {
        if let owner = attributes.owner {
            let (uid, gid) = OwnerNames.shared.local(owner)
            try syscallValue("fchown", display) { fchown(fd, uid, gid) }
        }
        for attribute in attributes.xattrs {
            try syscallValue("fsetxattr", display) {
                attribute.value.withUnsafeBytes { value in
                    fsetxattr(fd, attribute.name, value.baseAddress, value.count, 0)
                }
            }
        }
    }
}

extension Destination {
    /// A fresh temporary name for a link being made: reserved like a partial's
    /// (`PathCheck.isPartialName`), so no sender can name it.
    static func linkTemporaryName() -> String {
        var random = SystemRandomNumberGenerator()
        return ".sluice-part.link-" + String(random.next() as UInt64, radix: 16)
    }
}

/// Maps owner and group names between machines, as rsync does: a name the receiver knows
/// gives its own id, else the sender's number stands. Names looked up once.
final class OwnerNames: Sendable {
    static let shared = OwnerNames()

    private struct Cache {
        var users: [String: uid_t] = [:]
        var groups: [String: gid_t] = [:]
        var userNames: [uid_t: String] = [:]
        var groupNames: [gid_t: String] = [:]
    }

    private let cache = Mutex(Cache())

    /// The receiver's ids for `owner`.
    func local(_ owner: EntryOwner) -> (uid_t, gid_t) {
        let uid = owner.user.isEmpty ? owner.uid : (user(named: owner.user) ?? owner.uid)
        let gid = owner.group.isEmpty ? owner.gid : (group(named: owner.group) ?? owner.gid)
        return (uid, gid)
    }

    /// `st`'s owner as the sender sends it: ids, and names unless `numeric`.
    func owner(of st: stat, numeric: Bool) -> EntryOwner {
        EntryOwner(
            uid: st.st_uid, gid: st.st_gid, user: numeric ? "" : userName(st.st_uid),
            group: numeric ? "" : groupName(st.st_gid))
    }

    private func user(named name: String) -> uid_t? {
        if let known = cache.withLock({ $0.users[name] }) { return known }
        var entry = passwd()
        var result: UnsafeMutablePointer<passwd>?
        var buffer = [CChar](repeating: 0, count: 4096)
        guard getpwnam_r(name, &entry, &buffer, buffer.count, &result) == 0, result != nil else { return nil }
        cache.withLock { $0.users[name] = entry.pw_uid }
        return entry.pw_uid
    }

    private func group(named name: String) -> gid_t? {
        if let known = cache.withLock({ $0.groups[name] }) { return known }
        var entry = Glibc.group()
        var result: UnsafeMutablePointer<Glibc.group>?
        var buffer = [CChar](repeating: 0, count: 4096)
        guard getgrnam_r(name, &entry, &buffer, buffer.count, &result) == 0, result != nil else { return nil }
        cache.withLock { $0.groups[name] = entry.gr_gid }
        return entry.gr_gid
    }

    private func userName(_ uid: uid_t) -> String {
        if let known = cache.withLock({ $0.userNames[uid] }) { return known }
        let name = Self.name { buffer, length in
            var entry = passwd()
            var result: UnsafeMutablePointer<passwd>?
            guard getpwuid_r(uid, &entry, buffer, length, &result) == 0, result != nil else { return nil }
            return entry.pw_name
        }
        cache.withLock { $0.userNames[uid] = name }
        return name
    }

    private func groupName(_ gid: gid_t) -> String {
        if let known = cache.withLock({ $0.groupNames[gid] }) { return known }
        let name = Self.name { buffer, length in
            var entry = Glibc.group()
            var result: UnsafeMutablePointer<Glibc.group>?
            guard getgrgid_r(gid, &entry, buffer, length, &result) == 0, result != nil else { return nil }
            return entry.gr_name
        }
        cache.withLock { $0.groupNames[gid] = name }
        return name
    }

    /// The name a `get*_r` lookup finds (with a buffer for its strings), or "" when none, or
    /// one too long to send.
    private static func name(
        _ lookup: (UnsafeMutablePointer<CChar>, Int) -> UnsafeMutablePointer<CChar>?
    ) -> String {
        var buffer = [CChar](repeating: 0, count: 4096)
        let name = buffer.withUnsafeMutableBufferPointer { raw in
            lookup(raw.baseAddress!, raw.count).map { String(cString: $0) } ?? ""
        }
        return name.utf8.count > Wire.maxOwnerNameBytes ? "" : name
    }
}

extension ReceiverStore {
    /// The answers to a run of CHECKs, in order (`check(_:_:)` each), keeping the last few
    /// parent directories open (`CheckParents`): a tree's CHECKs go from a directory's entries
    /// to the next directory, which lies in the directory before.
    func check(_ batch: [([String]?, CheckHeader, EntryAttributes)], digest algorithm: TransferDigest = .sha256)
        -> [HaveAnswer]
    {
        var parents = CheckParents()
        defer { parents.close() }
        return batch.map { components, check, attributes in
            guard let components, let name = components.last else { return HaveAnswer(status: .absent) }
            let fd = parents.descriptor(of: components.dropLast(), below: destination)
            guard fd >= 0 else { return HaveAnswer(status: .absent) }
            return self.check(in: fd, name, check, attributes, digest: algorithm)
        }
    }

    /// `check(in:_:_:digest:)`, then, with the XATTRs and OWNER that came before the CHECK
    /// (`sync-attributes`), a comparison of those: an entry otherwise the same is given them
    /// (with `CheckFlags.apply`) and is answered the same with what was set; one whose
    /// attributes cannot be read or set here is answered as differing, so that it is sent
    /// again with them.
    func check(
        in parent: Int32, _ name: String, _ check: CheckHeader, _ attributes: EntryAttributes,
        digest algorithm: TransferDigest = .sha256
    ) -> HaveAnswer {
        var st = stat()
        guard fstatat(parent, name, &st, AT_SYMLINK_NOFOLLOW) == 0 else { return HaveAnswer(status: .absent) }
        var answer = self.check(in: parent, name, looked: st, check, digest: algorithm)
        guard attributes.owner != nil || check.comparesXattrs, answer.status != .absent,
            answer.differences & Wire.HaveDifference.kind == 0
        else { return answer }
        let same = answer.status == .same
        let (differences, settled) = syncAttributes(
            in: parent, name, looked: st, check, attributes, apply: same && check.applies)
        answer.differences |= differences
        if same && !settled { answer.status = .differs }
        return answer
    }

    /// What is at `name` in `parent` against a CHECK: absent, the same (a file of the same size
    /// and mtime, a directory, a link to the same target), or different, and how. With
    /// `CheckFlags.apply`, a file the same but for its mode is given the sender's mode.
    /// Nothing is created: a missing parent (or a link on the way) means absent. `st` is what
    /// a look at the name (`fstatat`, not following a link) found: whatever is changed is
    /// changed on that entry only (`EntryHandle`).
    private func check(
        in parent: Int32, _ name: String, looked st: stat, _ check: CheckHeader, digest algorithm: TransferDigest
    ) -> HaveAnswer {
        let type = st.st_mode & S_IFMT
        typealias D = Wire.HaveDifference
        switch check.kind {
        case .directory:
            return type == S_IFDIR ? HaveAnswer(status: .same) : HaveAnswer(status: .differs, differences: D.kind)
        case .symbolicLink:
            guard type == S_IFLNK else { return HaveAnswer(status: .differs, differences: D.kind) }
            var buffer = [UInt8](repeating: 0, count: Wire.maxPathBytes + 1)
            let n = buffer.withUnsafeMutableBytes { raw in
                raw.withMemoryRebound(to: CChar.self) { readlinkat(parent, name, $0.baseAddress!, $0.count) }
            }
            let same = n >= 0 && Array(buffer[0..<n]) == check.target
            return same ? HaveAnswer(status: .same) : HaveAnswer(status: .differs, differences: D.target)
        case .special:
            return checkSpecial(in: parent, name, st, check)
        case .file where check.comparesContents:
            guard type == S_IFREG else { return HaveAnswer(status: .differs, differences: D.kind) }
            return compareContents(in: parent, name, st, check, algorithm)
        case .file:
            guard type == S_IFREG else { return HaveAnswer(status: .differs, differences: D.kind) }
            var differences: UInt16 = 0
            if UInt64(st.st_size) != check.size { differences |= D.size }
            if Int64(st.st_mtim.tv_sec) != check.mtimeSeconds || UInt32(st.st_mtim.tv_nsec) != check.mtimeNanoseconds {
                differences |= D.mtime
            }
            let mode = destination.permissions(check.mode)
            let modeDiffers = st.st_mode & 0o7777 != mode
            guard differences == 0 else {
                return HaveAnswer(status: .differs, differences: differences | (modeDiffers ? D.mode : 0))
            }
            guard modeDiffers else { return HaveAnswer(status: .same) }
            // Only the mode differs: set here, no data sent (not on a dry run), on the file
            // looked at (`EntryHandle`); where it cannot be, the file is to be sent again.
            if check.applies, !changeMode(in: parent, name, to: mode, looked: st) {
                return HaveAnswer(status: .differs, differences: D.mode)
            }
            return HaveAnswer(status: .same, differences: D.mode)
        }
    }
}

extension ReceiverStore {
    /// Sets the permission bits of `name` in `parent` to `mode`, on the entry an earlier look
    /// (`looked`) saw and decided on, held without following a link (`EntryHandle`), never on
    /// what the name holds now if that is another entry. Whether it was set.
    func changeMode(in parent: Int32, _ name: String, to mode: mode_t, looked: stat) -> Bool {
        let display = destination.display(name)
        let changed = Result { () throws(SluiceError) in
            try EntryHandle.open(parent, name, display: display, expecting: looked).get().changeMode(mode)
        }
        if case .failure = changed { return false }
        return true
    }

    /// PRUNE (`send --delete`): removes what is below directory `components` that no CHECK of
    /// the transfer named (`named`), deepest first, never following a link and never touching
    /// partial files (`.NAME.sluice-part`); on a dry run only lists it. Returns the relative
    /// paths removed, in order, and the first failure if any (the walk goes on past it). The
    /// directory itself must have been named.
    func prune(_ components: [String], named: Set<String>, dryRun: Bool) -> ([String], EntryRejection?) {
        let relative = components.joined(separator: "/")
        guard named.contains(relative) else {
            return ([], .refused(.invalidPath, "\(relative): not a directory this transfer checked"))
        }
        let fd = Destination.openBeneath(destination.fd, relative)
        guard fd >= 0 else {
            return ([], .failed(.io, "open \(quoted(destination.display(relative))): \(Errno.current)"))
        }
        defer { closeDescriptor(fd) }
        var walk = PruneWalk(named: named, dryRun: dryRun)
        walk.prune(fd, relative)
        return (walk.gone, walk.failure)
    }
}

/// The walk of one PRUNE: what it removed, and its first failure.
struct PruneWalk {
    let named: Set<String>
    let dryRun: Bool
    var gone: [String] = []
    var failure: EntryRejection?

    init(named: Set<String>, dryRun: Bool) {
        self.named = named
        self.dryRun = dryRun
    }

    /// The names in directory `fd` (not `.` and `..`; names that are not UTF-8 are left
    /// alone), sorted.
    mutating func names(_ fd: Int32, _ path: String) -> [String] {
        let copy = dup(fd)
        guard copy >= 0, let dir = fdopendir(copy) else {
            if copy >= 0 { closeDescriptor(copy) }
            fail("open \(quoted(path)): \(Errno.current)")
            return []
        }
        defer { closedir(dir) }
        var out: [String] = []
        while let item = readdir(dir) {
            let name = withUnsafeBytes(of: item.pointee.d_name) { raw in
                String(validatingCString: raw.baseAddress!.assumingMemoryBound(to: CChar.self))
            }
            guard let name, name != ".", name != ".." else { continue }
            out.append(name)
        }
        return out.sorted()
    }

    mutating func fail(_ reason: String) {
        if failure == nil { failure = .failed(.io, reason) }
    }

    /// Below named directory `fd` (at `path`): what is not named goes; named directories are
    /// walked in turn.
    mutating func prune(_ fd: Int32, _ path: String) {
        for name in names(fd, path) where !PathCheck.isPartialName(name) {
            let child = path + "/" + name
            var st = stat()
            guard fstatat(fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 else { continue }
            let isDirectory = st.st_mode & S_IFMT == S_IFDIR
            if named.contains(child) {
                guard isDirectory else { continue }
                let sub = openat(fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
                guard sub >= 0 else { continue }
                prune(sub, child)
                closeDescriptor(sub)
            } else {
                remove(fd, name, child, isDirectory: isDirectory)
            }
        }
    }

    /// Removes `name` in `fd` (a directory with everything in it, deepest first).
    mutating func remove(_ fd: Int32, _ name: String, _ path: String, isDirectory: Bool) {
        if isDirectory {
            let sub = openat(fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
            guard sub >= 0 else {
                fail("open \(quoted(path)): \(Errno.current)")
                return
            }
            for inner in names(sub, path) {
                var st = stat()
                guard fstatat(sub, inner, &st, AT_SYMLINK_NOFOLLOW) == 0 else { continue }
                remove(sub, inner, path + "/" + inner, isDirectory: st.st_mode & S_IFMT == S_IFDIR)
            }
            closeDescriptor(sub)
        }
        if !dryRun, unlinkat(fd, name, isDirectory ? AT_REMOVEDIR : 0) != 0 {
            fail("remove \(quoted(path)): \(Errno.current)")
            return
        }
        gone.append(path)
    }
}

extension ReceiverStore {
    /// `--checksum`: a regular file of the CHECK's size is the same when its digest is: then
    /// (with apply) it is given the sender's mtime and mode where they differ, without data.
    fileprivate func compareContents(
        in parent: Int32, _ name: String, _ st: stat, _ check: CheckHeader, _ algorithm: TransferDigest
    ) -> HaveAnswer {
        typealias D = Wire.HaveDifference
        guard UInt64(st.st_size) == check.size else { return HaveAnswer(status: .differs, differences: D.size) }
        // The file looked at, opened without waiting (what holds the name now may be a FIFO).
        let fd: Int32
        switch EntryHandle.openRegular(parent, name, flags: O_RDONLY, display: destination.display(name), expecting: st)
        {
        case .success(let (descriptor, _)): fd = descriptor
        case .failure(.notRegular): return HaveAnswer(status: .differs, differences: D.kind)
        case .failure: return HaveAnswer(status: .differs, differences: D.content)
        }
        defer { closeDescriptor(fd) }
        guard FileDigest.hash(algorithm, of: fd, to: check.size) == check.digest else {
            return HaveAnswer(status: .differs, differences: D.content)
        }
        var differences: UInt16 = 0
        let mtime = timespec(tv_sec: Int(check.mtimeSeconds), tv_nsec: Int(check.mtimeNanoseconds))
        if st.st_mtim.tv_sec != mtime.tv_sec || st.st_mtim.tv_nsec != mtime.tv_nsec { differences |= D.mtime }
        let mode = destination.permissions(check.mode)
        if st.st_mode & 0o7777 != mode { differences |= D.mode }
        if check.applies {
            if differences & D.mode != 0 { _ = fchmod(fd, mode) }
            if differences & D.mtime != 0 { _ = futimens(fd, [timespec(tv_sec: 0, tv_nsec: utimeNow), mtime]) }
        }
        return HaveAnswer(status: .same, differences: differences)
    }
}

extension ReceiverStore {
    /// How the entry at `name` in `parent` differs from the owner and extended attributes the
    /// sender sent before its CHECK (`sync-attributes`): its owner and group as the store maps
    /// owners (`OwnerNames`), its `user.*` attributes but the receiver's own `user.sluice.*`.
    /// With `apply`, the difference is set: the owner (the setuid and setgid bits a change of
    /// owner clears are never kept by a receiver), then the attributes the sender has that
    /// differ, then the ones it has not are removed. `settled` is false where the entry's
    /// attributes could not be read, or the difference not set.
    ///
    /// All of it on the entry `st` describes (the CHECK's look), held without following a link
    /// (`EntryHandle`): its attributes read and set through a descriptor of that very entry,
    /// its owner changed on the handle. Another entry at the name now is not settled.
    fileprivate func syncAttributes(
        in parent: Int32, _ name: String, looked st: stat, _ check: CheckHeader, _ attributes: EntryAttributes,
        apply: Bool
    ) -> (differences: UInt16, settled: Bool) {
        typealias D = Wire.HaveDifference
        guard case .success(let handle) = EntryHandle.open(parent, name, display: name, expecting: st) else {
            return (0, false)
        }
        let type = handle.type
        var differences: UInt16 = 0
        var ids: (uid_t, gid_t)?
        if let owner = attributes.owner {
            let (uid, gid) = OwnerNames.shared.local(owner)
            ids = (uid, gid)
            if st.st_uid != uid { differences |= D.owner }
            if st.st_gid != gid { differences |= D.group }
        }
        var fd: Int32 = -1
        defer { if fd >= 0 { closeDescriptor(fd) } }
        var toSet: [ExtendedAttribute] = []
        var toRemove: [String] = []
        if check.comparesXattrs {
            guard type == S_IFREG || type == S_IFDIR else { return (differences | D.xattrs, false) }
            fd = (try? handle.reopen(O_RDONLY | (type == S_IFDIR ? O_DIRECTORY : 0))) ?? -1
            guard fd >= 0, let held = Self.userXattrs(fd) else { return (differences | D.xattrs, false) }
            let sent = Set(attributes.xattrs.map(\.name))
            toSet = attributes.xattrs.filter { held[$0.name] != $0.value }
            toRemove = held.keys.filter { !sent.contains($0) }.sorted()
            if !toSet.isEmpty || !toRemove.isEmpty { differences |= D.xattrs }
        }
        guard apply, differences != 0 else { return (differences, true) }
        if let (uid, gid) = ids, differences & (D.owner | D.group) != 0 {
            guard (try? handle.changeOwner(uid, gid)) != nil else { return (differences, false) }
        }
        for attribute in toSet {
            let rc = attribute.value.withUnsafeBytes { fsetxattr(fd, attribute.name, $0.baseAddress, $0.count, 0) }
            guard rc == 0 else { return (differences, false) }
        }
        for name in toRemove where fremovexattr(fd, name) != 0 && errno != ENODATA {
            return (differences, false)
        }
        return (differences, true)
    }

    /// The `user.*` extended attributes of open `fd` but `user.sluice.*` (none where the file
    /// system keeps none); nil when they cannot be read.
    static func userXattrs(_ fd: Int32) -> [String: [UInt8]]? {
        var size = flistxattr(fd, nil, 0)
        if size < 0 && (errno == ENOTSUP || errno == EOPNOTSUPP) { return [:] }
        guard size >= 0 else { return nil }
        guard size > 0 else { return [:] }
        var names = [CChar](repeating: 0, count: size)
        size = flistxattr(fd, &names, names.count)
        guard size >= 0 else { return nil }
        var out: [String: [UInt8]] = [:]
        for raw in names[0..<min(size, names.count)].split(separator: 0) {
            let name = String(decoding: raw.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            guard name.hasPrefix(Wire.xattrNamespace), !name.hasPrefix("user.sluice.") else { continue }
            let length = fgetxattr(fd, name, nil, 0)
            guard length >= 0 else { return nil }
            var value = [UInt8](repeating: 0, count: length)
            let got = value.withUnsafeMutableBytes { fgetxattr(fd, name, $0.baseAddress, $0.count) }
            guard got >= 0, got <= value.count else { return nil }
            value.removeSubrange(got...)
            out[name] = value
        }
        return out
    }
}

/// The directories a run of CHECKs looked in last, open (`ReceiverStore.check(_:digest:)`), the
/// most recent first. Keeping only the last one reopened a tree's top directory after each
/// directory's entries: with the last few, each directory is opened once (a tenth of the
/// receiver's time on a second `--sync` went to opening and closing directories).
struct CheckParents {
    /// Directories kept open at most.
    static let kept = 4

    private var open: [(path: ArraySlice<String>, fd: Int32)] = []

    /// A descriptor of the directory `path` below the destination (not to be closed: `close`
    /// does), or -1 when it cannot be opened (a link on the way, missing).
    mutating func descriptor(of path: ArraySlice<String>, below destination: Destination) -> Int32 {
        if let found = open.firstIndex(where: { $0.path.elementsEqual(path) }) {
            let hit = open.remove(at: found)
            open.insert(hit, at: 0)
            return hit.fd
        }
        let fd =
            path.isEmpty ? dup(destination.fd) : Destination.openBeneath(destination.fd, path.joined(separator: "/"))
        if open.count >= Self.kept, let evicted = open.popLast(), evicted.fd >= 0 { closeDescriptor(evicted.fd) }
        open.insert((path, fd), at: 0)
        return fd
    }

    /// Closes every directory kept.
    mutating func close() {
        for kept in open where kept.fd >= 0 { closeDescriptor(kept.fd) }
        open.removeAll()
    }
}
