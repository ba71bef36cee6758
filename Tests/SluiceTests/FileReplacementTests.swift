import Foundation
import Testing

@testable import Sluice

#if canImport(Glibc)
    import Glibc
#endif

/// `FileReplacement`: a finished temporary file takes an existing file's name atomically.
@Suite struct FileReplacementTests {
    private func inode(_ path: String) -> ino_t? {
        var info = stat()
        return lstat(path, &info) == 0 ? info.st_ino : nil
    }

    private func entries(_ dir: String) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: dir)) ?? []).sorted()
    }

    @Test func anExistingFileIsReplacedByExchangeAndRemoved() throws {
        try withTemporaryDirectory { dir in
            try Data("old".utf8).write(to: URL(fileURLWithPath: "\(dir)/name"))
            try Data("new".utf8).write(to: URL(fileURLWithPath: "\(dir)/.tmp"))
            let newInode = inode("\(dir)/.tmp")
            let method = try FileReplacement.replace("\(dir)/.tmp", with: "\(dir)/name", display: "name")
            #expect(method == .exchanged)
            #expect(inode("\(dir)/name") == newInode)
            #expect(FileManager.default.contents(atPath: "\(dir)/name") == Data("new".utf8))
            #expect(entries(dir) == ["name"])
        }
    }

    @Test func relativeToADirectoryDescriptor() throws {
        try withTemporaryDirectory { dir in
            try Data("old".utf8).write(to: URL(fileURLWithPath: "\(dir)/name"))
            try Data("new".utf8).write(to: URL(fileURLWithPath: "\(dir)/.tmp"))
            let parent = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
            #expect(parent >= 0)
            defer { close(parent) }
            #expect(try FileReplacement.replace(".tmp", with: "name", in: parent, display: "name") == .exchanged)
            #expect(FileManager.default.contents(atPath: "\(dir)/name") == Data("new".utf8))
            #expect(entries(dir) == ["name"])
        }
    }

    @Test func nothingAtTheNameIsAPlainRename() throws {
        try withTemporaryDirectory { dir in
            try Data("new".utf8).write(to: URL(fileURLWithPath: "\(dir)/.tmp"))
            #expect(try FileReplacement.replace("\(dir)/.tmp", with: "\(dir)/name", display: "name") == .renamed)
            #expect(FileManager.default.contents(atPath: "\(dir)/name") == Data("new".utf8))
            #expect(entries(dir) == ["name"])
        }
    }

    /// A directory that took the name while the copy ran is not swapped out of its place.
    @Test func aDirectoryAtTheNameIsRefusedAndBothStay() throws {
        try withTemporaryDirectory { dir in
            try FileManager.default.createDirectory(atPath: "\(dir)/name/inner", withIntermediateDirectories: true)
            try Data("new".utf8).write(to: URL(fileURLWithPath: "\(dir)/.tmp"))
            let directoryInode = inode("\(dir)/name")
            #expect(throws: SluiceError.self) {
                try FileReplacement.replace("\(dir)/.tmp", with: "\(dir)/name", display: "name")
            }
            #expect(inode("\(dir)/name") == directoryInode)
            #expect(entries("\(dir)/name") == ["inner"])
            #expect(FileManager.default.contents(atPath: "\(dir)/.tmp") == Data("new".utf8))
        }
    }

    @Test func aMissingTemporaryFileThrowsAndTheOldFileStays() throws {
        try withTemporaryDirectory { dir in
            try Data("old".utf8).write(to: URL(fileURLWithPath: "\(dir)/name"))
            #expect(throws: SluiceError.self) {
                try FileReplacement.replace("\(dir)/.missing", with: "\(dir)/name", display: "name")
            }
            #expect(FileManager.default.contents(atPath: "\(dir)/name") == Data("old".utf8))
        }
    }

    /// How many of the file's pages are in the page cache (`mincore` over a mapping, which
    /// reports residency without reading anything in).
    private func residentPages(_ fd: Int32, _ size: Int) -> Int {
        guard let map = mmap(nil, size, PROT_READ, MAP_SHARED, fd, 0), map != MAP_FAILED else { return -1 }
        defer { munmap(map, size) }
        let pages = (size + Int(getpagesize()) - 1) / Int(getpagesize())
        var vector = [UInt8](repeating: 0, count: pages)
        guard mincore(map, size, &vector) == 0 else { return -1 }
        return vector.filter { $0 & 1 != 0 }.count
    }

    /// A clean file's pages are given back; a dirty file's are left for the kernel to write, and
    /// neither changes a byte.
    @Test func releasingTheCacheDropsOnlyCleanPages() throws {
        try withTemporaryDirectory { dir in
            let size = 1 << 20
            let data = Data(randomBytes(size, seed: 11))
            try data.write(to: URL(fileURLWithPath: "\(dir)/f"))
            let fd = open("\(dir)/f", O_RDONLY)
            #expect(fd >= 0)
            defer { close(fd) }
            guard let dirty = FileReplacement.dirtyPages(fd) else { return }  // before Linux 6.5
            #expect(residentPages(fd, size) > 0)
            if dirty > 0 {
                FileReplacement.releaseCache(ofReplaced: fd)
                #expect(residentPages(fd, size) > 0)
            }
            fsync(fd)
            #expect(FileReplacement.dirtyPages(fd) == 0)
            FileReplacement.releaseCache(ofReplaced: "\(dir)/f")
            #expect(residentPages(fd, size) == 0)
            #expect(FileManager.default.contents(atPath: "\(dir)/f") == data)
            try FileReplacement.flush("\(dir)/f", display: "f")
            try FileReplacement.flush(dir, display: dir)
        }
    }
}
