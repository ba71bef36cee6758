/// How a pipeline ends, once: the flags and timers stop, the result is made, the streams are
/// let go (closed when asked, or on failure), a failed sink is asked to take back what it
/// made (`WriteStream.abandon()`), the chunks are dropped, and the completion runs.
extension Pipeline {
    func succeed() {
        finish(error: nil)
    }

    func fail(_ location: PipelineLocation, _ error: any Error) {
        guard !hot.isFinished else { return }
        let e =
            error as? SluiceError
            ?? SluiceError(.system(.ioError), operation: location.description, detail: "\(error)")
        finish(error: PipelineError(location: location, underlying: e))
    }

    private func finish(error: PipelineError?) {
        guard !hot.isFinished else { return }
        let now = monotonicNanoseconds()
        hot.pendingWrite.take()
        hot.sourceWaiting.take()
        for driver in drivers {
            if error == nil { driver.noteMoving() } else { driver.cancel() }
        }
        hot.limiter?.cancel()
        for tap in sourceTaps { tap.finish() }
        for tap in sinkTaps { tap.finish() }
        hot.isFinished = true
        if case .active(let driver) = zeroCopy {
            path = driver.path
            fallbacks = driver.fallbacks
            driver.close()
        }
        zeroCopy = nil
        let result = PipelineResult(
            bytesRead: hot.bytesRead, bytesWritten: hot.bytesWritten, stages: drivers.map(\.statistics),
            elapsedSeconds: started == 0 ? 0 : Double(now - started) / 1e9,
            sourceBoundSeconds: Double(hot.pendingWrite.totalNanoseconds) / 1e9,
            sinkBoundSeconds: Double(hot.sourceWaiting.totalNanoseconds) / 1e9,
            peakInFlightBytes: hot.peakInFlightBytes, inFlightLimit: inFlightLimit, error: error,
            path: path, fallbacks: fallbacks, pathNote: pathNote)
        source.delegate = nil
        sink.delegate = nil
        if options.closesStreams || error != nil {
            source.close()
            sink.close()
        }
        if let loop {
            source.remove(from: loop)
            sink.remove(from: loop)
        }
        if error != nil, options.removeCreatedSinkOnFailure { sink.abandon() }
        for index in hot.queues.indices {
            while !hot.queues[index].isEmpty { recycle(hot.queues[index].popFront()) }
        }
        hot.pool.removeAll()
        hot.lentPool.removeAll()
        let done = completion
        completion = nil
        retainedWhileRunning = nil
        done?(result)
    }
}
