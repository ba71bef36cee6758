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
