import Sluice

/// The sender machine's side of what the receiver says: HELLO, ACCEPT, the answers to entries
/// (in the order they were announced), HAVE and the rest.
extension SenderMachine {
    // MARK: Messages

    mutating func received(_ item: FrameDecoder.Item) -> [SenderAction] {
        noted(receivedUnnoted(item))
    }

    mutating func receivedUnnoted(_ item: FrameDecoder.Item) -> [SenderAction] {
        if case .ended = state { return [] }
        switch item {
        case .magic:
            guard case .awaitingMagic = state else { return violation("a second magic") }
            state = .awaitingHello
            return []
        case .data, .batchEnd:
            // The decoder lets no DATA or BATCH through from a receiver; kept explicit all the same.
            return violation("DATA is not a message a receiver sends")
        case .frame(let frame):
            return received(frame)
        }
    }

    mutating func received(_ frame: Frame) -> [SenderAction] {
        switch (state, frame) {
        case (.ended, _):
            return []
        case (.awaitingMagic, _):
            return violation("\(frame.type.name) before the magic")
        case (_, .error(let reason)):
            return end(.peerError(reason))

        case (.awaitingHello, .hello(let version, let capabilities)):
            guard version >= 1 else { return violation("unsupported protocol version \(version)") }
            guard let agreed = TransferDigest.agreed(offered: settings.digests, peer: capabilities) else {
                return violation("no common digest (sha256 required)")
            }
            digest = agreed
            peerCapabilities = capabilities
            if syncing { checks = IndexedWindow(entriesToCheck()) }
            guard let join else {
                state = .ready
                return []
            }
            guard capabilities.contains(Wire.Capability.streams) else {
                guard let fallback else { return violation("the receiver does not offer streams") }
                work = IndexedWindow(fallback)
                self.join = nil
                state = .ready
                return [.streamsDeclined]
            }
            guard join.group == nil || capabilities.contains(Wire.Capability.groups) else {
                return violation("the receiver does not offer task groups (--group)")
            }
            state = .joining
            return [.send(.join(join))]
        case (.joining, .joined):
            state = .ready
            return [.joined]
        case (.awaitingAccept(let file), .signatures(let batch)) where file.delta:
            return [.takeSignatures(file.index, batch)]
        case (_, .signatures):
            return violation("SIGS for no file sent as a delta")
        case (_, .gone(let path)):
            if let actions = operationGone(path) { return actions }
            guard let root = pruning.first else { return violation("GONE for no PRUNE") }
            let prefix = Array(prunePath(root).utf8) + [UInt8(ascii: "/")]
            guard path.starts(with: prefix), path.count > prefix.count else {
                return violation("GONE for a path outside the directory pruned")
            }
            return [.gone(root, PeerText.sanitized(path))]
        case (_, .have(let answer)):
            guard !awaitingHave.isEmpty else { return violation("HAVE for no CHECK") }
            let known = syncsAttributes ? Wire.HaveDifference.withAttributes : Wire.HaveDifference.basic
            guard answer.differences & ~known == 0 else {
                return violation("HAVE with differences \(answer.differences) (sync-attributes not agreed)")
            }
            haves[awaitingHave.removeFirst()] = answer
            return []
        case (_, .joined):
            return violation("unexpected JOINED")
        case (.awaitingHello, _):
            return violation("\(frame.type.name) before HELLO")
        case (_, .hello):
            return violation("a second HELLO")

        case (_, .accept(let offset, _)) where unanswered.first.map { eagerResumable[$0] != nil } ?? false:
            // Vouched or not, the file is announced again; its second ACCEPT says.
            return heldPart(of: unanswered[0], offset: offset)
        case (.awaitingAccept(let file), .accept(let offset, let vouched)):
            guard unanswered.last == file.index else { return violation("unexpected ACCEPT") }
            guard file.range != nil || offset == 0 || (file.resumable && offset <= (file.size ?? 0)) else {
                return violation("ACCEPT offset \(offset) out of range")
            }
            if let range = file.range {
                guard offset == 0 || (file.resumable && offset <= range.length) else {
                    return violation("ACCEPT offset \(offset) out of the range")
                }
            }
            guard !vouched || (file.token && offset > 0) else {
                return violation("ACCEPT vouching for held bytes of a file sent without a TOKEN, or none held")
            }
            var sending = file
            sending.held = offset
            sending.vouched = vouched
            state = .sending(sending)
            return [.startData(index: file.index, offset: offset, compressed: file.compressed, range: file.range)]
        case (_, .accept):
            return violation("unexpected ACCEPT")

        case (_, .stored), (_, .refused), (_, .failed):
            return answered(frame)

        case (.byeSent, .bye):
            guard unanswered.isEmpty else { return violation("goodbye with entries unanswered") }
            return end(.goodbye)
        case (_, .bye):
            return violation("goodbye before the sender's")

        case (_, .file), (_, .directory), (_, .end), (_, .abort), (_, .join), (_, .range), (_, .rangeEnd),
            (_, .held), (_, .link), (_, .hole), (_, .xattr), (_, .owner), (_, .check), (_, .prune), (_, .copy),
            (_, .token), (_, .special), (_, .batch), (_, .move), (_, .remove):
            return violation("\(frame.type.name) is not a message a receiver sends")
        }
    }

