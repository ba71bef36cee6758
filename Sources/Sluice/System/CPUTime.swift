#if canImport(Glibc)
    import Glibc
#endif

/// CPU time used, in user and system seconds (`getrusage(2)`): what a copy or a benchmark cell
/// cost the machine, beside how long it took. On a shared machine it is far steadier than the
/// wall-clock time, and it shows what zero-copy saves: bytes the kernel moves without copying
/// them through user memory cost system time only, and less of it.
///
/// ```swift
/// let before = CPUTime.process()
/// // … move the bytes …
/// let used = CPUTime.process() - before
/// print(used.totalSeconds, used.secondsPerGiB(bytes) ?? 0)
/// ```
public struct CPUTime: Hashable, Sendable {
    /// Seconds spent running the process's own code.
    public var userSeconds: Double
    /// Seconds the kernel spent working for the process (system calls, copying, page faults).
    public var systemSeconds: Double

    /// A time of `userSeconds` and `systemSeconds`.
    public init(userSeconds: Double, systemSeconds: Double) {
        self.userSeconds = userSeconds
        self.systemSeconds = systemSeconds
    }

    /// User plus system seconds.
    public var totalSeconds: Double { userSeconds + systemSeconds }

    /// The CPU time the whole process (every thread, worker threads included) has used so far:
    /// `getrusage(RUSAGE_SELF)`.
    public static func process() -> CPUTime { usage(RUSAGE_SELF.rawValue) }

    /// The CPU time the calling thread has used so far: `getrusage(RUSAGE_THREAD)`.
    public static func thread() -> CPUTime { usage(1) }  // RUSAGE_THREAD, not in Glibc's module

    private static func usage(_ who: Int32) -> CPUTime {
        var usage = rusage()
        guard getrusage(who, &usage) == 0 else { return CPUTime(userSeconds: 0, systemSeconds: 0) }
        return CPUTime(userSeconds: seconds(usage.ru_utime), systemSeconds: seconds(usage.ru_stime))
    }

    private static func seconds(_ time: timeval) -> Double {
        Double(time.tv_sec) + Double(time.tv_usec) / 1e6
    }

    /// The time used between `earlier` and `later` (each from `process()` or `thread()`).
    public static func - (later: CPUTime, earlier: CPUTime) -> CPUTime {
        CPUTime(
            userSeconds: max(0, later.userSeconds - earlier.userSeconds),
            systemSeconds: max(0, later.systemSeconds - earlier.systemSeconds))
    }

    /// CPU seconds per GiB (2^30 bytes) for `bytes` moved; nil when no byte moved.
    public func secondsPerGiB(_ bytes: UInt64) -> Double? {
        guard bytes > 0 else { return nil }
        return totalSeconds / (Double(bytes) / 1_073_741_824)
    }

    /// Runs `body` and returns its result with the CPU time the process used meanwhile.
    public static func measure<T, E: Error>(_ body: () throws(E) -> T) throws(E) -> (result: T, cpu: CPUTime) {
        let before = process()
        let result = try body()
        return (result, process() - before)
    }
}
