import Foundation
import Testing

@testable import Sluice
@testable import SluiceTransfer

#if canImport(Glibc)
    import Glibc
#endif

@Suite struct ExcludePatternTests {
    func matches(_ pattern: String, _ path: String, directory: Bool = false) throws -> Bool {
        let compiled = try #require(try ExcludePattern(pattern))
        return compiled.matches(path.split(separator: "/").map(String.init), isDirectory: directory)
    }

    @Test func aNameWithoutASlashMatchesAtAnyDepth() throws {
        #expect(try matches("*.o", "x.o"))
        #expect(try matches("*.o", "a/b/x.o"))
        #expect(try matches("*.o", ".hidden.o"))
        #expect(try !matches("*.o", "x.c"))
        #expect(try matches(".git", "a/.git", directory: true))
        #expect(try matches("fil?.[ch]", "src/file.h"))
        #expect(try !matches("fil?.[ch]", "src/file.o"))
    }

    @Test func aSlashAnchorsToTheDirectorySent() throws {
        #expect(try matches("/TODO", "TODO"))
        #expect(try !matches("/TODO", "a/TODO"))
        #expect(try matches("build/out", "build/out"))
        #expect(try !matches("build/out", "x/build/out"))
        #expect(try !matches("a/*.c", "a/b/x.c"))
    }

    @Test func doubleStarsCrossDirectories() throws {
        #expect(try matches("**/cache", "cache", directory: true))
        #expect(try matches("**/cache", "a/b/cache", directory: true))
        #expect(try matches("logs/**", "logs/a/b.log"))
        #expect(try !matches("logs/**", "logs", directory: true))
        #expect(try matches("a/**/b", "a/b"))
        #expect(try matches("a/**/b", "a/x/y/b"))
        #expect(try !matches("a/**/b", "x/a/b"))
    }

    @Test func aTrailingSlashMatchesOnlyDirectories() throws {
        #expect(try matches("tmp/", "tmp", directory: true))
        #expect(try matches("tmp/", "a/tmp", directory: true))
        #expect(try !matches("tmp/", "tmp"))
    }

    @Test func blankLinesAndCommentsAreNoPatternsAndNegationIsRefused() throws {
        #expect(try ExcludePattern("") == nil)
        #expect(try ExcludePattern("   ") == nil)
        #expect(try ExcludePattern("# a comment") == nil)
        #expect(throws: SluiceError.self) { try ExcludePattern("!keep.o") }
        #expect(throws: SluiceError.self) { try ExcludePattern("/") }
    }
}

@Suite struct ShardTests {
    @Test func shardsSplitAnySetExactlyOnce() throws {
        let paths = (0..<2000).map { "tree/d\($0 % 37)/file-\($0).bin" }
        for count in [1, 2, 3, 7] {
            let shards = (0..<count).map { Shard(index: $0, count: count)! }
            for path in paths {
                #expect(shards.filter { $0.contains(path) }.count == 1)
            }
            if count > 1 {
                // Each shard gets a fair share, within a wide margin.
                for shard in shards {
                    let share = paths.filter { shard.contains($0) }.count
                    #expect(share > paths.count / count / 2, "\(shard): \(share)")
                }
            }
        }
    }

    @Test func parsing() {
        #expect(Shard(parsing: "0/4") == Shard(index: 0, count: 4))
        #expect(Shard(parsing: "3/4") == Shard(index: 3, count: 4))
        for bad in ["4/4", "-1/4", "1/0", "1", "a/b", "1/2/3", "", "/", "１/2"] {
            #expect(Shard(parsing: bad) == nil, "\(bad)")
        }
        // The hash is FNV-1a 64 of the path: the same on every host.
        #expect(Shard(index: 0, count: 2)!.contains("a") == ((0xaf63_dc4c_8601_ec8c as UInt64) % 2 == 0))
    }
}

@Suite struct SourceTreeSelectionTests {
    func tree(_ root: String) throws {
        for dir in ["src/a/b", "src/build", "src/.git"] {
            try FileManager.default.createDirectory(atPath: "\(root)/\(dir)", withIntermediateDirectories: true)
        }
        for file in ["src/x.c", "src/x.o", "src/a/y.c", "src/a/b/z.c", "src/a/b/z.o", "src/build/out", "src/TODO"] {
            try Data(file.utf8).write(to: URL(fileURLWithPath: "\(root)/\(file)"))
        }
    }

    func paths(_ root: String, _ selection: FileSelection) throws -> [String] {
        try SourceTree.entries([.path("\(root)/src")], selection: selection) { _ in }.map(\.relative)
    }

    @Test func excludedEntriesAreLeftOutAndExcludedDirectoriesNotWalked() throws {
        try withTemporaryDirectory { root in
            try tree(root)
            let patterns = try ["*.o", "build/", ".git", "/TODO"].compactMap { try ExcludePattern($0) }
            #expect(
                try paths(root, FileSelection(excludes: patterns)) == [
                    "src", "src/a", "src/a/b", "src/a/b/z.c", "src/a/y.c", "src/x.c",
                ])
        }
    }

    @Test func onlyTheListedPathsAndTheDirectoriesLeadingToThem() throws {
        try withTemporaryDirectory { root in
            try tree(root)
            #expect(
                try paths(root, FileSelection(only: ["a/b/z.c", "TODO"])) == [
                    "src", "src/TODO", "src/a", "src/a/b", "src/a/b/z.c",
                ])
            // A listed directory is sent whole, less what is excluded.
            let noObjects = try #require(try ExcludePattern("*.o"))
            #expect(
                try paths(root, FileSelection(excludes: [noObjects], only: ["a"]))
                    == ["src", "src/a", "src/a/b", "src/a/b/z.c", "src/a/y.c"])
            // A listed path that is not there is an error, as a missing operand is.
            #expect(throws: SluiceError.self) { try paths(root, FileSelection(only: ["a/nope"])) }
        }
    }

    @Test func theShardsOfATreeCoverItsFilesOnce() throws {
        try withTemporaryDirectory { root in
            try tree(root)
            let all = try paths(root, FileSelection())
            let files = Set(
                all.filter { !$0.hasSuffix("src") && !["src/a", "src/a/b", "src/build", "src/.git"].contains($0) })
            var seen: [String] = []
            for index in 0..<3 {
                let part = try paths(root, FileSelection(shard: Shard(index: index, count: 3)))
                seen += part.filter { files.contains($0) }
                // Every shard sends the directories.
                #expect(["src", "src/a", "src/a/b"].allSatisfy(part.contains))
            }
            #expect(seen.sorted() == files.sorted())
        }
    }
}
