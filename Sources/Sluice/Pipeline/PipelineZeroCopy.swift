/// The pipeline's zero-copy scheduling: whether the bytes may move inside the kernel, the
/// choice of calls once both ends are open, the offers kept in the backpressure flags while
/// `ZeroCopyDriver` (ZeroCopy.swift) makes the calls, and the fallback to read/write with the
/// bytes in the pipeline's pipe queued first.
extension Pipeline {
    /// The zero-copy side: `.undecided` until both ends are open (a socket may still be
    /// connecting), then `.active` with the driver that makes the kernel's calls.
    enum ZeroCopyState {
        case undecided
        case active(ZeroCopyDriver)
    }

    /// What the pipeline's pipe holds now (0 off the zero-copy path).
    var kernelHeldBytes: Int {
        if case .active(let driver) = zeroCopy { return driver.held }
        return 0
    }

    /// Whether the bytes may move inside the kernel: nothing needs to see them, and both ends
    /// are plain descriptors. Otherwise notes why not.
    func mayMoveInKernel() -> Bool {
        if !options.zeroCopy {
            pathNote = "zero-copy turned off"
        } else if !stages.isEmpty {
            pathNote = "a stage transforms the bytes"
        } else if options.rateLimit != nil {
            pathNote = "a rate limit meters the bytes"
        } else if !sourceTaps.isEmpty || !sinkTaps.isEmpty {
            pathNote = "a tap sees the bytes"
        } else if !source.offersKernelCopy || !(sink.offersKernelCopy || sink is DirectFileWriteStream) {
            pathNote = "an end is not a file, pipe or socket"
        } else {
            pathNote = nil
        }
        return pathNote == nil
    }

    /// Both ends are open: chooses the kernel's calls for what they are, or read/write.
    func decideZeroCopy() {
        zeroCopy = nil
        if let direct = sink as? DirectFileWriteStream {
            decideDirectSplice(into: direct)
            return
        }
        guard source.streamStatus == .open, sink.streamStatus == .open,
            let sourceFD = source.kernelCopyDescriptor, let sinkFD = sink.kernelCopyDescriptor
        else {
            pathNote = "an end is not open"
            return
        }
        let sourceEnd = (fd: sourceFD, name: source.name, kind: DescriptorKind(of: sourceFD))
        let sinkEnd = (fd: sinkFD, name: sink.name, kind: DescriptorKind(of: sinkFD))
        switch ZeroCopyPlan(source: sourceEnd.kind, sink: sinkEnd.kind) {
        case .readWrite(let because):
            pathNote = because
        case .kernel(let route):
            startKernelMoves(
                ZeroCopyDriverSetup(
                    route: route, source: sourceEnd, sink: sinkEnd,
                    pipeCapacity: options.depth * options.chunkSize.bytes,
                    fault: options.zeroCopyFault, directSink: nil))
        }
    }

    private struct ZeroCopyDriverSetup {
        var route: KernelRoute
        var source: (fd: Int32, name: String, kind: DescriptorKind)
        var sink: (fd: Int32, name: String, kind: DescriptorKind)
        var pipeCapacity: Int
        var fault: ZeroCopyFault?
        var directSink: DirectFileWriteStream?
    }

    /// Makes the driver of the kernel's calls (and its pipe, on a route through one), or notes
    /// why there is none and leaves the bytes to read/write.
    private func startKernelMoves(_ setup: ZeroCopyDriverSetup) {
        let made = Result { () throws(SluiceError) in
            try ZeroCopyDriver(
                route: setup.route, source: setup.source, sink: setup.sink, pipeCapacity: setup.pipeCapacity,
                fault: setup.fault, directSink: setup.directSink)
        }
        switch made {
        case .success(let driver):
            zeroCopy = .active(driver)
            path = driver.path
        case .failure(let error):
            pathNote = "no pipe to splice through (\(error.reason))"
        }
    }

    /// A sink writing past the page cache: a socket source is spliced into the pipeline's pipe
    /// and from there into the file's `O_DIRECT` descriptor, no byte copied (where the socket's
    /// pages are aligned as direct I/O needs: else the first splice out is refused, and
    /// read/write goes on). Any other source is read straight into the sink's buffer.
    private func decideDirectSplice(into direct: DirectFileWriteStream) {
        guard source.streamStatus == .open, direct.splicesFromPipes, let sourceFD = source.kernelCopyDescriptor,
            DescriptorKind(of: sourceFD) == .socket
        else {
            pathNote = "the destination is written with O_DIRECT from the pipeline's buffer"
            return
        }
        let fileFD = direct.bufferedDescriptor
        // The pipe holds `inFlightLimit`: at least the sink's 1 MiB, for whole 1 MiB writes.
        startKernelMoves(
            ZeroCopyDriverSetup(
                route: KernelRoute(calls: [.splice], throughPipe: true, blockingEnd: nil),
                source: (sourceFD, source.name, .socket), sink: (fileFD, sink.name, DescriptorKind(of: fileFD)),
                pipeCapacity: inFlightLimit, fault: nil, directSink: direct))
    }

