import Sluice

/// The receiver machine's outcomes (what its actions came to, and the connection's events),
/// its answers in the order entries were announced, and how a session ends.
extension ReceiverMachine {
    // MARK: Outcomes

    /// The outcome of an action, or an event of the connection. Decided on the outcome first,
    /// then on the state, read in place: a file's state is moved to the next (`takeFile`), never
    /// copied whole.
    mutating func handle(_ outcome: ReceiverOutcome) -> [ReceiverAction] {
        if case .ended = state { return [] }
        switch outcome {
        case .timedOut:
            return end(.timedOut)
        case .connectionFailed(let error):
            return end(.connectionFailed(error))
        case .cancelled:
            return end(.cancelled)
        case .peerClosed:
            let detail: String
            switch state {
            case .awaitingMagic, .awaitingHello: detail = "connection closed before the handshake"
            case .idle, .joining, .storing, .settling: detail = "connection closed without goodbye"
            case .receiving, .finishing, .committing, .discarding: detail = "connection closed in the middle of a file"
            case .ended: detail = "connection closed"
            }
            return end(.closedEarly(detail))
        case .stagedCommitted(let rejection):
            // A staged file's commit, once for every file received whole, answers whatever the state.
            if let actions = answerStaged(rejection) { return actions }
        case .pruned(let gone, let rejection):
            if let actions = pruned(gone, rejection) { return actions }
        case .transferJoined(let refusal):
            guard case .joining(let join) = state else { break }
            if let refusal { return violation(refusal) }
            joined = join
            state = .idle
            return [.send(.joined)]
        case .fileOpened(let result, let vouched):
            if let actions = fileOpened(result, vouched: vouched) { return actions }
        case .deltaOpened(let result, let held, let vouched):
            if let actions = deltaOpened(result, held: held, vouched: vouched) { return actions }
        case .directoryMade(let rejection):
            guard case .storing(.directory) = state, case .directory(let request)? = state.takePending() else { break }
            return answer(rejection, path: request.relative, isDirectory: true, size: nil)
        case .linkMade(let rejection):
            guard case .storing(.link) = state, case .link(let request, _)? = state.takePending() else { break }
            return answer(rejection, path: request.relative, isDirectory: false, size: nil, isLink: true)
        case .specialMade(let rejection):
            guard case .storing(.special) = state, case .special(let request, let header)? = state.takePending()
            else { break }
            return answer(rejection, path: request.relative, isDirectory: false, size: nil, special: header.type)
        case .dataFailed(let rejection):
            if let file = state.takeFile(.receiving) {
                state = .discarding
                return [.dropFile(keep: false)] + answerFile(file, rejection)
            }
            if let file = state.takeFile(.finishing) {
                return [.dropFile(keep: false)] + answerFile(file, rejection)
            }
        case .dataFinished:
            if let file = state.takeFile(.finishing) { return dataFinished(file) }
        case .committed(let rejection):
            if let file = state.takeFile(.committing) { return answerFile(file, rejection) }
        case .staged:
            guard let file = state.takeFile(.committing) else { break }
            guard file.range == nil else {
                state = .committing(file)
                break
            }
            queuedAnswers.append(.staged(file))
            return []
        case .rangeCommitted(let rejection, let fileStored, let resumed):
            guard let file = state.takeFile(.committing) else { break }
            guard file.range != nil else {
                state = .committing(file)
                break
            }
            // STORED for a range that is not the last says only that the range is in.
            return answer(
                rejection, path: file.request.relative, isDirectory: false, size: file.header.size,
                resumed: resumed ?? file.offset, rangeOnly: rejection == nil && !fileStored)
        case .directoriesSettled:
            if case .settling = state, queuedAnswers.isEmpty { return [.send(.bye)] + end(.goodbye) }
        case .flushFailed(let error):
            if case .settling = state {
                return [.send(.error(reason: error.description))] + end(.connectionFailed(error))
            }
        }
        // An outcome nobody asked for: a bug in the session, not the peer's doing. It ends this
        // session only.
        assertionFailure("receiver machine: outcome \(outcome) in state \(state)")
        return end(
            .connectionFailed(
                SluiceError(
                    .invalidArgument, operation: "receive", detail: "internal: unexpected \(outcome) in state \(state)")
            ))
    }

