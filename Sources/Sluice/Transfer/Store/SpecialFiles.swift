import CSluiceLinux

#if canImport(Glibc)
    import Glibc
#endif

/// The receiver's side of devices, FIFOs and sockets (`specials`): made with `mknodat` under a
/// temporary name beneath the destination, given their owner, mode and mtime, then moved to
/// their name as a link is; and compared with a CHECK. Nothing here opens one: a FIFO opened
/// would wait for a writer, a device opened could do anything its driver does.
extension ReceiverStore {
    /// Creates the device, FIFO or socket `request` names (never following a link on the way,
    /// never over an existing name without `overwrite`, never over a directory). The machine
    /// refused a device already where the receiver may not make one; the kernel refuses it too.
    func makeSpecial(_ request: EntryRequest, _ special: SpecialHeader, overwrite: Bool) -> EntryRejection? {
        placeEntry(request, overwrite: overwrite) { parent, temporary, display in
            let type = special.type
            let device = dev_t(type.isDevice ? sluice_makedev(special.major, special.minor) : 0)
            let mtime = timespec(tv_sec: Int(special.mtimeSeconds), tv_nsec: Int(special.mtimeNanoseconds))
            let made = Result { () throws(SluiceError) in
                try syscallValue("mknod", display) {
                    mknodat(parent, temporary, mode_t(type.rawValue) | 0o600, device)
                }
                if let owner = request.attributes.owner {
                    let (uid, gid) = OwnerNames.shared.local(owner)
                    try syscallValue("lchown", display) {
                        fchownat(parent, temporary, uid, gid, AT_SYMLINK_NOFOLLOW)
                    }
                }
                // After the owner: a change of owner clears setuid and setgid (never kept here).
                try syscallValue("chmod", display) {
                    Self.changeMode(parent, temporary, destination.permissions(request.header.mode))
                }
                try syscallValue("utimensat", display) {
                    utimensat(parent, temporary, [timespec(tv_sec: 0, tv_nsec: utimeNow), mtime], AT_SYMLINK_NOFOLLOW)
                }
            }
            if case .failure(let error) = made { return .failed(.io, error.description) }
            return nil
        }
    }

    /// Sets the mode of `name` in `parent`, not following a link; where the C library cannot
    /// (`AT_SYMLINK_NOFOLLOW` needs `/proc`), following one, as a file's mode is set by name.
    private static func changeMode(_ parent: Int32, _ name: String, _ mode: mode_t) -> Int32 {
        let rc = fchmodat(parent, name, mode, AT_SYMLINK_NOFOLLOW)
        guard rc != 0, errno == EOPNOTSUPP || errno == ENOSYS else { return rc }
        return fchmodat(parent, name, mode, 0)
    }

    /// A CHECK of a special against what is at `name` (status `st`): the same when it is of
    /// the same type and, a device, has the same numbers (a difference of numbers is told as
    /// one of size, as rsync does). Its mode and mtime, when they differ, are set here (with
    /// `CheckFlags.apply`) and told with `same`, as a file's mode is.
    func checkSpecial(in parent: Int32, _ name: String, _ st: stat, _ check: CheckHeader) -> HaveAnswer {
        typealias D = Wire.HaveDifference
        guard let type = Wire.SpecialType(mode: check.mode), UInt32(st.st_mode & S_IFMT) == type.rawValue else {
            return HaveAnswer(status: .differs, differences: D.kind)
        }
        if type.isDevice && SpecialFiles.numbers(of: st) != check.size {
            return HaveAnswer(status: .differs, differences: D.size)
        }
        var differences: UInt16 = 0
        let mode = destination.permissions(check.mode)
        if st.st_mode & 0o7777 != mode { differences |= D.mode }
        let mtime = timespec(tv_sec: Int(check.mtimeSeconds), tv_nsec: Int(check.mtimeNanoseconds))
        if st.st_mtim.tv_sec != mtime.tv_sec || st.st_mtim.tv_nsec != mtime.tv_nsec { differences |= D.mtime }
        if check.applies {
            if differences & D.mode != 0 { _ = Self.changeMode(parent, name, mode) }
            if differences & D.mtime != 0 {
                _ = utimensat(parent, name, [timespec(tv_sec: 0, tv_nsec: utimeNow), mtime], AT_SYMLINK_NOFOLLOW)
            }
        }
        return HaveAnswer(status: .same, differences: differences)
    }
}

/// Device numbers, as the sender reads them and the tests make them (the C library's
/// `major`, `minor` and `makedev` are macros Swift cannot call).
enum SpecialFiles {
    /// `st`'s device numbers as CHECK carries them: major << 32 | minor.
    static func numbers(of st: stat) -> UInt64 {
        let (major, minor) = split(UInt64(st.st_rdev))
        return UInt64(major) << 32 | UInt64(minor)
    }

    /// A device number's major and minor.
    static func split(_ device: UInt64) -> (major: UInt32, minor: UInt32) {
        (sluice_major(device), sluice_minor(device))
    }

    /// The device number of `major` and `minor`.
    static func device(major: UInt32, minor: UInt32) -> UInt64 {
        sluice_makedev(major, minor)
    }
}
