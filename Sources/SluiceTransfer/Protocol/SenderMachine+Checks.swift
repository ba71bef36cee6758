/// What a sender that syncs (`--sync`) works out of its entries: which it CHECKs and how,
/// which it hashes, and what the receiver's HAVE answers settle.
extension SenderMachine {
    /// The entries to CHECK: each entry of the work once, but streams (nothing to compare).
    /// A second name is checked as the file it is: the same size and mtime leave it as it is.
    func entriesToCheck() -> [Int] {
        var seen: Set<Int> = []
        return work.map(\.index).filter { index in isChecked(index) && seen.insert(index).inserted }
    }

    /// Whether entry `index` is checked: anything but a stream.
    func isChecked(_ index: Int) -> Bool {
        let entry = entries[index]
        return entry.isDirectory || entry.symlinkTarget != nil || entry.seekable || entry.special != nil
    }

    /// The CHECK for entry `index`.
    func check(_ index: Int) -> CheckHeader {
        let entry = entries[index]
        let kind: Wire.CheckKind =
            entry.isDirectory
            ? .directory : entry.symlinkTarget != nil ? .symbolicLink : entry.special != nil ? .special : .file
        var check = CheckHeader(
            kind: kind, flags: settings.dryRun ? 0 : Wire.CheckFlags.apply, size: entry.listedSize ?? 0,
            mode: entry.mode, mtimeSeconds: entry.mtimeSeconds, mtimeNanoseconds: entry.mtimeNanoseconds,
            path: Array(entry.relative.utf8), target: entry.symlinkTarget ?? [])
        if let special = entry.special {
            check.mode = special.type.rawValue | entry.mode & 0o7777
            check.size = UInt64(special.major) << 32 | UInt64(special.minor)
        }
        if let digest = checksums[index] {
            check.flags |= Wire.CheckFlags.digest
            check.digest = digest
        }
        if comparesXattrs(index) {
            check.flags |= Wire.CheckFlags.xattrs
        }
        return check
    }

    /// Whether entry `index`'s CHECK carries its extended attributes (all of them, none or
    /// more): read here (`-X`), taken by the receiver, and not a link's.
    func comparesXattrs(_ index: Int) -> Bool {
        let entry = entries[index]
        return syncsAttributes && entry.attributes.xattrsRead && entry.symlinkTarget == nil && entry.special == nil
            && offers.xattrs
    }

    /// XATTR and OWNER before entry `index`'s CHECK (`sync-attributes`).
    func checkAttributeMessages(_ index: Int) -> [SenderAction] {
        guard syncsAttributes else { return [] }
        let attributes = entries[index].attributes
        var out: [SenderAction] = comparesXattrs(index) ? attributes.xattrs.map { .send(.xattr($0)) } : []
        if let owner = attributes.owner, offers.owners {
            out.append(.send(.owner(owner)))
        }
        return out
    }

    /// A regular file by path (what `checksum` computes a digest of).
    func isFile(_ index: Int) -> Bool {
        let entry = entries[index]
        return entry.seekable && !entry.isDirectory && entry.symlinkTarget == nil
    }

    /// With `checksum`, once the receiver said HELLO: the files whose digests the session is to
    /// compute, in the order their CHECKs go.
    var checksumsToCompute: [Int] {
        guard settings.checksum, syncing else { return [] }
        return checks.filter(isFile)
    }

    /// The digest of file `index` (the agreed one), or nil when it could not be read (its CHECK
    /// then compares size and mtime).
    mutating func checksumComputed(_ index: Int, _ digest: [UInt8]?) {
        if let digest { checksums[index] = digest } else { checksumFailed.insert(index) }
    }

    /// With `sync`, before entry `index` goes: settled here when the receiver has it the same
    /// (a directory too: the receiver sets its mode and mtime from the CHECK after its
    /// contents), or on a dry run (nil: send it).
    mutating func settledBySync(_ index: Int) -> [SenderAction]? {
        guard syncing else { return nil }
        let same = haves[index]?.status == .same
        guard same || settings.dryRun else { return nil }
        settled[index] = true
        // What the receiver has the same counts as stored: a second name may be linked to it.
        if same && entries[index].linked { stored.insert(index) }
        return [.settle(index, .stored)]
    }

    /// Whether entry `index` (of `size` bytes now) goes as a delta: it replaces a regular file
    /// of the receiver's, is large enough, is read whole, and both sides want it (sparse or not).
    /// Compressed or not: with `compress`, its literal bytes go as one deflate stream.
    func sendsDelta(_ index: Int, size: UInt64?) -> Bool {
        guard settings.delta, replaces(index), offers.delta,
            let have = haves[index], have.differences & Wire.HaveDifference.kind == 0, let size,
            size >= Delta.minimumSize
        else { return false }
        let entry = entries[index]
        return entry.seekable && entry.hardLinkTo == nil
    }

    /// Whether entry `index` replaces what the receiver has (HAVE said it differs).
    func replaces(_ index: Int) -> Bool { syncing && haves[index]?.status == .differs }
}
