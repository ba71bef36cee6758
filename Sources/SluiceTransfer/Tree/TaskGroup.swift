import Sluice

/// A task of a group of senders, each a task of one job, that send one tree between them to
/// one receiver (`sluice send --group ID`): the receiver puts together the ranges of a file
/// split across the tasks (`FileSelection.balancedByBytes` with `splitting`), whichever task
/// sends them, and whenever, within the group's linger.
///
/// ```swift
/// let group = TaskGroup(name: "job-4242", task: 1, tasks: 4)
/// let sender = try ParallelTransferSender(sources: sources, streams: 1, options: options, group: group)
/// ```
public struct TaskGroup: Sendable, Hashable, CustomStringConvertible {
    /// The group's name, the same for every task: 1 to 64 bytes of UTF-8, no control character.
    public let name: String
    /// Which task this is, of how many (its shard).
    public let task: Int
    public let tasks: Int

    /// Nil when `name` is empty, longer than 64 bytes or holds a control character, or the task
    /// is not below the tasks (at most 2^20).
    public init?(name: String, task: Int, tasks: Int) {
        let bytes = Array(name.utf8)
        guard (1...Wire.maxGroupNameBytes).contains(bytes.count), bytes.allSatisfy({ $0 >= 0x20 && $0 != 0x7F }),
            (1...Wire.maxGroupTasks).contains(tasks), (0..<tasks).contains(task)
        else { return nil }
        self.name = name
        self.task = task
        self.tasks = tasks
    }

    /// The transfer id every task draws from the name alike: the first 16 bytes of the SHA-256
    /// of a label and the name.
    var id: [UInt8] {
        let label = Array("sluice-task-group-v1".utf8) + [0]
        return Array(SHA256Digest.hash(label + Array(name.utf8)).prefix(Wire.transferIDBytes))
    }

    public var description: String { "\(name) (task \(task) of \(tasks))" }

    /// The variables a group's name is taken from when none is given, in order: a Slurm job
    /// array's id (the same for all its tasks), then the job's.
    public static let jobVariables = ["SLURM_ARRAY_JOB_ID", "SLURM_JOB_ID"]

    /// The group's name from the job's id in the environment (`variable` looks one up): `slurm-`
    /// and the first of `jobVariables` set to a whole number; nil when none is.
    public static func nameFromJob(environment variable: (String) -> String?) -> String? {
        for name in jobVariables {
            guard let value = variable(name), !value.isEmpty, value.count <= 20,
                value.allSatisfy({ $0.isASCII && $0.isNumber })
            else { continue }
            return "slurm-\(value)"
        }
        return nil
    }
}
