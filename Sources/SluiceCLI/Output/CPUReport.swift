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

extension CPUReport {
    /// As a clause of a bench line: `CPU 1.23 s (user 0.20, system 1.03): 0.31 s per GiB`.
    var sentence: String {
        "CPU \(Format.fixed(cpu.totalSeconds, 2)) s (user \(Format.fixed(cpu.userSeconds, 2)), "
            + "system \(Format.fixed(cpu.systemSeconds, 2))): \(Format.fixed(secondsPerGiB ?? 0, 2)) s per GiB"
    }

    /// `jsonFields` as the inside of a JSON object: `"cpu_user_seconds":0.1,…`.
    var jsonMembers: String {
        jsonFields.map { "\(Format.jsonString($0.0)):\($0.1)" }.joined(separator: ",")
    }
}

extension CPUTime {
    /// No time used.
    static let zero = CPUTime(userSeconds: 0, systemSeconds: 0)

    /// The bench's clause for this time spent moving `bytes` (`CPUReport.sentence`).
    func text(bytes: UInt64) -> String { CPUReport(cpu: self, bytes: bytes).sentence }

    /// The bench's JSON members for this time spent moving `bytes` (`CPUReport.jsonMembers`).
    func jsonFields(bytes: UInt64) -> String { CPUReport(cpu: self, bytes: bytes).jsonMembers }
}