    private func isActive(_ driver: ZeroCopyDriver) -> Bool {
        if case .active(let current) = zeroCopy, current === driver { return true }
        return false
    }

    /// Handles `event` while the bytes move (or may yet move) inside the kernel; false when it
    /// is read/write's to handle. The offers are kept in the backpressure flags, as read/write
    /// keeps them: the source's while it waits for the sink (sink-bound time), the sink's while
    /// it waits for the source (source-bound time). Every offer is either kept or answered by a
    /// call, after which its stream is re-armed, so read/write can take over at any point.
    func zeroCopyEvent(_ stream: ByteStream, _ event: StreamEvent) -> Bool {
        if case .undecided = zeroCopy {
            if source.streamStatus == .opening || sink.streamStatus == .opening {
                // An end is still connecting: keep the offer for whichever path it will be.
                switch event {
                case .hasBytesAvailable where stream === source:
                    hot.sourceWaiting.set()
                    return true
                case .hasSpaceAvailable where stream === sink:
                    hot.pendingWrite.set()
                    return true
                default:
                    return false
                }
            }
            decideZeroCopy()
            if zeroCopy == nil { pump() }  // read/write: act on the offers kept meanwhile
        }
        guard case .active(let driver) = zeroCopy else { return false }
        switch event {
        case .hasBytesAvailable where stream === source:
            hot.sourceWaiting.set()
        case .hasSpaceAvailable where stream === sink:
            hot.pendingWrite.set()
        case .errorOccurred:
            return false
        case .endEncountered where stream === sink:
            return false
        default:
            break  // openCompleted
        }
        kernelPump(driver)
        return true
    }

    /// Moves bytes inside the kernel while the offers allow: on a direct route when both ends
    /// have one; through the pipe when the sink has one and the pipe bytes, or the source has
    /// one and the pipe room.
    private func kernelPump(_ driver: ZeroCopyDriver) {
        var again = true
        while again && !hot.isFinished && isActive(driver) {
            again = false
            if !driver.route.throughPipe {
                guard hot.sourceWaiting.isSet && hot.pendingWrite.isSet else { break }
                hot.sourceWaiting.take()
                hot.pendingWrite.take()
                moveDirect(driver)
                continue
            }
            if hot.pendingWrite.isSet && driver.sinkCanTake {
                hot.pendingWrite.take()
                spliceOut(driver)
                again = true
            }
            if !hot.isFinished, isActive(driver), hot.sourceWaiting.isSet, !driver.sourceDone, !driver.pipeFull,
                driver.room > 0
            {
                hot.sourceWaiting.take()
                spliceIn(driver)
                again = true
            }
            if !hot.isFinished, isActive(driver), driver.sourceDone, driver.held == 0 {
                succeed()
                return
            }
        }
        // Fell back: read/write goes on with the offers kept and the bytes drained.
        if zeroCopy == nil && !hot.isFinished { pump() }
    }

    /// Source to sink in one call per chunk, up to `depth` calls while each moves a whole chunk.
    private func moveDirect(_ driver: ZeroCopyDriver) {
        let chunk = options.chunkSize.bytes
        moving: for _ in 0..<options.depth {
            let outcome = driver.moveDirect(upTo: chunk, written: hot.bytesWritten)
            switch outcome {
            case .moved(let n):
                hot.bytesRead += UInt64(n)
                hot.bytesWritten += UInt64(n)
                hot.peakInFlightBytes = max(hot.peakInFlightBytes, n)
                path = driver.path
                if n < chunk { break moving }
            case .end:
                source.reachedEnd()
                succeed()
                return
            case .wouldBlock:
                // The end that would block waits for its event; the other keeps its offer.
                switch driver.route.blockingEnd {
                case .source?:
                    source.rearm()
                    hot.pendingWrite.set()
                case .sink?:
                    sink.rearm()
                    hot.sourceWaiting.set()
                case nil, .stage?:
                    source.rearm()
                    sink.rearm()
                }
                return
            case .fellBack, .failed:
                stopKernelMoves(driver, outcome, keepingSourceOffer: true, keepingSinkOffer: true)
                return
            }
        }
        source.rearm()
        sink.rearm()
    }

