import CSluiceLinux
import Sluice

#if canImport(Glibc)
    import Glibc
#endif

/// The receiver's side of devices, FIFOs and sockets (`specials`): made with `mknodat` under a
/// temporary name beneath the destination, given their owner, mode and mtime, then moved to
/// their name as a link is; and compared with a CHECK. Nothing here opens one for reading or
/// writing: a FIFO opened would wait for a writer, a device opened could do anything its driver
/// does. Their owner, mode and mtime are set through `EntryHandle` (`O_PATH`, which opens
/// neither), never by name.
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
                // Its owner, mode and mtime set on the entry made, held (`EntryHandle`).
                let handle = try EntryHandle.open(parent, temporary, display: display).get()
                guard UInt32(handle.type) == type.rawValue else { throw EntryHandle.changed(display) }
                if let owner = request.attributes.owner {
                    let (uid, gid) = OwnerNames.shared.local(owner)
                    try handle.changeOwner(uid, gid)
                }
                // After the owner: a change of owner clears setuid and setgid (never kept here).
                try handle.changeMode(destination.permissions(request.header.mode))
                try handle.setTimes([timespec(tv_sec: 0, tv_nsec: utimeNow), mtime])
            }
            if case .failure(let error) = made { return .failed(.io, error.description) }
            return nil
        }
    }

    /// A CHECK of a special against what is at `name` (status `st`): the same when it is of
    /// the same type and, a device, has the same numbers (a difference of numbers is told as
    /// one of size, as rsync does). Its mode and mtime, when they differ, are set here (with
    /// `CheckFlags.apply`) and told with `same`, as a file's mode is: on the entry `st`
    /// describes, held without following a link (`EntryHandle`), never on what another session
    /// put at the name since (then it is told as differing, and sent again).
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
        if check.applies && differences != 0 {
            let applied = Result { () throws(SluiceError) in
                let handle = try EntryHandle.open(parent, name, display: destination.display(name), expecting: st).get()
                if differences & D.mode != 0 { try handle.changeMode(mode) }
                if differences & D.mtime != 0 { try handle.setTimes([timespec(tv_sec: 0, tv_nsec: utimeNow), mtime]) }
            }
            if case .failure = applied { return HaveAnswer(status: .differs, differences: differences) }
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
