import Testing

@testable import Sluice
@testable import SluiceTransfer

/// `Shard.fromLauncher`: the shard of a task from what its launcher set in the environment.
@Suite struct ShardLauncherTests {
    func shard(_ environment: [String: String], count: Int? = nil) -> Result<Shard, Shard.LauncherError> {
        Shard.fromLauncher(environment: { environment[$0] }, count: count).map(\.0)
    }

    @Test("Each launcher's variables give index and count; a Kubernetes index takes --shard-count")
    func launchers() {
        #expect(
            shard(["SLURM_ARRAY_TASK_ID": "2", "SLURM_ARRAY_TASK_COUNT": "4"]) == .success(Shard(index: 2, count: 4)!))
        #expect(shard(["SLURM_PROCID": "0", "SLURM_NTASKS": "1"]) == .success(Shard(index: 0, count: 1)!))
        #expect(
            shard(["OMPI_COMM_WORLD_RANK": "7", "OMPI_COMM_WORLD_SIZE": "8"]) == .success(Shard(index: 7, count: 8)!))
        #expect(shard(["PMI_RANK": "3", "PMI_SIZE": "5"]) == .success(Shard(index: 3, count: 5)!))
        #expect(shard(["JOB_COMPLETION_INDEX": "9"], count: 10) == .success(Shard(index: 9, count: 10)!))
        // The count agrees with the launcher's, or is needed where it says none.
        #expect(shard(["PMI_RANK": "3", "PMI_SIZE": "5"], count: 5) == .success(Shard(index: 3, count: 5)!))
        #expect(shard(["SLURM_PROCID": "3"], count: 5) == .success(Shard(index: 3, count: 5)!))
        let used = Shard.fromLauncher(environment: { ["SLURM_PROCID": "3"][$0] }, count: 5).map(\.1)
        #expect(used == .success(Shard.Launcher(index: "SLURM_PROCID", count: nil)))
    }

    @Test("A job array's IDs become positions with its minimum and step; the array wins over srun's task")
    func slurmArrays() {
        let array = ["SLURM_ARRAY_TASK_COUNT": "4", "SLURM_ARRAY_TASK_MIN": "1", "SLURM_ARRAY_TASK_STEP": "2"]
        for (id, position) in [("1", 0), ("3", 1), ("5", 2), ("7", 3)] {
            #expect(
                shard(array.merging(["SLURM_ARRAY_TASK_ID": id]) { $1 }) == .success(Shard(index: position, count: 4)!))
        }
        #expect(
            shard(array.merging(["SLURM_ARRAY_TASK_ID": "4"]) { $1 })
                == .failure(.badValue(variable: "SLURM_ARRAY_TASK_ID", value: "4")))
        #expect(
            shard(array.merging(["SLURM_ARRAY_TASK_ID": "0"]) { $1 })
                == .failure(.badValue(variable: "SLURM_ARRAY_TASK_ID", value: "0")))
        let both = [
            "SLURM_ARRAY_TASK_ID": "1", "SLURM_ARRAY_TASK_COUNT": "2", "SLURM_PROCID": "0", "SLURM_NTASKS": "1",
        ]
        #expect(shard(both) == .success(Shard(index: 1, count: 2)!))
    }

    @Test("No launcher, numbers that are not, a missing or disagreeing count, an index past the count: each says so")
    func errors() {
        #expect(shard([:]) == .failure(.noLauncher))
        #expect(String(describing: Shard.LauncherError.noLauncher).contains("JOB_COMPLETION_INDEX with --shard-count"))
        for bad in ["", "-1", "+1", "1.0", "x", "٣", "99999999999999999999", "4294967296"] {
            #expect(shard(["PMI_RANK": bad, "PMI_SIZE": "4"]) == .failure(.badValue(variable: "PMI_RANK", value: bad)))
        }
        #expect(shard(["PMI_RANK": "0", "PMI_SIZE": "0"]) == .failure(.badValue(variable: "PMI_SIZE", value: "0")))
        #expect(shard(["JOB_COMPLETION_INDEX": "1"]) == .failure(.countNeeded(variable: "JOB_COMPLETION_INDEX")))
        #expect(shard(["SLURM_PROCID": "1"]) == .failure(.countNeeded(variable: "SLURM_PROCID")))
        #expect(
            shard(["PMI_RANK": "1", "PMI_SIZE": "4"], count: 3)
                == .failure(.countDisagrees(variable: "PMI_SIZE", launcher: 4, given: 3)))
        #expect(
            shard(["PMI_RANK": "4", "PMI_SIZE": "4"])
                == .failure(.indexOutOfRange(variable: "PMI_RANK", index: 4, count: 4)))
        #expect(
            shard(["SLURM_ARRAY_TASK_ID": "1", "SLURM_ARRAY_TASK_COUNT": "2", "SLURM_ARRAY_TASK_STEP": "0"])
                == .failure(.badValue(variable: "SLURM_ARRAY_TASK_STEP", value: "0")))
    }
}

/// `Shard.balance`: shards balanced by bytes, the same for every task that lists the same files.
@Suite struct ShardBalanceTests {
    @Test("Largest first to the lightest shard: totals within one file of each other, whatever the input order")
    func balance() {
        var generator = SystemRandomNumberGenerator()
        var files = (0..<500).map { (path: "f\($0)", size: UInt64.random(in: 1...100_000, using: &generator)) }
        files.append((path: "huge", size: 10_000_000))
        files += (0..<20).map { (path: "same\($0)", size: 4096) }  // ties, broken by path
        for count in [1, 2, 3, 7] {
            let assignment = Shard.balance(files, count: count)
            #expect(assignment.allSatisfy { (0..<count).contains($0) })
            var totals = [UInt64](repeating: 0, count: count)
            for (file, shard) in zip(files, assignment) { totals[shard] += file.size }
            // Each file went to the lightest shard: no two totals differ by more than the
            // largest file, and with 7 shards (more than the rest fills) the huge one is alone.
            #expect(totals.max()! - totals.min()! <= 10_000_000, "\(totals)")
            if count == 7 {
                let hugeShard = assignment[files.firstIndex { $0.path == "huge" }!]
                #expect(totals[hugeShard] == 10_000_000, "\(totals)")
            }
            // Another order of the same files: the same shard for every path.
            let shuffled = files.shuffled(using: &generator)
            let again = Dictionary(
                uniqueKeysWithValues: zip(shuffled.map(\.path), Shard.balance(shuffled, count: count)))
            #expect(zip(files, assignment).allSatisfy { again[$0.0.path] == $0.1 })
        }
        #expect(Shard.balance([], count: 3).isEmpty)
        // Ties: equal sizes go by path to shards in index order.
        #expect(
            Shard.balance([(path: "b", size: 1), (path: "a", size: 1), (path: "c", size: 1)], count: 3) == [1, 0, 2])
    }
}
