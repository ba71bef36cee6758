import CSluiceLinux
import Sluice

#if canImport(Glibc)
    import Glibc
#endif

/// The store's side of a file received in ranges over several connections: one temporary
/// file, written in place at each range's offset, whose partial state survives an interrupted
/// transfer range by range.
///
/// A ranged partial is marked `v2 SIZE SECONDS NANOSECONDS` in `user.sluice.resume` (never
/// mistaken for a v1 prefix) and lists the bytes held of each range in `user.sluice.ranges`
/// as `START+LENGTH=HELD` items separated by commas.
extension ReceiverStore {
    /// The extended attribute listing the held bytes of each range.
    static let rangesAttribute = "user.sluice.ranges"
    /// The most ranges a partial's attribute lists (more are ignored: those start over).
    static let maxRecordedRanges = 4 * Wire.maxStreams

    static func rangedTag(_ header: EntryHeader) -> [UInt8] {
        Array("v2 \(header.size) \(header.mtimeSeconds) \(header.mtimeNanoseconds)".utf8)
    }

    /// Opens (creating it) the temporary file of a ranged file after the checks `openFile`
    /// makes. Returns it with the bytes held of each range by an interrupted transfer of the
    /// same file (same size and mtime) when `continueHeld`, or an emptied file and no ranges.
    func openRangedFile(_ request: EntryRequest, overwrite: Bool, resume: Bool, continueHeld: Bool = true)
        -> Result<(OpenedFile, [ByteRange: UInt64]), EntryRejection>
    {
        openParent(for: request, overwrite: overwrite).flatMap { parent, name in
            openRangedTemporary(request, in: parent, named: name, resume: resume, continueHeld: continueHeld)
        }
    }

    /// `openRangedFile` once the final name's directory `parent` is open (the result's to close).
    private func openRangedTemporary(
        _ request: EntryRequest, in parent: Int32, named name: String, resume: Bool, continueHeld: Bool
    ) -> Result<(OpenedFile, [ByteRange: UInt64]), EntryRejection> {
        let temporary = Destination.temporaryName(for: name)
        let display = destination.display(temporary)
        let fd: Int32
        let st: stat
        let startedOver: String?
        switch Destination.openLocked(parent, temporary, display: display) {
        case .failure(let rejection):
            closeDescriptor(parent)
            return .failure(rejection)
        case .success(let (descriptor, status, notice, _)): (fd, st, startedOver) = (descriptor, status, notice)
        }
        let header = request.header
        var resumable = resume && header.resumable
        var held: [ByteRange: UInt64] = [:]
        var vouched = false
        let tokenTag = request.attributes.resumeToken.map(ResumeKey.tag(of:))
        if resumable && continueHeld && st.st_size > 0 && UInt64(st.st_size) <= header.size
            && Self.attribute(fd, Destination.resumeAttribute, limit: 128) == Self.rangedTag(header)
        {
            held = Self.parseRanges(Self.attribute(fd, Self.rangesAttribute, limit: 8192) ?? [], size: header.size)
            if !held.isEmpty {
                // As for a whole file: the mark goes unless this very token wrote what is held.
                vouched = tokenTag.map { Destination.carriesToken(fd, $0, st) } ?? false
                if !vouched { fremovexattr(fd, Destination.tokenAttribute) }
            }
        }
        if held.isEmpty {
            if st.st_size != 0 && ftruncate(fd, 0) != 0 {
                let errno = Errno.current
                closeDescriptor(fd)
                closeDescriptor(parent)
                return .failure(.failed(.io, "ftruncate \(quoted(display)): \(errno)"))
            }
            fremovexattr(fd, Self.rangesAttribute)
            if resumable {
                let tag = Self.rangedTag(header)
                let rc = tag.withUnsafeBytes {
                    fsetxattr(fd, Destination.resumeAttribute, $0.baseAddress, $0.count, 0)
                }
                // Without user xattrs (some file systems) the partial is simply not resumable.
                if rc != 0 { resumable = false }
                Destination.markToken(fd, tokenTag)
            } else {
                fremovexattr(fd, Destination.resumeAttribute)
                fremovexattr(fd, Destination.tokenAttribute)
            }
        }
        let opened = OpenedFile(
            parent: parent, name: name, temporary: temporary, fd: fd, offset: 0, resumable: resumable,
            display: destination.display(request.relative), startedOver: startedOver, vouched: vouched)
        return .success((opened, held))
    }

    /// Closes an unfinished ranged file: kept with what each range holds when `keep` and it
    /// may be resumed, else removed.
    func abandonRanged(_ file: OpenedFile, held: [ByteRange: UInt64], keep: Bool) {
        if keep && file.resumable {
            let text = held.filter { $0.value > 0 }.sorted { $0.key.start < $1.key.start }
                .prefix(Self.maxRecordedRanges)
                .map { "\($0.key.start)+\($0.key.length)=\($0.value)" }.joined(separator: ",")
            let bytes = Array(text.utf8)
            _ = bytes.withUnsafeBytes { fsetxattr(file.fd, Self.rangesAttribute, $0.baseAddress, $0.count, 0) }
        }
        abandon(file, keep: keep)
    }

    /// Commits a ranged file as `commit` does, its range list removed first.
    func commitRanged(
        _ file: OpenedFile, header: EntryHeader, relative: String, overwrite: Bool, fsync: Bool,
        attributes: EntryAttributes = EntryAttributes()
    ) -> EntryRejection? {
        fremovexattr(file.fd, Self.rangesAttribute)
        return commit(
            file, header: header, relative: relative, overwrite: overwrite, fsync: fsync, attributes: attributes)
    }

    /// An extended attribute's value, or nil.
    static func attribute(_ fd: Int32, _ name: String, limit: Int) -> [UInt8]? {
        var value = [UInt8](repeating: 0, count: limit)
        let n = value.withUnsafeMutableBytes { fgetxattr(fd, name, $0.baseAddress, $0.count) }
        return n >= 0 ? Array(value[0..<n]) : nil
    }

    /// The range list of a partial: items that do not parse, lie outside `size` (or past
    /// `Wire.maxFileSize`, where no offset reaches), hold more than their length or overlap an
    /// earlier item are dropped (those ranges start over).
    static func parseRanges(_ bytes: [UInt8], size: UInt64) -> [ByteRange: UInt64] {
        var held: [ByteRange: UInt64] = [:]
        for item in String(decoding: bytes, as: UTF8.self).split(separator: ",").prefix(maxRecordedRanges) {
            let parts = item.split(whereSeparator: { $0 == "+" || $0 == "=" })
            guard parts.count == 3, let start = UInt64(parts[0]), let length = UInt64(parts[1]),
                let count = UInt64(parts[2])
            else { continue }
            let range = ByteRange(start: start, length: length)
            guard length > 0, let end = range.end, end <= min(size, Wire.maxFileSize), count <= length,
                !held.keys.contains(where: { $0.overlaps(range) })
            else { continue }
            held[range] = count
        }
        return held
    }
}
