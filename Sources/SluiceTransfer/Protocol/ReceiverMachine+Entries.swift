import Sluice

/// The receiver machine's entries: a FILE, RANGE or LINK checked and started, the attributes
/// that go before one, and the data's accounting against what was announced.
extension ReceiverMachine {
    /// True when `file` resumed held bytes that HELD must check and it has not come yet.
    func awaitsHeld(_ file: IncomingFile) -> Bool {
        checksHeld && file.offset > 0 && !file.vouched && file.heldDigest == nil
    }

    mutating func startFile(_ header: EntryHeader) -> [ReceiverAction] {
        switch PathCheck.receivable(header.path) {
        case .failure(let refusal):
            return refuseAtHeader(
                header, .refused(.invalidPath, "invalid path: \(refusal.reason)"),
                path: PeerText.sanitized(header.path))
        case .success(let components):
            let relative = PathCheck.relative(header.path)
            if let rejection = Self.sizeRejection(header) {
                return refuseAtHeader(header, rejection, path: relative)
            }
            if let maxSize = settings.maxSize, header.sizeKnown, header.size > maxSize {
                return refuseAtHeader(
                    header, .refused(.tooLarge, "too large: \(header.size) bytes, the limit is \(maxSize)"),
                    path: relative)
            }
            let request = EntryRequest(
                components: components, relative: relative, header: header, attributes: takePendingAttributes())
            state = .storing(.file(request))
            return [.openFile(request)]
        }
    }

    /// Why a FILE or RANGE announcing `header`'s size is refused whatever the receiver's limit:
    /// a size past `Wire.maxFileSize` (more than an `off_t` holds), which no file can have.
    /// Nil for any other size, or none.
    static func sizeRejection(_ header: EntryHeader) -> EntryRejection? {
        guard header.sizeKnown, header.size > Wire.maxFileSize else { return nil }
        return .refused(.tooLarge, "too large: \(header.size) bytes, more than a file can hold (\(Wire.maxFileSize))")
    }

    /// Answers a FILE at its header: an eager file's data is on its way, so it is skipped up
    /// to END or ABORT.
    mutating func refuseAtHeader(_ header: EntryHeader, _ rejection: EntryRejection, path: String)
        -> [ReceiverAction]
    {
        if header.eager { state = .discarding }
        return answer(rejection, path: path, isDirectory: false, size: header.sizeKnown ? header.size : nil)
    }

    /// A RANGE: checked against the file's announced size here, against the transfer's other
    /// ranges by the session (`openRange`).
    mutating func startRange(_ message: RangeHeader) -> [ReceiverAction] {
        let header = message.entry
        let range = message.range
        switch PathCheck.receivable(header.path) {
        case .failure(let refusal):
            return answer(
                .refused(.invalidPath, "invalid path: \(refusal.reason)"), path: PeerText.sanitized(header.path),
                isDirectory: false, size: nil)
        case .success(let components):
            let relative = components.joined(separator: "/")
            let refuse = { (reason: String) in (EntryRejection.refused(.invalidRange, reason), relative) }
            var problem: (EntryRejection, String)?
            if !header.sizeKnown || header.compressed {
                problem = refuse("a range needs a known size and uncompressed data")
            } else if range.length == 0 {
                problem = refuse("empty range")
            } else if range.end.map({ $0 > header.size }) ?? true {
                problem = refuse("\(range) outside the announced size (\(header.size) bytes)")
            } else if let rejection = Self.sizeRejection(header) {
                problem = (rejection, relative)
            } else if let maxSize = settings.maxSize, header.size > maxSize {
                problem = (.refused(.tooLarge, "too large: \(header.size) bytes, the limit is \(maxSize)"), relative)
            }
            if let (rejection, path) = problem {
                return answer(rejection, path: path, isDirectory: false, size: header.size)
            }
            let request = EntryRequest(
                components: components, relative: relative, header: header, attributes: takePendingAttributes())
            state = .storing(.range(request, range))
            return [.openRange(request, range)]
        }
    }

    /// XATTR: kept for the entry announced next, within the limits; only `user.*`, and never
    /// the receiver's own resume mark.
    mutating func takeAttribute(_ attribute: ExtendedAttribute) -> [ReceiverAction] {
        guard settings.xattrs else { return violation("XATTR: this receiver does not take extended attributes") }
        let name = PeerText.sanitized(Array(attribute.name.utf8))
        guard attribute.name.hasPrefix(Wire.xattrNamespace), attribute.name.utf8.count > Wire.xattrNamespace.utf8.count
        else { return violation("XATTR \(name): only user.* attributes are taken") }
        guard !attribute.name.hasPrefix("user.sluice.") else {
            return violation("XATTR \(name): user.sluice.* is the receiver's own")
        }
        let bytes = pendingAttributes.xattrBytes + attribute.name.utf8.count + attribute.value.count
        guard pendingAttributes.xattrs.count < Wire.maxXattrsPerEntry, bytes <= Wire.maxXattrBytesPerEntry else {
            return violation(
                "more than \(Wire.maxXattrsPerEntry) extended attributes or \(Wire.maxXattrBytesPerEntry) bytes of them for one entry"
            )
        }
        guard !pendingAttributes.xattrs.contains(where: { $0.name == attribute.name }) else {
            return violation("XATTR \(name) twice for one entry")
        }
        pendingAttributes.xattrs.append(attribute)
        pendingAttributes.xattrBytes = bytes
        return []
    }