    /// ACCEPT for a file sent eager and resumable: the receiver holds `offset` of its bytes and
    /// skips the data sent. Its data stops (ABORT ends what the receiver skips) and it is
    /// announced next, not eager, to resume from what the receiver holds.
    mutating func heldPart(of index: Int, offset: UInt64) -> [SenderAction] {
        guard let size = eagerResumable[index], offset > 0, offset <= size else {
            return violation("ACCEPT offset \(offset) out of range for a file sent eagerly")
        }
        unanswered.removeFirst()
        eagerResumable[index] = nil
        announcedAgain.insert(index)
        work.insert(.entry(index), at: next)
        guard case .sending(let file) = state, file.index == index else { return [] }
        state = .ready
        return [.stopData(index), .send(.abort(reason: "the receiver holds part of the file: announced again"))]
    }

    /// STORED, REFUSED or FAILED: the answer to the oldest unanswered entry (or, once every
    /// entry is answered, to the oldest PRUNE).
    mutating func answered(_ frame: Frame) -> [SenderAction] {
        if let actions = operationAnswered(frame) { return actions }
        if unanswered.isEmpty, let root = pruning.first {
            pruning.removeFirst()
            let path = prunePath(root)
            if case .refused(_, let reason) = frame { return [.pruned(path, .refused(reason: reason))] }
            if case .failed(let code, let reason) = frame {
                return [.pruned(path, .failed(reason: reason, kind: code == .data ? .data : .io))]
            }
            return [.pruned(path, .stored)]
        }
        guard let index = unanswered.first else { return violation("an answer for no entry") }
        let outcome: TransferOutcome
        switch frame {
        case .stored:
            if case .sending(let file) = state, file.index == index {
                return violation("STORED before the end of the file")
            }
            if case .awaitingAccept(let file) = state, file.index == index {
                return violation("STORED before the file's data")
            }
            outcome = .stored
        case .refused(_, let reason):
            outcome = .refused(reason: reason)
        case .failed(let code, let reason):
            if let local = localFailures[index] {
                outcome = .failed(reason: local, kind: .io)
            } else {
                outcome = .failed(reason: reason, kind: code == .data ? .data : .io)
            }
        case .hello, .file, .directory, .end, .abort, .bye, .accept, .error, .join, .range, .rangeEnd, .joined,
            .held, .link, .hole, .xattr, .owner, .check, .have, .prune, .gone, .signatures, .copy, .token, .special,
            .batch, .move, .remove:
            return violation("\(frame.type.name) is not an answer")
        }
        if outcome != .stored { anyNotStored = true }
        // (Only a file with a second name to come is looked for there.)
        if outcome == .stored && entries[index].linked { stored.insert(index) }
        unanswered.removeFirst()
        eagerResumable[index] = nil
        var actions: [SenderAction] = [.settle(index, outcome)]
        settled[index] = true
        switch state {
        case .awaitingAccept(let file) where file.index == index:
            // Refused at the header.
            state = .ready
        case .sending(let file) where file.index == index:
            // Answered while its data was going out (refused as too large, a write failed):
            // stop, and tell the receiver the data ends here.
            actions += [.stopData(index), .send(.abort(reason: "answered by the receiver"))]
            state = .ready
        case .byeSent where unanswered.isEmpty:
            break
        case .awaitingMagic, .awaitingHello, .joining, .ready, .opening, .awaitingAccept, .sending, .byeSent, .ended:
            break
        }
        return actions
    }
}
