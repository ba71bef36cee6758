import Sluice

/// What a `TransferSender` keeps of `send --watch` (`TransferSender+Watch`): whether the
/// session stays open after its first pass, and who hears of its course.
struct SenderWatch {
    /// The session stays open once the walk has ended, for the changes fed to it.
    var enabled = false
    /// The first pass is over (its entries and PRUNEs answered): said once.
    var passDone = false
    /// Called once the first pass is over: changes may be fed from now on.
    var onPassDone: (() -> Void)?
    /// Called as each MOVE or REMOVE is answered (or settled here).
    var onOperated: ((TreeOperation.Kind, TransferOutcome) -> Void)?
}

/// `send --watch`: the session stays open after the first pass (the walk of the sources, as
/// `--sync` sends it), and what changes is fed to it as it happens, on the same connection:
/// entries to check and send (`watchArrived`), renames (`watchMove`) and removals
/// (`watchRemove`), each in the order fed. Goodbye waits until `stopWatching`, then for
/// every answer.
extension TransferSender {
    /// Keeps the session open after the walk (set before `start`).
    var watching: Bool {
        get { watch.enabled }
        set { watch.enabled = newValue }
    }

    /// The first pass's entries and PRUNEs are all answered.
    var firstPassDone: Bool { watch.passDone }

    /// Entries listed by the watcher join the transfer: checked, and sent where they differ.
    func watchArrived(_ arrived: [OutgoingEntry]) {
        guard !ended, !machine.listed else { return }
        take(arrived, last: false)
        advance()
    }

    /// A rename within the tree: MOVE once the entries fed before it are answered.
    func watchMove(from: String, to: String) {
        guard !ended, !machine.listed else { return }
        machine.queue(.move(from: from, to: to))
        advance()
    }

    /// A removal (with `delete`): REMOVE once the entries fed before it are answered.
    func watchRemove(_ path: String) {
        guard !ended, !machine.listed else { return }
        machine.queue(.remove(path))
        advance()
    }

    /// No more changes: goodbye once everything fed is answered.
    func stopWatching() {
        guard !ended, !machine.listed else { return }
        take([], last: true)
        advance()
    }

    /// After the machine went as far as it may: says when the first pass is over.
    func noteWatch() {
        guard watch.enabled, !watch.passDone, !ended, machine.firstPassDone else { return }
        watch.passDone = true
        watch.onPassDone?()
    }

    /// A MOVE or REMOVE was answered.
    func operated(_ operation: TreeOperation, _ outcome: TransferOutcome) {
        watch.onOperated?(operation.kind, outcome)
    }
}
