import Sluice

#if canImport(Glibc)
    import Glibc
#endif

/// The process's open-file limit (`RLIMIT_NOFILE`), raised for a server that must hold many
/// connections: a receiver serving `--max-sessions 1000` needs more than the 1,024 descriptors
/// a login shell's soft limit usually allows, and raising the soft limit up to the hard one is
/// every process's right (Go's runtime does it for every program).
enum OpenFileLimit {
    /// `RLIM_INFINITY` (all ones), which Swift does not import.
    private static let unlimited = rlim_t.max

    /// Raises the soft limit to `wanted` descriptors, or as far as the hard limit allows; never
    /// lowers it. Returns the soft limit afterwards (nil: unlimited or unknown).
    @discardableResult
    static func raise(to wanted: Int) -> Int? {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return nil }
        guard limit.rlim_cur != unlimited else { return nil }
        let want = rlim_t(max(0, wanted))
        guard limit.rlim_cur < want else { return Int(clamping: limit.rlim_cur) }
        let hard = limit.rlim_max
        var raised = limit
        raised.rlim_cur = hard == unlimited ? want : min(want, hard)
        if setrlimit(Int32(RLIMIT_NOFILE.rawValue), &raised) != 0 {
            // The hard limit can exceed what the kernel allows a process (fs.nr_open).
            return Int(clamping: limit.rlim_cur)
        }
        return Int(clamping: raised.rlim_cur)
    }
}

/// One line for the first of a run of identical failures, then silence until they stop: a
/// listener out of descriptors retries ten times a second, and each retry would otherwise be a
/// line in the log. When the operation succeeds again, or fails differently, one line says for
/// how long and how many times it failed.
struct RepeatedFailureLog {
    /// What is failing, for the closing line (`accepting connections`).
    let operation: String
    private var first: String?
    private var repeats = 0
    private var since: UInt64 = 0

    /// Where lines go: stderr as `sluice: …`.
    private let report: (String) -> Void

    init(operation: String, report: @escaping (String) -> Void = { Terminal.report($0) }) {
        self.operation = operation
        self.report = report
    }

    /// True while a failure is being repeated.
    var failing: Bool { first != nil }

    /// Reports `message` unless it repeats the failure already reported.
    mutating func failed(_ message: String, at now: UInt64 = monotonicNanoseconds()) {
        if first == message {
            repeats += 1
            return
        }
        if first != nil { report(summary(at: now, recovered: false)) }
        first = message
        repeats = 0
        since = now
        report(message)
    }

    /// The operation succeeded: one line saying how long it failed, if it did.
    mutating func succeeded(at now: UInt64 = monotonicNanoseconds()) {
        guard first != nil else { return }
        report(summary(at: now, recovered: true))
        first = nil
    }

    /// `accepting connections again after 4.1 s (39 more failures like the one above)`, or
    /// `the failure above lasted …` when another took its place.
    private func summary(at now: UInt64, recovered: Bool) -> String {
        let seconds = Format.fixed(Double(now &- since) / 1e9, 1)
        let more = repeats == 0 ? "" : " (\(repeats) more failure\(repeats == 1 ? "" : "s") like the one above)"
        return recovered
            ? "\(operation) again after \(seconds) s\(more)" : "the failure above lasted \(seconds) s\(more)"
    }
}