    /// `.fileOpened` for a FILE or RANGE the store opened (nil in another state).
    private mutating func fileOpened(_ result: Result<UInt64, EntryRejection>, vouched: Bool) -> [ReceiverAction]? {
        switch state {
        case .storing(.range):
            guard case .range(let request, let range)? = state.takePending() else { return nil }
            switch result {
            case .success(let offset):
                guard offset <= range.length else {
                    return [.dropFile(keep: false)]
                        + answer(
                            .failed(.io, "held partial data is larger than the range"), path: request.relative,
                            isDirectory: false, size: request.header.size)
                }
                var file = IncomingFile(request: request, offset: offset, range: range)
                file.vouched = vouched && offset > 0 && checksHeld
                let accepted = file.vouched
                state = .receiving(file)
                return goAhead(offset, vouched: accepted)
            case .failure(let rejection):
                return answer(rejection, path: request.relative, isDirectory: false, size: request.header.size)
            }
        case .storing(.file):
            guard case .file(let request)? = state.takePending() else { return nil }
            switch result {
            case .success(let offset):
                let header = request.header
                guard offset == 0 || (header.sizeKnown && offset <= header.size) else {
                    return [.dropFile(keep: false)]
                        + refuseAtHeader(
                            header, .failed(.io, "held partial data is larger than the file"), path: request.relative)
                }
                guard offset == 0 || !header.eager else {
                    guard header.resumable else {
                        // The store resumes only resumable files.
                        return [.dropFile(keep: false)]
                            + refuseAtHeader(
                                header, .failed(.io, "internal: held partial data for a file sent eagerly"),
                                path: request.relative)
                    }
                    // Part of it is here: the sender is told how much (`eager-resume`) and
                    // announces it again; the data it sent meanwhile is skipped, the partial kept.
                    // ACCEPT answers this announcement; the next one is answered as any other.
                    state = .discarding
                    entriesAnswered += 1
                    return [.dropFile(keep: true)] + goAhead(offset)
                }
                var file = IncomingFile(request: request, offset: offset)
                file.vouched = vouched && offset > 0 && checksHeld
                let (eager, accepted) = (header.eager, file.vouched)
                state = .receiving(file)
                // An eager file's data is already on its way: no go-ahead.
                return eager ? [] : goAhead(offset, vouched: accepted)
            case .failure(let rejection):
                return refuseAtHeader(request.header, rejection, path: request.relative)
            }
        case .awaitingMagic, .awaitingHello, .idle, .joining, .storing, .receiving, .finishing, .committing,
            .discarding, .settling, .ended:
            return nil
        }
    }

    /// `.deltaOpened` for a FILE flagged delta (nil in another state).
    private mutating func deltaOpened(_ result: Result<UInt64?, EntryRejection>, held: UInt64, vouched: Bool)
        -> [ReceiverAction]?
    {
        guard case .storing(.file(let request)) = state, request.header.delta else { return nil }
        state = .idle
        switch result {
        case .failure(let rejection):
            return refuseAtHeader(request.header, rejection, path: request.relative)
        case .success(let basisSize):
            // Held: the file rebuilt so far by an interrupted delta, a prefix of the new file
            // whatever basis it was rebuilt from (its digest is checked as a resumed file's).
            guard held == 0 || (request.header.resumable && held <= request.header.size) else {
                return [.dropFile(keep: false)]
                    + refuseAtHeader(
                        request.header, .failed(.io, "held partial data is larger than the file"),
                        path: request.relative)
            }
            var file = IncomingFile(request: request, offset: held)
            file.basisSize = basisSize
            file.vouched = vouched && held > 0 && checksHeld
            state = .receiving(file)
            return goAhead(held, vouched: file.vouched)
        }
    }

    /// `.dataFinished` for the file whose END came (its state taken): committed if it is the
    /// size announced and the size END says.
    private mutating func dataFinished(_ file: IncomingFile) -> [ReceiverAction] {
        if let expected = file.expected, file.total != expected {
            return [.dropFile(keep: false)]
                + answerFile(file, .failed(.data, "size mismatch: announced \(expected) bytes, received \(file.total)"))
        }
        if file.endSize != file.total {
            return [.dropFile(keep: false)]
                + answerFile(
                    file, .failed(.data, "size mismatch: sender says \(file.endSize) bytes, received \(file.total)"))
        }
        let action: ReceiverAction =
            file.range != nil
            ? .commitRange(digest: file.endDigest, fileDigest: file.endFileDigest, held: file.heldDigest)
            : .commitFile(digest: file.endDigest, held: file.heldDigest)
        state = .committing(file)
        return [action]
    }

    /// `.pruned`: PRUNE's, REMOVE's or MOVE's outcome (nil in another state).
    private mutating func pruned(_ gone: [String], _ rejection: EntryRejection?) -> [ReceiverAction]? {
        guard case .storing = state, let pending = state.takePending() else { return nil }
        switch pending {
        case .prune(let request):
            // A path too long for a message (a tree made deeper here than a sender can send)
            // is reported in the log, not to the sender.
            return Self.goneMessages(gone) + answer(rejection, path: request.relative, isDirectory: true, size: nil)
        case .remove(let request):
            return Self.goneMessages(gone) + answer(rejection, path: request.relative, isDirectory: false, size: nil)
        case .move(let request, _):
            return answer(rejection, path: request.relative, isDirectory: false, size: nil)
        case .directory, .link, .special, .file, .range:
            state = .storing(pending)
            return nil
        }
    }

