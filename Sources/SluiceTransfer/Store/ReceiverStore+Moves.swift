import Sluice

#if canImport(Glibc)
    import Glibc
#endif

extension ReceiverStore {
    /// MOVE (`send --watch`): renames `from` to `to`, both inside the destination, each
    /// parent opened without following a link (`Destination.openParent`: what leads to `to`
    /// is created where missing). Refused when nothing is at `from`, when a directory is at
    /// `to`, when a directory would replace anything, or when something is at `to` and
    /// `replace` is off (the receiver's consent, `receive --sync`). The rename is one
    /// `renameat`: the receiver's tree shows the entry at one name or the other, never both
    /// or neither.
    func move(from: [String], to: [String], replace: Bool) -> EntryRejection? {
        let (fromRelative, toRelative) = (from.joined(separator: "/"), to.joined(separator: "/"))
        guard let fromName = from.last, let toName = to.last else {
            return .refused(.invalidPath, "invalid path: empty path")
        }
        let source: Int32
        switch destination.openParent(of: from, relative: fromRelative) {
        case .failure(let rejection): return rejection
        case .success(let (fd, _)): source = fd
        }
        defer { closeDescriptor(source) }
        guard let kind = Destination.existing(source, fromName) else {
            return .failed(.io, "\(quoted(destination.display(fromRelative))): nothing there to move")
        }
        let target: Int32
        switch destination.openParent(of: to, relative: toRelative) {
        case .failure(let rejection): return rejection
        case .success(let (fd, _)): target = fd
        }
        defer { closeDescriptor(target) }
        if let there = Destination.existing(target, toName) {
            if there == S_IFDIR || kind == S_IFDIR {
                return .refused(
                    .exists, "exists (\(there == S_IFDIR ? "a directory" : "a file")): not replaced by a move")
            }
            if !replace { return .refused(.exists, ReceiverMachine.replacingRefused) }
        }
        guard renameat(source, fromName, target, toName) == 0 else {
            let reason = Errno.current
            return .failed(
                .io,
                "rename \(quoted(destination.display(fromRelative))) to "
                    + "\(quoted(destination.display(toRelative))): \(reason)")
        }
        return nil
    }

    /// REMOVE (`send --watch --delete`): removes `components` (a directory with everything
    /// in it, deepest first), never following a link, never outside the destination. Nothing
    /// there is no failure (it is gone already). Returns the relative paths removed and the
    /// first failure if any.
    func remove(_ components: [String]) -> ([String], EntryRejection?) {
        let relative = components.joined(separator: "/")
        guard let name = components.last else { return ([], .refused(.invalidPath, "invalid path: empty path")) }
        let parent: Int32
        if components.count > 1 {
            parent = Destination.openBeneath(destination.fd, components.dropLast().joined(separator: "/"))
            // No parent: nothing to remove (or a link on the way, which is not followed).
            guard parent >= 0 else { return ([], nil) }
        } else {
            parent = dup(destination.fd)
            guard parent >= 0 else { return ([], .failed(.io, "dup: \(Errno.current)")) }
        }
        defer { closeDescriptor(parent) }
        guard let kind = Destination.existing(parent, name) else { return ([], nil) }
        var walk = PruneWalk(named: [], dryRun: false)
        walk.remove(parent, name, relative, isDirectory: kind == S_IFDIR)
        return (walk.gone, walk.failure)
    }
}
