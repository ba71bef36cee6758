import Sluice

/// The sender machine's outcomes (an entry opened, its data ended, a read failed, the
/// connection's events) and how a session ends.
extension SenderMachine {
    // MARK: Outcomes

    mutating func handle(_ outcome: SenderOutcome) -> [SenderAction] {
        noted(handleUnnoted(outcome))
    }

    mutating func handleUnnoted(_ outcome: SenderOutcome) -> [SenderAction] {
        switch (state, outcome) {
        case (.ended, _):
            return []
        case (_, .connectionFailed(let error)):
            return end(.connectionFailed(error))
        case (_, .cancelled):
            return end(.cancelled)
        case (_, .peerClosed):
            return end(.closedEarly("the receiver closed the connection"))

        case (.opening(let index), .entryOpened(let opened, let result)) where opened == index:
            switch result {
            case .failure(let failure):
                state = .ready
                settled[index] = true
                return [.settle(index, .failed(reason: failure.reason, kind: .io))]
            case .success(let info):
                let entry = entries[index]
                if case .range(_, let range, let planned) = work[next - 1] {
                    guard info.size == planned else {
                        state = .ready
                        settled[index] = true
                        let reason = "the file changed size since it was listed (\(planned) bytes)"
                        return [.settle(index, .failed(reason: reason, kind: .io))]
                    }
                    let resumable = settings.resume && offers.resume
                    var flags = Wire.FileFlags.sizeKnown
                    if resumable { flags |= Wire.FileFlags.resumable }
                    if replaces(index) { flags |= Wire.FileFlags.replace }
                    let header = EntryHeader(
                        flags: flags, size: planned, mode: info.mode, mtimeSeconds: info.mtimeSeconds,
                        mtimeNanoseconds: info.mtimeNanoseconds, path: Array(entry.relative.utf8))
                    unanswered.append(index)
                    let token = resumable ? tokenMessage(header) : []
                    var file = CurrentFile(
                        index: index, size: planned, resumable: resumable, compressed: false, range: range)
                    file.token = !token.isEmpty
                    state = .awaitingAccept(file)
                    return attributeMessages(index) + token + [.send(.range(RangeHeader(range: range, entry: header)))]
                }
                // Resuming a small file would save less than the round trip for ACCEPT costs; a
                // larger one goes eager and resumable where the receiver can say it holds part.
                // To a receiver that takes BATCH, files of up to `Wire.wholeLimit` bytes go whole.
                let wholeLimit =
                    offers.batch ? Wire.wholeLimit : Wire.eagerLimit
                let small = info.size.map { $0 <= wholeLimit } ?? false
                let delta = sendsDelta(index, size: info.size)
                let eager =
                    !delta && settings.eager && offers.eager
                    && (small || offers.eagerResume)
                    && !announcedAgain.contains(index)
                // A delta is resumable where the receiver continues one (`delta-resume`).
                let resumable =
                    !(eager && small) && settings.resume && entry.seekable && info.size != nil
                    && offers.resume
                    && (!delta || offers.deltaResume)
                let compressed = settings.compress && offers.deflate
                var flags: UInt8 = 0
                if info.size != nil { flags |= Wire.FileFlags.sizeKnown }
                if compressed { flags |= Wire.FileFlags.compressed }
                if resumable { flags |= Wire.FileFlags.resumable }
                if eager { flags |= Wire.FileFlags.eager }
                let links = offers.links
                if entry.linked && links { flags |= Wire.FileFlags.linked }
                let sparse =
                    !delta && entry.sparse && entry.seekable && !compressed && info.size != nil
                    && offers.holes
                if sparse { flags |= Wire.FileFlags.sparse }
                if replaces(index) { flags |= Wire.FileFlags.replace }
                if delta { flags |= Wire.FileFlags.delta }
                let header = EntryHeader(
                    flags: flags, size: info.size ?? 0, mode: info.mode, mtimeSeconds: info.mtimeSeconds,
                    mtimeNanoseconds: info.mtimeNanoseconds, path: Array(entry.relative.utf8))
                unanswered.append(index)
                if eager && resumable { eagerResumable[index] = info.size ?? 0 }
                let token = resumable ? tokenMessage(header) : []
                let file = CurrentFile(
                    index: index, size: info.size, resumable: resumable, compressed: compressed, sparse: sparse,
                    delta: delta, token: !token.isEmpty)
                let announce = attributeMessages(index) + token + [.send(.file(header))]
                guard eager else {
                    state = .awaitingAccept(file)
                    return announce
                }
                state = .sending(file)
                return announce + [.startData(index: index, offset: 0, compressed: compressed, range: nil)]
            }
        case (.sending(let file), .rangeEnded(let length, let digest, let fileDigest, let held)) where file.range != nil:
            if length != file.range?.length {
                localFailures[file.index] = "the file changed size while being sent"
            }
            state = .ready
            return [.stopData(file.index)] + heldMessage(file, held)
                + [.send(.rangeEnd(length: length, digest: digest, fileDigest: fileDigest))]
        case (.sending(let file), .dataEnded(let size, let digest, let held)) where file.range == nil:
            if let announced = file.size, announced != size {
                // The file changed size while being sent: END says what was sent; the receiver
                // refuses the mismatch.
                localFailures[file.index] = "the file changed size while being sent"
            }
            state = .ready
            return [.stopData(file.index)] + heldMessage(file, held) + [.send(.end(size: size, digest: digest))]
        case (.sending(let file), .readFailed(let reason)):
            localFailures[file.index] = reason
            state = .ready
            return [.stopData(file.index), .send(.abort(reason: reason))]

        case (.awaitingMagic, _), (.awaitingHello, _), (.joining, _), (.ready, _), (.opening, _), (.awaitingAccept, _),
            (.sending, _), (.byeSent, _):
            assertionFailure("sender machine: outcome \(outcome) in state \(state)")
            return end(
                .connectionFailed(
                    SluiceError(
                        .invalidArgument, operation: "send", detail: "internal: unexpected \(outcome) in state \(state)"
                    )))
        }
    }

    /// Notes an entry settled other than stored: PRUNE then removes nothing.
    mutating func noted(_ actions: [SenderAction]) -> [SenderAction] {
        for case .settle(_, let outcome) in actions where outcome != .stored { anyNotStored = true }
        return actions
    }

    /// HELD before a resumed file's END, when `checksHeld`. Its session computes the digest for
    /// every such file (an internal invariant: without it the receiver would end the session).
    func heldMessage(_ file: CurrentFile, _ held: [UInt8]?) -> [SenderAction] {
        guard file.held > 0, checksHeld, !file.vouched else { return [] }
        guard let held else {
            assertionFailure("sender machine: no held digest for a resumed file")
            return []
        }
        return [.send(.held(digest: held))]
    }

    // MARK: Ending

    /// The decoder found the bytes break the protocol.
    mutating func violated(_ reason: String) -> [SenderAction] {
        if case .ended = state { return [] }
        return violation(reason)
    }

    mutating func violation(_ reason: String) -> [SenderAction] {
        [.send(.error(reason: reason))] + end(.violation(reason))
    }

    mutating func end(_ how: SessionEnd) -> [SenderAction] {
        var actions: [SenderAction] = []
        switch state {
        case .sending(let file), .awaitingAccept(let file):
            actions.append(.stopData(file.index))
        case .awaitingMagic, .awaitingHello, .joining, .ready, .opening, .byeSent, .ended:
            break
        }
        state = .ended(how)
        actions.append(.end(how))
        return actions
    }
}
