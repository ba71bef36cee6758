import Foundation
import TestThreads
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Why a Slurm cannot be started on this machine (nil: it can): the daemons need root, and
/// Debian's `slurm-wlm` and `munge`.
let slurmUnavailable: String? = {
    guard getuid() == 0 else { return "not root: slurmd and slurmctld run as root here" }
    let programs = ["/usr/sbin/slurmctld", "/usr/sbin/slurmd", "/usr/sbin/munged", "/usr/bin/sbatch"]
    let missing = programs.filter { access($0, X_OK) != 0 }
    guard missing.isEmpty else { return "slurm-wlm or munge not installed (no \(missing.joined(separator: ", ")))" }
    return nil
}()

/// A one-node Slurm cluster of this host, started for a test: munged, `slurmctld -D` and
/// `slurmd -D` under a temporary `slurm.conf`, state in a temporary directory, ports chosen
/// free. `stop` kills the daemons and removes the directory.
final class SlurmCluster {
    let directory: String
    /// The daemons' process ids, started with `posix_spawn` (not `Process`, whose reaping of
    /// the short commands run meanwhile they would hold up).
    private var daemons: [pid_t] = []

    init() throws {
        directory = NSTemporaryDirectory() + "sluice-slurm-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        for sub in ["", "/state", "/spool", "/munge"] { mkdir(directory + sub, 0o700) }
        let key = (0..<1024).map { _ in UInt8.random(in: 0...255) }
        try Data(key).write(to: URL(fileURLWithPath: "\(directory)/munge/munge.key"))
        chmod("\(directory)/munge/munge.key", 0o400)
        let (controller, node) = (try #require(freePort(SOCK_STREAM)), try #require(freePort(SOCK_STREAM)))
        let host = Self.shortHostname()
        let conf = """
            ClusterName=sluicetest
            SlurmctldHost=\(host)
            SlurmctldPort=\(controller)
            SlurmdPort=\(node)
            SlurmUser=root
            SlurmdUser=root
            AuthType=auth/munge
            AuthInfo=socket=\(directory)/munge/sock
            CredType=cred/munge
            StateSaveLocation=\(directory)/state
            SlurmdSpoolDir=\(directory)/spool
            SlurmctldPidFile=\(directory)/slurmctld.pid
            SlurmdPidFile=\(directory)/slurmd.pid
            ProctrackType=proctrack/linuxproc
            TaskPlugin=task/none
            SelectType=select/cons_tres
            SelectTypeParameters=CR_CPU
            SchedulerType=sched/builtin
            ReturnToService=2
            MpiDefault=none
            JobCompType=jobcomp/none
            AccountingStorageType=accounting_storage/none
            SlurmctldLogFile=\(directory)/slurmctld.log
            SlurmdLogFile=\(directory)/slurmd.log
            NodeName=\(host) CPUs=\(ProcessInfo.processInfo.activeProcessorCount) State=UNKNOWN
            PartitionName=test Nodes=\(host) Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4

            """
        try conf.write(toFile: "\(directory)/slurm.conf", atomically: true, encoding: .utf8)
        // In the foreground, as the others: a child of this process, killed by `stop`.
        daemons.append(
            try start(
                "/usr/sbin/munged",
                [
                    "--foreground", "--force", "--key-file=\(directory)/munge/munge.key",
                    "--socket=\(directory)/munge/sock", "--pid-file=\(directory)/munge/pid",
                    "--log-file=\(directory)/munge/log", "--seed-file=\(directory)/munge/seed",
                ]))
        guard Self.waitFor(seconds: 10, { access("\(directory)/munge/sock", F_OK) == 0 }) else {
            let log = (try? String(contentsOfFile: "\(directory)/munge/log", encoding: .utf8)) ?? ""
            throw ReceiverError(message: "munged made no socket: \(log)")
        }
        daemons.append(try start("/usr/sbin/slurmctld", ["-D", "-f", "\(directory)/slurm.conf"]))
        daemons.append(try start("/usr/sbin/slurmd", ["-D", "-f", "\(directory)/slurm.conf"]))
    }

    /// The environment every Slurm command runs with.
    var environment: [String: String] {
        ProcessInfo.processInfo.environment.merging(["SLURM_CONF": "\(directory)/slurm.conf"]) { $1 }
    }

    /// Waits (polling `sinfo`, at most `seconds`) until the node is idle: true once it is.
    func waitUntilIdle(seconds: Double = 20) -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if let out = try? run("/usr/bin/sinfo", ["-h", "-o", "%T"]), out.output.contains("idle") { return true }
            usleep(100_000)
        }
        return false
    }

    /// Runs a program to its end with the cluster's environment: its status and output (stdout
    /// and stderr together).
    @discardableResult
    func run(_ path: String, _ arguments: [String], extra: [String: String] = [:]) throws -> (
        status: Int32, output: String
    ) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: path)
        process.arguments = arguments
        process.environment = environment.merging(extra) { $1 }
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = pipe
        process.standardInput = FileHandle.nullDevice
        try process.run()
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (process.terminationStatus, String(decoding: data, as: UTF8.self))
    }

    private func start(_ path: String, _ arguments: [String]) throws -> pid_t {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        for fd in [0, 1, 2] as [Int32] { posix_spawn_file_actions_addopen(&actions, fd, "/dev/null", O_RDWR, 0) }
        let argv = ([path] + arguments).map { strdup($0) } + [nil]
        let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { for p in argv + envp { free(p) } }
        var pid: pid_t = 0
        guard posix_spawn(&pid, path, &actions, nil, argv, envp) == 0 else {
            throw ReceiverError(message: "cannot start \(path)")
        }
        return pid
    }

    /// Kills the daemons (slurmd first) and removes the directory.
    func stop() {
        for pid in daemons.reversed() {
            kill(pid, SIGKILL)
            var status: Int32 = 0
            waitpid(pid, &status, 0)
        }
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// Polls `condition` every 50 ms for at most `seconds`: true once it holds.
    static func waitFor(seconds: Double, _ condition: () -> Bool) -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if condition() { return true }
            usleep(50_000)
        }
        return condition()
    }

    static func shortHostname() -> String {
        var buffer = [CChar](repeating: 0, count: 256)
        gethostname(&buffer, buffer.count)
        let name = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return String(name.split(separator: ".").first ?? "localhost")
    }
}

