import Sluice

/// The receiver machine's side of `watch`: MOVE, a rename within the receiver's directory,
/// and REMOVE, one path removed with what it holds. Each is answered as an entry (STORED,
/// REFUSED or FAILED, in the order entries were announced); REMOVE reports each path it
/// removed with GONE first, as PRUNE does.
///
/// Both paths of a MOVE are checked as any path inside the directory (`PathCheck.receivable`:
/// nothing absolute, no `..`, no partial's name); a move of a directory into itself, or onto
/// its own name, is refused here; the store refuses a move over a directory, or over anything
/// without the receiver's consent to replace (`receive --sync`), and never follows a link
/// on the way. REMOVE needs the receiver's consent to remove (`receive --delete`), as PRUNE
/// does: without it, it is refused and nothing is touched.
extension ReceiverMachine {
    /// MOVE `from` → `to` arrived between entries.
    mutating func startMove(from: [UInt8], to: [UInt8]) -> [ReceiverAction] {
        guard settings.sync else { return violation("MOVE: this receiver does not offer watch") }
        guard pendingAttributes.isEmpty else { return violation("XATTR, OWNER or TOKEN before a MOVE") }
        entriesAnnounced += 1
        let shown = PeerText.sanitized(to)
        let components: (from: [String], to: [String])
        switch (PathCheck.receivable(from), PathCheck.receivable(to)) {
        case (.failure(let refusal), _), (_, .failure(let refusal)):
            return answer(
                .refused(.invalidPath, "invalid path: \(refusal.reason)"), path: shown, isDirectory: false, size: nil)
        case (.success(let source), .success(let destination)):
            components = (source, destination)
        }
        if components.from == components.to {
            return answer(.refused(.invalidPath, "moved onto its own name"), path: shown, isDirectory: false, size: nil)
        }
        if components.to.starts(with: components.from) {
            return answer(
                .refused(.invalidPath, "a directory cannot be moved into itself"), path: shown, isDirectory: false,
                size: nil)
        }
        let relative = components.to.joined(separator: "/")
        let request = EntryRequest(
            components: components.to, relative: relative,
            header: EntryHeader(mode: 0, mtimeSeconds: 0, mtimeNanoseconds: 0, path: to))
        state = .storing(.move(request, from: components.from))
        return [.move(from: components.from, to: components.to, replace: mayReplace)]
    }

    /// REMOVE `path` arrived between entries.
    mutating func startRemove(_ path: [UInt8]) -> [ReceiverAction] {
        guard settings.sync else { return violation("REMOVE: this receiver does not offer watch") }
        guard peerDeletes else { return violation("REMOVE: the sender did not list delete") }
        guard pendingAttributes.isEmpty else { return violation("XATTR, OWNER or TOKEN before a REMOVE") }
        entriesAnnounced += 1
        let shown = PeerText.sanitized(path)
        guard mayRemove else {
            return answer(.refused(.other, Self.removingRefused), path: shown, isDirectory: false, size: nil)
        }
        switch PathCheck.receivable(path) {
        case .failure(let refusal):
            return answer(
                .refused(.invalidPath, "invalid path: \(refusal.reason)"), path: shown, isDirectory: false, size: nil)
        case .success(let components):
            let request = EntryRequest(
                components: components, relative: components.joined(separator: "/"),
                header: EntryHeader(mode: 0, mtimeSeconds: 0, mtimeNanoseconds: 0, path: path))
            state = .storing(.remove(request))
            return [.remove(components)]
        }
    }
}