    mutating func takePendingAttributes() -> EntryAttributes {
        defer { pendingAttributes = EntryAttributes() }
        return pendingAttributes
    }

    /// A LINK: its path checked as any entry's; a hard link's target must be a file this
    /// session stored that its FILE said would be linked to.
    mutating func startLink(_ header: LinkHeader) -> [ReceiverAction] {
        let attributes = takePendingAttributes()
        let components: [String]
        switch PathCheck.receivable(header.path) {
        case .failure(let refusal):
            return answer(
                .refused(.invalidPath, "invalid path: \(refusal.reason)"), path: PeerText.sanitized(header.path),
                isDirectory: false, size: nil, isLink: true)
        case .success(let checked): components = checked
        }
        let relative = components.joined(separator: "/")
        var link = header
        if header.kind == .hard {
            guard case .success(let target) = PathCheck.receivable(header.target),
                linkTargets.contains(target.joined(separator: "/"))
            else {
                return answer(
                    .refused(
                        .invalidPath,
                        "hard link to \(PeerText.sanitized(header.target)): not a file stored by this transfer"),
                    path: relative, isDirectory: false, size: nil, isLink: true)
            }
            link.target = Array(target.joined(separator: "/").utf8)
        }
        let request = EntryRequest(
            components: components, relative: relative,
            header: EntryHeader(
                mode: 0o777, mtimeSeconds: header.mtimeSeconds, mtimeNanoseconds: header.mtimeNanoseconds,
                path: header.path),
            attributes: attributes)
        state = .storing(.link(request, link))
        return [.makeLink(request, link)]
    }

    /// A SPECIAL: its path checked as any entry's; a device refused (that entry alone) by a
    /// receiver that may not make devices.
    mutating func startSpecial(_ header: SpecialHeader) -> [ReceiverAction] {
        let attributes = takePendingAttributes()
        let type = header.type
        let components: [String]
        switch PathCheck.receivable(header.path) {
        case .failure(let refusal):
            return answer(
                .refused(.invalidPath, "invalid path: \(refusal.reason)"), path: PeerText.sanitized(header.path),
                isDirectory: false, size: nil, special: type)
        case .success(let checked): components = checked
        }
        let relative = components.joined(separator: "/")
        guard !type.isDevice || settings.devices else {
            return answer(
                .refused(.other, "a \(type.name): this receiver makes no devices (receive --devices, as root)"),
                path: relative, isDirectory: false, size: nil, special: type)
        }
        let request = EntryRequest(
            components: components, relative: relative,
            header: EntryHeader(
                mode: header.mode & 0o7777, mtimeSeconds: header.mtimeSeconds,
                mtimeNanoseconds: header.mtimeNanoseconds, path: header.path),
            attributes: attributes)
        state = .storing(.special(request, header))
        return [.makeSpecial(request, header)]
    }

    /// COPY: blocks of the basis, checked against it and against the size announced.
    mutating func copied(_ file: IncomingFile, index: UInt64, count: UInt32) -> [ReceiverAction] {
        guard let basisSize = file.basisSize else { return violation("COPY in a file with no basis") }
        let blockSize = UInt64(Delta.blockSize(forBasis: basisSize))
        let (offset, overflow) = index.multipliedReportingOverflow(by: blockSize)
        guard !overflow, offset < basisSize else {
            return violation("COPY of block \(index), past the end of the old file (\(basisSize) bytes)")
        }
        let length = min(UInt64(count) * blockSize, basisSize - offset)
        let (allowed, actions) = decodedBytes(length)
        return allowed ? [.deliverCopy(offset: offset, length: length)] : actions
    }

    // MARK: Data

    /// The file's data path decoded `count` more bytes: may they be written? When not, the
    /// file has been answered (too large, more than announced) and the actions say so.
    mutating func decoded(_ count: Int) -> (write: Bool, actions: [ReceiverAction]) {
        decodedBytes(UInt64(count))
    }

    mutating func decodedBytes(_ count: UInt64) -> (write: Bool, actions: [ReceiverAction]) {
        // The file is taken out of its state and put back counted: moved, not copied.
        var file: IncomingFile
        let finishing: Bool
        if let taken = state.takeFile(.receiving) {
            file = taken
            finishing = false
        } else if let taken = state.takeFile(.finishing) {
            file = taken
            finishing = true
        } else {
            return (false, [])
        }
        let (newTotal, overflow) = file.total.addingReportingOverflow(count)
        let size = file.expected
        // Past `Wire.maxFileSize` from the file's start no offset holds the bytes: that is the
        // limit of a file of unknown size (a known one's is no more, `sizeRejection`).
        let room = Wire.maxFileSize - min(file.range?.start ?? 0, Wire.maxFileSize)
        let rejection: EntryRejection
        if let size, overflow || newTotal > size {
            rejection = .failed(.data, "more data than announced (\(size) bytes)")
        } else if overflow || newTotal > room {
            rejection = .failed(.data, "more data than a file can hold")
        } else if let maxSize = settings.maxSize, newTotal > maxSize {
            rejection = .refused(.tooLarge, "too large: more than \(maxSize) bytes")
        } else {
            file.received = newTotal - file.offset
            state = finishing ? .finishing(file) : .receiving(file)
            return (true, [])
        }
        state = finishing ? .idle : .discarding
        return (
            false,
            [.dropFile(keep: false)]
                + answer(rejection, path: file.request.relative, isDirectory: false, size: size, resumed: file.offset)
        )
    }
}