/// `sbatch --array=0-3` of Examples/slurm/copy.sbatch under a real Slurm started here: four
/// `send --shard auto --shard-by bytes --group` tasks move a tree with one file larger than the
/// rest together to one `receive`; then a task killed mid-way and requeued finishes the job.
@Suite(.serialized, .ownThreads) struct SlurmShardTests {
    static let example = packageRoot.appendingPathComponent("Examples/slurm/copy.sbatch").path

    /// `src/big.bin` (12 MiB) and six files of 300 kB: the big file is larger than the rest.
    func tree(_ root: String) throws {
        try FileManager.default.createDirectory(atPath: "\(root)/src/small", withIntermediateDirectories: true)
        var random = SystemRandomNumberGenerator()
        try write(
            Data((0..<(12 << 20)).map { _ in UInt8.random(in: 0...255, using: &random) }), to: "\(root)/src/big.bin")
        for index in 0..<6 {
            try write(
                Data((0..<300_000).map { _ in UInt8.random(in: 0...255, using: &random) }),
                to: "\(root)/src/small/f\(index)")
        }
    }

    /// The receive --stats=json report's task group `name`.
    func group(_ stats: [String: Any]?, _ name: String) -> [String: Any]? {
        (stats?["groups"] as? [[String: Any]])?.first { $0["name"] as? String == name }
    }

    /// The states of the job's tasks squeue still lists (e.g. `["5_1": "RUNNING"]`).
    func tasks(_ cluster: SlurmCluster, _ job: String) -> [String: String] {
        guard let out = try? cluster.run("/usr/bin/squeue", ["-h", "-r", "-j", job, "-o", "%i %T"]) else { return [:] }
        var states: [String: String] = [:]
        for line in out.output.split(separator: "\n") {
            let parts = line.split(separator: " ")
            if parts.count == 2 { states[String(parts[0])] = String(parts[1]) }
        }
        return states
    }

