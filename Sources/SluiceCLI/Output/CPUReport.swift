import Sluice

/// The CPU seconds a copy (or a benchmark cell) used, as `--stats` and `bench` report them:
/// user and system seconds, their sum, and the sum per GiB (2^30 bytes) moved.
///
/// ```swift
/// let before = CPUTime.process()
/// // … run …
/// let report = CPUReport(cpu: CPUTime.process() - before, bytes: bytesMoved)
/// rows.append(("cpu seconds", report.text))       // 0.412 (user 0.031, system 0.381), 0.402 per GiB
/// fields += report.jsonFields                      // cpu_user_seconds, cpu_system_seconds, …
/// ```
struct CPUReport: Hashable, Sendable {
    var cpu: CPUTime
    /// The bytes the seconds are divided by.
    var bytes: UInt64

    /// CPU seconds per GiB of `bytes`; nil when no byte moved.
    var secondsPerGiB: Double? { cpu.secondsPerGiB(bytes) }

    /// `0.412 (user 0.031, system 0.381), 0.402 per GiB`.
    var text: String {
        var text = Format.fixed(cpu.totalSeconds, 3)
        text += " (user \(Format.fixed(cpu.userSeconds, 3)), system \(Format.fixed(cpu.systemSeconds, 3)))"
        if let perGiB = secondsPerGiB { text += ", \(Format.fixed(perGiB, 3)) per GiB" }
        return text
    }

    /// `cpu_user_seconds`, `cpu_system_seconds`, `cpu_seconds` and `cpu_seconds_per_gib` (null
    /// when no byte moved), as JSON name and value pairs.
    var jsonFields: [(String, String)] {
        [
            ("cpu_user_seconds", Format.jsonNumber(cpu.userSeconds)),
            ("cpu_system_seconds", Format.jsonNumber(cpu.systemSeconds)),
            ("cpu_seconds", Format.jsonNumber(cpu.totalSeconds)),
            ("cpu_seconds_per_gib", secondsPerGiB.map(Format.jsonNumber) ?? "null"),
        ]
    }
}
