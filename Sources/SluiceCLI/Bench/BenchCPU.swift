#if canImport(Glibc)
    import Glibc
#endif

/// CPU time used by this whole process, every thread included (`getrusage(RUSAGE_SELF)`):
/// what the bench divides by the bytes it moved, so that a change that saves CPU shows even
/// where the rate is bound by something else.
///
/// Kept in Bench/ on purpose: `copy --stats` grows a helper of its own in Output/, and the two
/// are to be unified later.
struct BenchCPUTime: Sendable, Equatable {
    /// User-mode seconds.
    var user: Double
    /// Kernel-mode seconds.
    var system: Double

    static let zero = BenchCPUTime(user: 0, system: 0)

    /// The process's CPU time so far.
    static func now() -> BenchCPUTime {
        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        func seconds(_ time: timeval) -> Double { Double(time.tv_sec) + Double(time.tv_usec) / 1e6 }
        return BenchCPUTime(user: seconds(usage.ru_utime), system: seconds(usage.ru_stime))
    }

    /// CPU time used while `body` ran, with its result.
    static func measure<T>(_ body: () throws -> T) rethrows -> (T, BenchCPUTime) {
        let before = now()
        let value = try body()
        return (value, now() - before)
    }

    static func - (later: BenchCPUTime, earlier: BenchCPUTime) -> BenchCPUTime {
        BenchCPUTime(user: max(0, later.user - earlier.user), system: max(0, later.system - earlier.system))
    }

    var total: Double { user + system }

    /// CPU seconds per GiB (2^30 bytes) of `bytes` moved; 0 when nothing moved.
    func secondsPerGiB(_ bytes: UInt64) -> Double {
        bytes > 0 ? total / (Double(bytes) / Double(1 << 30)) : 0
    }

    /// `"cpu_user_seconds": 0.1, "cpu_system_seconds": 0.2, "cpu_seconds_per_gib": 0.3`.
    func jsonFields(bytes: UInt64) -> String {
        "\"cpu_user_seconds\": \(Format.jsonNumber(user)), \"cpu_system_seconds\": \(Format.jsonNumber(system)), "
            + "\"cpu_seconds_per_gib\": \(Format.jsonNumber(secondsPerGiB(bytes)))"
    }

    /// `CPU 1.23 s (user 0.20, system 1.03): 0.31 s per GiB`.
    func text(bytes: UInt64) -> String {
        "CPU \(Format.fixed(total, 2)) s (user \(Format.fixed(user, 2)), system \(Format.fixed(system, 2))): "
            + "\(Format.fixed(secondsPerGiB(bytes), 2)) s per GiB"
    }
}