    /// GONE for each path removed whose name fits a message.
    private static func goneMessages(_ gone: [String]) -> [ReceiverAction] {
        gone.filter { $0.utf8.count <= Wire.maxPathBytes }.map { .send(.gone(path: Array($0.utf8))) }
    }

    // MARK: Answers and ending

    /// The first staged file is committed (or failed): its answer, and those queued behind it
    /// up to the next staged file. Nil when no staged file waits (a bug in the session).
    private mutating func answerStaged(_ rejection: EntryRejection?) -> [ReceiverAction]? {
        guard let file = queuedAnswers.popStaged() else { return nil }
        var actions = answerFile(file, rejection, queued: false)
        while let ready = queuedAnswers.popReady() {
            actions += ready
        }
        return actions
    }

    /// ACCEPT: the go-ahead for a file's data, or for a file sent eagerly, how much of it is
    /// held. It waits behind staged files' answers like any answer (the sender matches answers
    /// by their order), and has them committed now, since the sender waits for it.
    mutating func goAhead(_ offset: UInt64, vouched: Bool = false) -> [ReceiverAction] {
        let accept = ReceiverAction.send(.accept(offset: offset, vouched: vouched))
        guard !queuedAnswers.isEmpty else { return [accept] }
        queuedAnswers.append(.ready([accept]))
        return [.commitStaged]
    }

    /// Answers an entry: STORED when `rejection` is nil, else REFUSED or FAILED. Behind a
    /// staged file's answer (unless `queued` is false: the staged file's own), the answer waits
    /// its turn, so that answers go out in the order entries were announced.
    mutating func answer(
        _ rejection: EntryRejection?, path: String, isDirectory: Bool, size: UInt64?, resumed: UInt64 = 0,
        rangeOnly: Bool = false, queued: Bool = true, isLink: Bool = false, special: Wire.SpecialType? = nil
    ) -> [ReceiverAction] {
        entriesAnswered += 1
        var result = TransferFileResult(
            path: path, isDirectory: isDirectory, size: size, resumedBytes: resumed,
            outcome: rejection?.outcome ?? .stored)
        result.rangeOnly = rangeOnly
        result.isLink = isLink
        result.isDevice = special?.isDevice ?? false
        result.isSpecial = special.map { !$0.isDevice } ?? false
        let actions: [ReceiverAction] = [.send(rejection?.frame ?? .stored), .report(result)]
        guard queued, !queuedAnswers.isEmpty else { return actions }
        queuedAnswers.append(.ready(actions))
        return []
    }

    mutating func answerFile(_ file: IncomingFile, _ rejection: EntryRejection?, queued: Bool = true)
        -> [ReceiverAction]
    {
        let size: UInt64 = rejection == nil || !file.header.sizeKnown ? file.total : file.header.size
        if rejection == nil, file.header.linked, file.range == nil, linkTargets.count < Self.maxLinkTargets,
            linkTargetBytes + file.request.relative.utf8.count <= Self.maxLinkTargetBytes
        {
            linkTargetBytes += file.request.relative.utf8.count
            linkTargets.insert(file.request.relative)
        }
        return answer(
            rejection, path: file.request.relative, isDirectory: false, size: size, resumed: file.offset,
            queued: queued)
    }

    /// Turns the session away after HELLO: the receiver serves all the sessions it allows.
    mutating func turnAway(_ reason: String) -> [ReceiverAction] {
        if case .ended = state { return [] }
        return [.send(.error(reason: reason))] + end(.turnedAway(reason))
    }

    /// The decoder found the bytes break the protocol.
    mutating func violated(_ reason: String) -> [ReceiverAction] {
        if case .ended = state { return [] }
        return violation(reason)
    }

    mutating func violation(_ reason: String) -> [ReceiverAction] {
        [.send(.error(reason: reason))] + end(.violation(reason))
    }

    /// Input arrived while the session was told to hold it: the session's bug, not the peer's.
    mutating func unexpectedInput(_ what: String) -> [ReceiverAction] {
        if case .ended = state { return [] }
        assertionFailure("receiver machine: \(what) handed over in state \(state)")
        return violation("\(what) out of turn")
    }

    mutating func end(_ how: SessionEnd) -> [ReceiverAction] {
        var actions: [ReceiverAction] = []
        switch state {
        case .receiving, .finishing, .committing, .storing(.file), .storing(.range):
            // An interrupted file keeps its partial data for a resume (the store decides
            // whether it may be kept).
            actions.append(.dropFile(keep: true))
        case .awaitingMagic, .awaitingHello, .idle, .joining, .storing(.directory), .storing(.link), .storing(.special),
            .storing(.prune), .storing(.move), .storing(.remove),
            .discarding, .settling, .ended:
            break
        }
        state = .ended(how)
        actions.append(.end(how))
        return actions
    }
}
