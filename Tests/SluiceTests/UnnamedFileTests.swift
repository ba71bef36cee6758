import Foundation
import Testing

@testable import Sluice
@testable import SluiceTransfer

#if canImport(Glibc)
    import Glibc
#endif

/// Small files received whole are created unnamed (`O_TMPFILE`) and named by `linkat` once
/// complete: what is at a name is never replaced nor followed, nothing else is left behind,
/// and with the default flush no name appears before the batch is on disk.
@Suite("Small files created unnamed, named once complete")
struct UnnamedFileTests {
    static func request(_ path: String, _ bytes: [UInt8], mode: UInt32 = 0o640) -> EntryRequest {
        let header = EntryHeader(
            flags: Wire.FileFlags.sizeKnown, size: UInt64(bytes.count), mode: mode, mtimeSeconds: 1_600_000_000,
            mtimeNanoseconds: 7, path: Array(path.utf8))
        let components = path.split(separator: "/").map(String.init)
        return EntryRequest(components: components, relative: path, header: header)
    }

    static func store(_ dst: String) throws -> ReceiverStore {
        ReceiverStore(destination: try Destination(path: dst, permissionBits: 0o777))
    }

    @Test("Stored with its bytes, mode and mtime; an existing name is refused and left as it was")
    func storedOrRefused() throws {
        try withTemporaryDirectory { dst in
            let store = try Self.store(dst)
            let bytes = randomBytes(5000, seed: 3)
            guard
                case .stored = store.storeWhole(
                    Self.request("a/f", bytes), bytes: bytes[...], overwrite: false, fsync: false)
            else {
                Issue.record("not stored")
                return
            }
            #expect(readFile(dst + "/a/f") == bytes)
            let info = try #require(FileInfo(dst + "/a/f"))
            #expect(info.mode == 0o640 && info.mtimeSeconds == 1_600_000_000 && info.mtimeNanoseconds == 7)

            // A file, a directory, and a link (dangling, to outside) at the name: each refused,
            // none replaced or followed, nothing left beside them.
            try writeFile(dst + "/old", Array("old".utf8))
            mkdir(dst + "/dir", 0o755)
            symlink(dst + "/../outside", dst + "/link")
            for (name, reason) in [("old", "exists"), ("dir", "exists (a directory)"), ("link", "exists")] {
                let outcome = store.storeWhole(
                    Self.request(name, bytes), bytes: bytes[...], overwrite: false, fsync: false)
                guard case .rejected(.refused(.exists, let said)) = outcome else {
                    Issue.record("\(name): \(outcome)")
                    continue
                }
                #expect(said == reason)
            }
            #expect(readFile(dst + "/old") == Array("old".utf8))
            #expect(!fileExists(dst + "/../outside"))
            #expect(treePaths(dst) == ["a", "a/f", "dir", "link", "old"])
        }
    }

    @Test("With the default flush: no name at all until the batch is committed, then the final one")
    func stagedHasNoName() throws {
        try withTemporaryDirectory { dst in
            let store = try Self.store(dst)
            let bytes = randomBytes(3000, seed: 4)
            // A partial of another transfer under the temporary name is none of this file's business.
            try writeFile(dst + "/.f.sluice-part", Array("partial".utf8))
            let outcome = store.storeWhole(Self.request("f", bytes), bytes: bytes[...], overwrite: false, fsync: true)
            guard case .staged(let staged) = outcome else {
                Issue.record("not staged: \(outcome)")
                return
            }
            #expect(staged.opened.unnamed)
            #expect(treePaths(dst) == [".f.sluice-part"])
            #expect(store.commitStaged([staged], overwrite: false) == [nil])
            #expect(readFile(dst + "/f") == bytes)
            #expect(readFile(dst + "/.f.sluice-part") == Array("partial".utf8))

            // Named by another meanwhile: refused at the commit, the other file kept.
            let second = store.storeWhole(Self.request("g", bytes), bytes: bytes[...], overwrite: false, fsync: true)
            guard case .staged(let late) = second else {
                Issue.record("not staged: \(second)")
                return
            }
            try writeFile(dst + "/g", Array("first".utf8))
            #expect(store.commitStaged([late], overwrite: false) == [.refused(.exists, "exists")])
            #expect(readFile(dst + "/g") == Array("first".utf8))
            #expect(treePaths(dst) == [".f.sluice-part", "f", "g"])
        }
    }