    /// Socket into the pipe, up to `depth` calls while each fills what it asked; the pipe is
    /// spliced on to the sink in between whenever the sink has an offer.
    private func spliceIn(_ driver: ZeroCopyDriver) {
        let chunk = options.chunkSize.bytes
        reading: for _ in 0..<options.depth {
            guard driver.room > 0 else { break reading }
            let ask = min(chunk, driver.room)
            let outcome = driver.spliceIn(upTo: ask, read: hot.bytesRead, written: hot.bytesWritten)
            switch outcome {
            case .moved(let n):
                hot.bytesRead += UInt64(n)
                hot.peakInFlightBytes = max(hot.peakInFlightBytes, driver.held)
                if hot.pendingWrite.isSet && driver.sinkCanTake {
                    hot.pendingWrite.take()
                    spliceOut(driver)
                    guard !hot.isFinished, isActive(driver) else {
                        if !hot.isFinished { source.rearm() }  // this offer was answered
                        return
                    }
                }
                if n < ask { break reading }
            case .end:
                source.reachedEnd()
                return
            case .wouldBlock:
                if driver.held == 0 {
                    source.rearm()  // nothing to read now
                } else if !driver.sinkCanTake {
                    // A direct sink, less than a block held, and the socket dry (or the pipe's
                    // slots full of small pieces): into its buffer with them, and wait for more.
                    guard finalSpliceOut(driver) else { return }
                    source.rearm()
                } else {
                    // The socket is drained, or the pipe's slots are full: wait for a splice out.
                    driver.pipeFull = true
                    hot.sourceWaiting.set()
                }
                return
            case .fellBack, .failed:
                stopKernelMoves(driver, outcome, keepingSourceOffer: true, keepingSinkOffer: false)
                return
            }
        }
        source.rearm()
    }

    /// The pipe into the sink, up to `depth` calls while each moves what it asked.
    private func spliceOut(_ driver: ZeroCopyDriver) {
        let chunk = options.chunkSize.bytes
        writing: for _ in 0..<options.depth {
            guard driver.held > 0 else { break writing }
            let ask = min(chunk, driver.held)
            let outcome = driver.spliceOut(upTo: ask, written: hot.bytesWritten)
            switch outcome {
            case .moved(let n):
                hot.bytesWritten += UInt64(n)
                if n < ask { break writing }  // the sink took less: it may be full
            case .wouldBlock, .end:
                break writing
            case .fellBack, .failed:
                stopKernelMoves(driver, outcome, keepingSourceOffer: false, keepingSinkOffer: true)
                return
            }
        }
        sink.rearm()
    }

    /// Everything held in the pipe into a direct sink (its buffer takes what is not a whole
    /// block). False when that ended the kernel's moves (a failure, or a fallback).
    private func finalSpliceOut(_ driver: ZeroCopyDriver) -> Bool {
        while driver.held > 0 {
            let outcome = driver.spliceOut(upTo: driver.held, written: hot.bytesWritten, final: true)
            switch outcome {
            case .moved(let n):
                hot.bytesWritten += UInt64(n)
            case .wouldBlock, .end:
                return true
            case .fellBack, .failed:
                stopKernelMoves(driver, outcome, keepingSourceOffer: false, keepingSinkOffer: false)
                return false
            }
        }
        return true
    }

    /// A call ended the kernel's moves: an end failed, or the kernel refused every call and
    /// read/write takes over, with the offers the call was answering kept for it.
    private func stopKernelMoves(
        _ driver: ZeroCopyDriver, _ outcome: ZeroCopyDriver.Outcome, keepingSourceOffer: Bool,
        keepingSinkOffer: Bool
    ) {
        if case .failed(let location, let error) = outcome {
            fail(location, error)
            return
        }
        if keepingSourceOffer { hot.sourceWaiting.set() }
        if keepingSinkOffer { hot.pendingWrite.set() }
        fallBack(driver)
    }

    /// The kernel refused every call: read/write takes over where it stopped, with the bytes
    /// still in the pipeline's pipe queued first.
    private func fallBack(_ driver: ZeroCopyDriver) {
        fallbacks = driver.fallbacks
        path = .readWrite
        zeroCopy = nil
        defer { driver.close() }
        while driver.held > 0 {
            let chunk = takeChunk()
            switch driver.drain(into: chunk.storage) {
            case .success(let n) where n > 0:
                chunk.end = n
                hot.queues[0].pushSealed(chunk)
            case .success:
                recycle(chunk)
                fail(
                    .source,
                    source.error(
                        .system(.ioError), operation: "read",
                        detail: "the splice pipe came up short"
                    ))
                return
            case .failure(let error):
                recycle(chunk)
                fail(.source, error)
                return
            }
        }
        if driver.sourceDone { hot.queues[0].producerDone = true }
        notePeak()
    }
}