    @Test(.enabled(if: slurmUnavailable == nil, Comment(rawValue: slurmUnavailable ?? "")))
    func jobArraySplitsTheLargeFileAndARequeuedTaskResumes() throws {
        let cluster = try SlurmCluster()
        defer { cluster.stop() }
        guard cluster.waitUntilIdle() else {
            try Test.cancel("the Slurm started here never had an idle node (\(cluster.directory))")
        }
        try withTemporaryDirectory { dir in
            try tree(dir)
            let total = UInt64(12 << 20) + 6 * 300_000
            let files = 7

            // 1. The whole array at once: the tree arrives, each file once, the big one in ranges
            //    from several tasks.
            mkdir("\(dir)/dst1", 0o755)
            let receiver = try ReceiverProcess(["--sync", "--dir", "\(dir)/dst1", "--stats=json"])
            let address = try receiver.address()
            let environment = [
                "SLUICE": sluiceBinary.path, "SLUICE_KEY_FILE": testKeyFile, "SLUICE_GROUP": "copy-1",
            ]
            let batch = try cluster.run(
                "/usr/bin/sbatch",
                ["--wait", "--array=0-3", "-o", "\(dir)/task1-%a.out", Self.example, "\(dir)/src", address],
                extra: environment)
            #expect(batch.status == 0, "\(batch.output)")
            let first = receiver.stop()
            #expect(try treesIdentical("\(dir)/src", "\(dir)/dst1/src"))
            let stats = lastJSONObject(first.stderr)
            #expect(stats?["files"] as? Int == files, "\(first.stderr)")
            #expect(stats?["bytes"] as? UInt64 == total, "every byte written once: \(first.stderr)")
            let one = group(stats, "copy-1")
            #expect(one?["tasks_seen"] as? Int == 4, "\(first.stderr)")
            #expect(
                (one?["range_tasks"] as? [Int])?.count ?? 0 >= 2, "the big file from several tasks: \(first.stderr)")
            #expect((one?["ranges"] as? Int) ?? 0 >= 1, "\(first.stderr)")
            #expect(one?["incomplete_files"] as? Int == 0, "\(first.stderr)")
            for index in 0..<4 {
                let out = (try? String(contentsOfFile: "\(dir)/task1-\(index).out", encoding: .utf8)) ?? ""
                let task = lastJSONObject(out)
                #expect(task?["group"] as? String == "copy-1" && task?["shard"] as? String == "\(index)/4", "\(out)")
                #expect(task?["shard_by"] as? String == "bytes", "\(out)")
            }

            // 2. Task 1 slowed, cancelled mid-way once the others are done, requeued: it resumes
            //    its range, and nothing is written twice beyond what it had in flight.
            mkdir("\(dir)/dst2", 0o755)
            let second = try ReceiverProcess(["--sync", "--dir", "\(dir)/dst2", "--stats=json"])
            let wrapper = "\(dir)/slow-task-1.sbatch"
            try """
            #!/bin/bash
            # Task 1 crawls on its first run only (a requeued run has SLURM_RESTART_COUNT set).
            if [ "$SLURM_ARRAY_TASK_ID" = 1 ] && [ -z "${SLURM_RESTART_COUNT:-}" ]; then
                export SLUICE_SEND_OPTIONS="--rate-limit 1M"
            fi
            exec bash \(Self.example) "$@"

            """.write(toFile: wrapper, atomically: true, encoding: .utf8)
            let submitted = try cluster.run(
                "/usr/bin/sbatch",
                [
                    "--parsable", "--requeue", "--array=0-3", "-o", "\(dir)/task2-%a.out", wrapper, "\(dir)/src",
                    try second.address(),
                ],
                extra: environment.merging(["SLUICE_GROUP": "copy-2"]) { $1 })
            #expect(submitted.status == 0, "\(submitted.output)")
            let job = submitted.output.trimmingCharacters(in: .whitespacesAndNewlines)
            // Task 1 needs 3 s and more at 1 MB/s; the others finish well before.
            let othersDone = SlurmCluster.waitFor(seconds: 20) { tasks(cluster, job).keys.sorted() == ["\(job)_1"] }
            #expect(othersDone, "\(tasks(cluster, job))")
            try cluster.run("/usr/bin/scancel", ["\(job)_1"])
            #expect(SlurmCluster.waitFor(seconds: 10) { tasks(cluster, job).isEmpty }, "\(tasks(cluster, job))")
            let requeue = try cluster.run("/usr/bin/scontrol", ["requeue", "\(job)_1"])
            #expect(requeue.status == 0, "\(requeue.output)")
            // A requeued job waits (BeginTime) before it may start again: now.
            try cluster.run("/usr/bin/scontrol", ["update", "jobid=\(job)_1", "StartTime=now"])
            #expect(SlurmCluster.waitFor(seconds: 30) { tasks(cluster, job).isEmpty }, "\(tasks(cluster, job))")
            let ended = second.stop()
            #expect(try treesIdentical("\(dir)/src", "\(dir)/dst2/src"))
            let stats2 = lastJSONObject(ended.stderr)
            let two = group(stats2, "copy-2")
            #expect(two?["incomplete_files"] as? Int == 0, "\(ended.stderr)")
            #expect(two?["tasks_seen"] as? Int == 4, "\(ended.stderr)")
            // What task 1 had in flight when cancelled is all that may be written twice: less
            // than its range of the big file (a quarter of it, rounded up).
            let written = stats2?["bytes"] as? UInt64 ?? 0
            #expect(written >= total && written - total < (12 << 20) / 4 + (64 << 10), "\(ended.stderr)")
            // The requeued task sent at most its own share again (its stored files unchanged).
            let rerun = (try? String(contentsOfFile: "\(dir)/task2-1.out", encoding: .utf8)) ?? ""
            let again = lastJSONObject(rerun)
            #expect(
                (again?["bytes"] as? UInt64 ?? .max) <= (again?["shard_bytes"] as? UInt64 ?? 0)
                    && again?["failed"] as? Int == 0, "\(rerun)")
        }
    }
}