    /// How many of this process's descriptors are open on `path`.
    static func descriptors(on path: String) -> Int {
        let target = URL(fileURLWithPath: path).resolvingSymlinksInPath().path
        let fds = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
        return fds.filter {
            (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\($0)")) == target
        }
        .count
    }

    @Test("A job's files in one directory share one descriptor of it, closed when the last of them is named")
    func sharedParent() throws {
        try withTemporaryDirectory { dst in
            let store = try Self.store(dst)
            mkdir(dst + "/d", 0o755)
            // Three files of 100 bytes, lying one after another in one buffer (as a BATCH's do).
            let all = (0..<3).flatMap { randomBytes(100, seed: UInt64($0)) }
            // With fsync: staged, not yet named; the three hold one descriptor of `d` (not one each).
            var staged = all.withUnsafeBytes { buffer in
                let files = (0..<3).map {
                    (
                        request: Self.request("d/f\($0)", randomBytes(100, seed: UInt64($0))),
                        bytes: UnsafeRawBufferPointer(rebasing: buffer[$0 * 100..<($0 + 1) * 100])
                    )
                }
                return store.storeWholes(files, overwrite: false, fsync: true).compactMap {
                    outcome -> ReceiverStore.StagedFile? in
                    if case .staged(let file) = outcome { return file }
                    Issue.record("not staged: \(outcome)")
                    return nil
                }
            }
            #expect(Self.descriptors(on: dst + "/d") == 1)
            #expect(store.commitStaged(staged, overwrite: false) == [nil, nil, nil])
            staged.removeAll()
            #expect(Self.descriptors(on: dst + "/d") == 0, "closed once the last staged file let it go")
            // Without fsync, named at once: nothing of `d` stays open after the job.
            let stored = all.withUnsafeBytes { buffer in
                let more = (3..<6).map {
                    (
                        request: Self.request("d/f\($0)", [0]),
                        bytes: UnsafeRawBufferPointer(rebasing: buffer[$0..<$0 + 1])
                    )
                }
                return store.storeWholes(more, overwrite: false, fsync: false)
            }
            #expect(stored.allSatisfy { if case .stored = $0 { true } else { false } })
            #expect(Self.descriptors(on: dst + "/d") == 0)
            #expect(treePaths(dst) == ["d"] + (0..<6).map { "d/f\($0)" })
            for index in 0..<3 { #expect(readFile(dst + "/d/f\(index)") == randomBytes(100, seed: UInt64(index))) }
        }
    }

    @Test("Made with its final mode where the umask leaves it whole, set after where not; named either way")
    func modesAndBothWaysOfNaming() throws {
        // Whatever the process's umask is, these must arrive exactly: 0o666 and 0o777 have bits
        // a usual umask (022) takes away at creation, so they need the `fchmod` the others skip.
        let modes: [UInt32] = [0o600, 0o644, 0o444, 0o666, 0o777, 0o750, 0o400]
        defer { Destination.linksByEmptyPath.store(true, ordering: .relaxed) }
        for byEmptyPath in [true, false] {
            // Without AT_EMPTY_PATH (a process without CAP_DAC_READ_SEARCH): through /proc.
            Destination.linksByEmptyPath.store(byEmptyPath, ordering: .relaxed)
            try withTemporaryDirectory { dst in
                let store = try Self.store(dst)
                for (index, mode) in modes.enumerated() {
                    let bytes = randomBytes(100 + index, seed: UInt64(index))
                    let outcome = store.storeWhole(
                        Self.request("m\(index)", bytes, mode: mode), bytes: bytes[...], overwrite: false, fsync: false)
                    guard case .stored = outcome else {
                        Issue.record("mode \(String(mode, radix: 8)): \(outcome)")
                        continue
                    }
                    #expect(readFile(dst + "/m\(index)") == bytes)
                    #expect(FileInfo(dst + "/m\(index)")?.mode == mode, "mode \(String(mode, radix: 8))")
                }
                // An existing name is refused the same way on either path.
                let outcome = store.storeWhole(Self.request("m0", [1]), bytes: [1][...], overwrite: false, fsync: false)
                guard case .rejected(.refused(.exists, _)) = outcome else {
                    Issue.record("replaced: \(outcome)")
                    return
                }
                #expect(treePaths(dst) == modes.indices.map { "m\($0)" }.sorted())
            }
        }
    }

    @Test("The /proc path a file without a name is linked by is spelled out right for any descriptor")
    func procPaths() {
        for fd: Int32 in [0, 7, 10, 99, 12_345, Int32.max] {
            #expect(Destination.withProcPath(of: fd) { String(cString: $0) } == "/proc/self/fd/\(fd)")
        }
    }
}
