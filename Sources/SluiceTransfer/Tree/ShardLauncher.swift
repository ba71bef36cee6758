/// Which shard this process is, from the environment its launcher set (`send --shard auto`): a
/// Slurm job array's task, a task of `srun`, an MPI rank (Open MPI, or any launcher speaking
/// PMI), or a Kubernetes Indexed Job's pod. N tasks started by one launcher then cover a tree
/// exactly once between them, with nothing passed to each but the same command line.
extension Shard {
    /// Where a shard's index and count were found.
    public struct Launcher: Sendable, Hashable, CustomStringConvertible {
        /// The variable holding the index (e.g. `SLURM_ARRAY_TASK_ID`).
        public let index: String
        /// The variable holding the count, or nil when the count is given (`--shard-count`).
        public let count: String?

        public var description: String { count.map { "\(index) and \($0)" } ?? "\(index) with --shard-count" }
    }

    /// What the launchers set, in the order they are looked for: a job array's task before a
    /// step's task (an array task's script may run `srun`), Slurm before MPI.
    public static let launchers = [
        Launcher(index: "SLURM_ARRAY_TASK_ID", count: "SLURM_ARRAY_TASK_COUNT"),
        Launcher(index: "SLURM_PROCID", count: "SLURM_NTASKS"),
        Launcher(index: "OMPI_COMM_WORLD_RANK", count: "OMPI_COMM_WORLD_SIZE"),
        Launcher(index: "PMI_RANK", count: "PMI_SIZE"),
        Launcher(index: "JOB_COMPLETION_INDEX", count: nil),
    ]

    /// Why no shard came of the environment. Each says what was looked for or what was wrong,
    /// in words a person can act on.
    public enum LauncherError: Error, Hashable, Sendable, CustomStringConvertible {
        /// None of the launchers' variables is set.
        case noLauncher
        /// A variable is set to something that is not a number in range.
        case badValue(variable: String, value: String)
        /// `JOB_COMPLETION_INDEX` is set and `--shard-count` is not (Kubernetes does not tell
        /// a pod how many completions there are).
        case countNeeded(variable: String)
        /// The launcher's count and `--shard-count` disagree.
        case countDisagrees(variable: String, launcher: Int, given: Int)
        /// The index is not below the count.
        case indexOutOfRange(variable: String, index: Int, count: Int)

        public var description: String {
            switch self {
            case .noLauncher:
                return "no launcher's task index in the environment (looked for "
                    + Shard.launchers.map(\.description).joined(separator: ", ") + ")"
            case .badValue(let variable, let value):
                return "\(variable)='\(value)' is not a whole number in range"
            case .countNeeded(let variable):
                return "\(variable) is set, but not how many tasks there are: give --shard-count N"
            case .countDisagrees(let variable, let launcher, let given):
                return "--shard-count \(given) disagrees with \(variable)=\(launcher)"
            case .indexOutOfRange(let variable, let index, let count):
                return "\(variable)=\(index) is not below the count of tasks, \(count)"
            }
        }
    }

    /// The shard of this task, from `variable` (a lookup of the environment, e.g. `getenv`) and
    /// `count` (`--shard-count`, needed only for a Kubernetes Indexed Job; otherwise it must agree
    /// with the launcher's). A Slurm array's task IDs are made an index from 0 with the array's
    /// `SLURM_ARRAY_TASK_MIN` and `SLURM_ARRAY_TASK_STEP` (`--array=1-8:2` gives IDs 1, 3, 5, 7:
    /// shards 0 to 3 of 4).
    public static func fromLauncher(
        environment variable: (String) -> String?, count given: Int? = nil
    ) -> Result<(Shard, Launcher), LauncherError> {
        Result { () throws(LauncherError) in try launched(variable, given) }
    }

    /// `fromLauncher`, throwing.
    private static func launched(_ variable: (String) -> String?, _ given: Int?) throws(LauncherError) -> (
        Shard, Launcher
    ) {
        guard let launcher = launchers.first(where: { variable($0.index) != nil }),
            let indexText = variable(launcher.index)
        else { throw .noLauncher }
        /// The whole number `name` holds, at least `minimum`.
        func number(_ name: String, _ text: String, atLeast minimum: Int = 0) throws(LauncherError) -> Int {
            guard !text.isEmpty, text.allSatisfy({ $0.isASCII && $0.isNumber }), let value = Int(text),
                value <= 1 << 31, value >= minimum
            else { throw .badValue(variable: name, value: text) }
            return value
        }
        var index = try number(launcher.index, indexText)
        if launcher.index == "SLURM_ARRAY_TASK_ID" {
            // Optional in the environment; when there, the ID becomes a position in the array.
            let minimum =
                try variable("SLURM_ARRAY_TASK_MIN").map { (text) throws(LauncherError) in
                    try number("SLURM_ARRAY_TASK_MIN", text)
                } ?? 0
            let step =
                try variable("SLURM_ARRAY_TASK_STEP").map { (text) throws(LauncherError) in
                    try number("SLURM_ARRAY_TASK_STEP", text, atLeast: 1)
                } ?? 1
            guard index >= minimum, (index - minimum) % step == 0 else {
                throw .badValue(variable: launcher.index, value: indexText)
            }
            index = (index - minimum) / step
        }
        var count = given
        var used = Launcher(index: launcher.index, count: nil)
        if let countVariable = launcher.count, let text = variable(countVariable) {
            let launched = try number(countVariable, text, atLeast: 1)
            if let given, given != launched {
                throw .countDisagrees(variable: countVariable, launcher: launched, given: given)
            }
            count = launched
            used = launcher
        }
        guard let count else { throw .countNeeded(variable: launcher.index) }
        guard let shard = Shard(index: index, count: count) else {
            throw .indexOutOfRange(variable: launcher.index, index: index, count: count)
        }
        return (shard, used)
    }
}
