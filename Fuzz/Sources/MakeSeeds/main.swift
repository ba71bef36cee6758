// Writes the fuzz targets' seed corpora: valid sessions of the transfer protocol, encoded with
// the protocol's own encoder, for FuzzFrames, FuzzReceiver and FuzzSender; and the compressed files that
// `Fuzz/make-seeds.sh` made with gzip and pigz, each behind a seed byte, for FuzzInflate; and
// what strangers and senders send to a receiver over TLS, for FuzzTLSReceiver.
//
//     MakeSeeds sessions CORPUS_DIR          (writes CORPUS_DIR/frames, receiver, sender)
//     MakeSeeds inflate OUT_DIR FILE...
//     MakeSeeds tls OUT_DIR
import Foundation
import FuzzSupport

@testable import Sluice
@testable import SluiceTransfer

/// A sender's stream: the magic, then messages.
struct SenderStream {
    var bytes = Wire.magic

    mutating func frame(_ frame: Frame) { bytes += frame.encoded }

    mutating func hello(_ capabilities: Set<String> = ["sha256", "deflate", "resume"]) {
        frame(.hello(version: Wire.version, capabilities: capabilities))
    }

    /// DATA messages of at most `piece` bytes each.
    mutating func data(_ payload: [UInt8], piece: Int = 1000) {
        var offset = 0
        while offset < payload.count {
            let n = min(piece, payload.count - offset)
            bytes += [Wire.MessageType.data.rawValue] + bigEndian(UInt32(n)) + payload[offset..<offset + n]
            offset += n
        }
    }

    /// FILE, its DATA (compressed when asked) and END with the content's size and SHA-256.
    mutating func file(
        _ path: String, _ content: [UInt8], flags: UInt8 = Wire.FileFlags.sizeKnown, mode: UInt32 = 0o644,
        piece: Int = 1000
    ) {
        let size: UInt64 = flags & Wire.FileFlags.sizeKnown != 0 ? UInt64(content.count) : 0
        frame(.file(entry(path, flags: flags, size: size, mode: mode)))
        data(flags & Wire.FileFlags.compressed != 0 ? deflate(content) : content, piece: piece)
        frame(.end(size: UInt64(content.count), digest: SHA256Digest.hash(content)))
    }

    /// A FILE the receiver will refuse: a sender sends nothing more for it before the answer.
    mutating func refusedFile(_ path: String, size: Int) {
        frame(.file(entry(path, flags: Wire.FileFlags.sizeKnown, size: UInt64(size), mode: 0o644)))
    }

    /// RANGE for `range` of `content` (path `path`), its DATA, and RANGE-END with both digests.
    mutating func range(_ path: String, _ content: [UInt8], _ range: ByteRange) {
        let header = entry(
            path, flags: Wire.FileFlags.sizeKnown | Wire.FileFlags.resumable, size: UInt64(content.count), mode: 0o644)
        frame(.range(RangeHeader(range: range, entry: header)))
        let part = Array(content[Int(range.start)..<Int(range.start + range.length)])
        data(part)
        frame(.rangeEnd(length: range.length, digest: SHA256Digest.hash(part), fileDigest: SHA256Digest.hash(content)))
    }

    mutating func directory(_ path: String) {
        frame(.directory(entry(path, flags: 0, size: 0, mode: 0o755)))
    }

    func entry(_ path: String, flags: UInt8, size: UInt64, mode: UInt32) -> EntryHeader {
        EntryHeader(
            flags: flags, size: size, mode: mode, mtimeSeconds: 1_764_547_200, mtimeNanoseconds: 500,
            path: Array(path.utf8))
    }
}

func bigEndian(_ value: UInt32) -> [UInt8] { withUnsafeBytes(of: value.bigEndian) { Array($0) } }

/// `content` as raw deflate, as a sender compresses a file's data.
func deflate(_ content: [UInt8]) -> [UInt8] {
    guard let stage = try? Deflate(format: .deflate, level: 6) else { fatalError("MakeSeeds: zlib failed") }
    var out: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 65536)
    var input = content[...]
    while !input.isEmpty {
        let p = input.withUnsafeBytes { i in
            buffer.withUnsafeMutableBytes { o in try? stage.process(i, into: o) }
        }
        guard let p else { fatalError("MakeSeeds: deflate failed") }
        out += buffer[0..<p.produced]
        input = input.dropFirst(p.consumed)
    }
    while true {
        let p = buffer.withUnsafeMutableBytes { o in try? stage.finish(into: o) }
        guard let p else { fatalError("MakeSeeds: deflate failed") }
        out += buffer[0..<p.produced]
        if p.finished { return out }
    }
}

/// One raw deflate stream of `pieces`, cut where each piece ends (a sync flush; the last piece
/// finishes the stream): each piece's compressed bytes, as a compressed delta sends them.
func deflateFlushed(_ pieces: [[UInt8]]) -> [[UInt8]] {
    guard let stage = try? ParallelDeflate(format: .deflate, level: 6, threads: 1) else {
        fatalError("MakeSeeds: deflate failed")
    }
    var buffer = [UInt8](repeating: 0, count: 1 << 16)
    return pieces.indices.map { index in
        var out: [UInt8] = []
        var input = pieces[index][...]
        while true {
            let last = index == pieces.count - 1 && input.isEmpty
            let p = buffer.withUnsafeMutableBytes { o in
                last ? try? stage.finish(into: o) : input.withUnsafeBytes { i in try? stage.process(i, into: o) }
            }
            guard let p else { fatalError("MakeSeeds: deflate failed") }
            out += buffer[0..<p.produced]
            input = input.dropFirst(p.consumed)
            if p.finished { return out }
            if !last && input.isEmpty && p.produced == 0 {
                stage.flush()
                if stage.heldBytes == 0 { return out }
            }
        }
    }
}

let text = Array(String(repeating: "The quick brown fox jumps over the lazy dog.\n", count: 40).utf8)
let binary = (0..<3000).map { UInt8(truncatingIfNeeded: $0 &* 7919 >> 3) }

/// Sessions a sender could send, by name.
func sessions() -> [(String, [UInt8])] {
    var all: [(String, [UInt8])] = []
    func add(_ name: String, _ build: (inout SenderStream) -> Void) {
        var s = SenderStream()
        build(&s)
        all.append((name, s.bytes))
    }
    add("empty") {
        $0.hello()
        $0.frame(.bye)
    }
    add("one-file") {
        $0.hello()
        $0.file("notes.txt", text)
        $0.frame(.bye)
    }
    add("tree") {
        $0.hello()
        $0.directory("photos")
        $0.directory("photos/2024")
        $0.file("photos/2024/a.bin", binary, mode: 0o600, piece: 700)
        $0.file("photos/readme", Array("hello\n".utf8))
        $0.file("photos/empty", [])
        $0.frame(.bye)
    }
    add("compressed") {
        $0.hello()
        $0.file("big.txt", text, flags: Wire.FileFlags.sizeKnown | Wire.FileFlags.compressed, piece: 64)
        $0.frame(.bye)
    }
    add("stream-compressed") {
        $0.hello()
        $0.file("stdin", text, flags: Wire.FileFlags.compressed)
        $0.frame(.bye)
    }
    add("stream") {
        $0.hello(["sha256"])
        $0.file("stdin", binary, flags: 0, piece: 512)
        $0.frame(.bye)
    }
    add("eager-tree") {
        $0.hello()
        let eager = Wire.FileFlags.sizeKnown | Wire.FileFlags.eager
        $0.directory("src")
        $0.file("src/a.c", Array("int main(void) { return 0; }\n".utf8), flags: eager)
        $0.file("src/empty", [], flags: eager)
        // Refused at its header: its data is skipped up to END.
        $0.file("../escape", Array(binary[0..<300]), flags: eager)
        $0.file("src/b.bin", Array(binary[0..<2000]), flags: eager, piece: 512)
        $0.file("src/large.bin", binary, flags: Wire.FileFlags.sizeKnown | Wire.FileFlags.resumable)
        $0.frame(.bye)
    }
    add("eager-batch") {
        // Small files in a BATCH (a receiver offering eager offers batch): stored together, each
        // answered in its turn; one refused at its header inside; one file after it alone.
        $0.hello()
        let eager = Wire.FileFlags.sizeKnown | Wire.FileFlags.eager
        var inner = SenderStream()
        inner.bytes = []
        inner.file("b/a.c", Array("int main(void) { return 0; }\n".utf8), flags: eager)
        inner.file("b/empty", [], flags: eager)
        inner.file("../escape", Array(binary[0..<300]), flags: eager)
        inner.file("b/c.bin", Array(binary[0..<3000]), flags: eager, piece: 700)
        $0.directory("b")
        $0.frame(.batch(length: inner.bytes.count))
        $0.bytes += inner.bytes
        $0.file("b/after", Array(binary[0..<100]), flags: eager)
        $0.frame(.bye)
    }
    add("resumable") {
        $0.hello()
        $0.file("movie.mkv", binary, flags: Wire.FileFlags.sizeKnown | Wire.FileFlags.resumable)
        $0.frame(.bye)
    }
    add("abort") {
        $0.hello()
        $0.frame(.file($0.entry("half", flags: Wire.FileFlags.sizeKnown, size: 5000, mode: 0o644)))
        $0.data(Array(binary[0..<1200]))
        $0.frame(.abort(reason: "read error"))
        $0.file("after", text)
        $0.frame(.bye)
    }
    add("refused-paths") {
        $0.hello()
        $0.refusedFile("../escape", size: text.count)
        $0.directory("/etc")
        $0.refusedFile("a/./b", size: 10)
        $0.refusedFile("dir//name", size: 10)
        $0.file("ok", text)
        $0.frame(.bye)
    }
    add("same-name") {
        $0.hello()
        $0.file("x", text)
        $0.refusedFile("x", size: binary.count)
        $0.directory("x")
        $0.frame(.bye)
    }
    add("wrong-digest") {
        $0.hello()
        $0.frame(.file($0.entry("bad", flags: Wire.FileFlags.sizeKnown, size: 6, mode: 0o644)))
        $0.data(Array("hello\n".utf8))
        $0.frame(.end(size: 6, digest: [UInt8](repeating: 0, count: 32)))
        $0.frame(.bye)
    }
    add("streams-range") {
        $0.hello(["sha256", "deflate", "resume", "streams"])
        $0.frame(.join(TransferJoin(id: Array(repeating: 0xA5, count: Wire.transferIDBytes), index: 0, count: 2)))
        $0.range("movie.mkv", binary, ByteRange(start: 0, length: UInt64(binary.count / 2)))
        $0.range(
            "movie.mkv", binary,
            ByteRange(start: UInt64(binary.count / 2), length: UInt64(binary.count - binary.count / 2)))
        $0.file("notes.txt", text)
        $0.frame(.bye)
    }
    add("groups-range") {
        // A task group's longer JOIN (task 1 of 4), its range, then the same range again.
        $0.hello(["sha256", "resume", "streams", "groups"])
        $0.frame(
            .join(
                TransferJoin(
                    id: Array(repeating: 0x6B, count: Wire.transferIDBytes), index: 0, count: 1,
                    group: TaskGroupJoin(task: 1, tasks: 4, name: Array("slurm-4242".utf8)))))
        $0.range("movie.mkv", binary, ByteRange(start: 0, length: UInt64(binary.count / 2)))
        $0.range("movie.mkv", binary, ByteRange(start: 0, length: UInt64(binary.count / 2)))
        $0.frame(.bye)
    }
    add("streams-bad-ranges") {
        $0.hello(["sha256", "streams"])
        $0.frame(.join(TransferJoin(id: Array(repeating: 0x5A, count: Wire.transferIDBytes), index: 1, count: 4)))
        // Outside the announced size, then overlapping, then a whole file's END for a range.
        let header = $0.entry("x", flags: Wire.FileFlags.sizeKnown, size: 100, mode: 0o644)
        $0.frame(.range(RangeHeader(range: ByteRange(start: 90, length: 20), entry: header)))
        $0.frame(.range(RangeHeader(range: ByteRange(start: 0, length: 60), entry: header)))
        $0.data(Array(binary[0..<60]))
        $0.frame(.rangeEnd(length: 60, digest: SHA256Digest.hash(binary[0..<60]), fileDigest: SHA256Digest.hash([])))
        $0.frame(.range(RangeHeader(range: ByteRange(start: 50, length: 50), entry: header)))
        $0.frame(.range(RangeHeader(range: ByteRange(start: 60, length: 40), entry: header)))
        $0.data(Array(binary[0..<40]))
        $0.frame(.end(size: 40, digest: SHA256Digest.hash(binary[0..<40])))
        $0.frame(.bye)
    }
    add("held-sha256") {
        // A resumed file's held bytes checked apart: HELD, then END with the digest of the rest
        // (the receiver decides what it holds, so HELD may come where none is wanted).
        $0.hello(["sha256", "resume", "held-sha256"])
        let flags = Wire.FileFlags.sizeKnown | Wire.FileFlags.resumable
        $0.frame(.file($0.entry("resumed.bin", flags: flags, size: UInt64(binary.count), mode: 0o644)))
        $0.data(Array(binary[100...]))
        $0.frame(.held(digest: SHA256Digest.hash(binary[0..<100])))
        $0.frame(.end(size: UInt64(binary.count), digest: SHA256Digest.hash(binary[100...])))
        $0.frame(.bye)
    }
    add("resume-token") {
        // A resumable file with the sender's TOKEN first: the receiver may vouch for what it
        // holds (no HELD then), or check it (HELD comes).
        $0.hello(["sha256", "resume", "held-sha256", "resume-token"])
        let flags = Wire.FileFlags.sizeKnown | Wire.FileFlags.resumable
        $0.frame(.token(Array(repeating: 0x5A, count: Wire.resumeTokenBytes)))
        $0.frame(.file($0.entry("resumed.bin", flags: flags, size: UInt64(binary.count), mode: 0o644)))
        $0.data(Array(binary[100...]))
        $0.frame(.end(size: UInt64(binary.count), digest: SHA256Digest.hash(binary[100...])))
        $0.frame(.bye)
    }
    add("metadata") {
        // Links, holes, attributes and owners (a receiver offering links, holes, xattrs and
        // owners): a directory and a file with attributes, a sparse file, a linked file and a
        // hard link to it, symbolic links, one out of the directory, then a file through it.
        $0.hello(["sha256", "resume", "links", "holes", "xattrs", "owners"])
        $0.frame(.xattr(ExtendedAttribute(name: "user.kind", value: Array("dir".utf8))))
        $0.frame(.owner(EntryOwner(uid: 1000, gid: 1000, user: "alice", group: "staff")))
        $0.directory("home")
        $0.frame(.xattr(ExtendedAttribute(name: "user.color", value: Array("blue".utf8))))
        $0.file("home/a.txt", text, flags: Wire.FileFlags.sizeKnown | Wire.FileFlags.linked)
        let sparse = Wire.FileFlags.sizeKnown | Wire.FileFlags.sparse
        $0.frame(.file($0.entry("home/disk.img", flags: sparse, size: 6000, mode: 0o644)))
        $0.data(Array(binary[0..<1000]))
        $0.frame(.hole(length: 4000))
        $0.data(Array(binary[0..<1000]))
        let hashed = Array(binary[0..<1000]) + Wire.holeDigestInput(4000) + Array(binary[0..<1000])
        $0.frame(.end(size: 6000, digest: SHA256Digest.hash(hashed)))
        let link = { (kind: Wire.LinkKind, path: String, target: String) in
            Frame.link(
                LinkHeader(
                    kind: kind, mtimeSeconds: 1_764_547_200, mtimeNanoseconds: 0, path: Array(path.utf8),
                    target: Array(target.utf8)))
        }
        $0.frame(link(.hard, "home/b.txt", "home/a.txt"))
        $0.frame(link(.symbolic, "home/c", "a.txt"))
        $0.frame(link(.symbolic, "home/out", "../../etc"))
        $0.refusedFile("home/out/passwd", size: 10)
        $0.frame(link(.hard, "home/d.txt", "etc/passwd"))
        $0.frame(.bye)
    }
    add("metadata-sync") {
        // A second run (a receiver offering sync): CHECKs first, then what differs, flagged
        // replace, and a CHECK through a path that climbs out.
        $0.hello(["sha256", "resume", "links", "sync"])
        let check = { (kind: Wire.CheckKind, path: String, size: Int, target: String) in
            Frame.check(
                CheckHeader(
                    kind: kind, flags: Wire.CheckFlags.apply, size: UInt64(size), mode: 0o644,
                    mtimeSeconds: 1_764_547_200, mtimeNanoseconds: 500, path: Array(path.utf8),
                    target: Array(target.utf8)))
        }
        $0.frame(check(.directory, "site", 0, ""))
        $0.frame(check(.file, "site/index.html", text.count, ""))
        $0.frame(check(.symbolicLink, "site/latest", 0, "index.html"))
        $0.frame(check(.file, "../escape", 1, ""))
        $0.directory("site")
        $0.file("site/index.html", text, flags: Wire.FileFlags.sizeKnown | Wire.FileFlags.replace)
        $0.frame(
            .link(
                LinkHeader(
                    kind: .symbolic, mtimeSeconds: 1_764_547_200, mtimeNanoseconds: 0, path: Array("site/latest".utf8),
                    target: Array("index.html".utf8), replace: true)))
        $0.frame(.bye)
    }
    add("metadata-sync-attributes") {
        // A second run with -X and --owner to a receiver offering sync-attributes: XATTR and
        // OWNER before the CHECKs (a directory's flagged xattrs with none: it is to have none),
        // a file sent again with its attributes, then an XATTR before a CHECK not flagged so.
        $0.hello(["sha256", "resume", "links", "xattrs", "owners", "sync", "sync-attributes"])
        let check = { (kind: Wire.CheckKind, path: String, size: Int, flags: UInt8) in
            Frame.check(
                CheckHeader(
                    kind: kind, flags: flags, size: UInt64(size), mode: 0o644, mtimeSeconds: 1_764_547_200,
                    mtimeNanoseconds: 500, path: Array(path.utf8),
                    target: kind == .symbolicLink ? Array("index.html".utf8) : []))
        }
        let flagged = Wire.CheckFlags.apply | Wire.CheckFlags.xattrs
        let color = Frame.xattr(ExtendedAttribute(name: "user.color", value: Array("blue".utf8)))
        let owner = Frame.owner(EntryOwner(uid: 1000, gid: 1000, user: "alice", group: "staff"))
        $0.frame(check(.directory, "site", 0, flagged))
        $0.frame(color)
        $0.frame(owner)
        $0.frame(check(.file, "site/index.html", text.count, flagged))
        $0.frame(owner)
        $0.frame(check(.symbolicLink, "site/latest", 0, Wire.CheckFlags.apply))
        $0.frame(color)
        $0.file("site/index.html", text, flags: Wire.FileFlags.sizeKnown | Wire.FileFlags.replace)
        $0.frame(color)
        $0.frame(check(.file, "site/other", 1, Wire.CheckFlags.apply))
        $0.frame(.bye)
    }
    add("metadata-delta") {
        // A file stored, then sent again as a delta against it: DATA and COPY, then a COPY
        // past the old file.
        $0.hello(["sha256", "resume", "sync"])
        let replace = Wire.FileFlags.sizeKnown | Wire.FileFlags.replace
        $0.file("db", binary, flags: replace)
        let changed = Array(binary[0..<1400]) + Array("new bytes".utf8) + Array(binary[1400...])
        $0.frame(.file($0.entry("db", flags: replace | Wire.FileFlags.delta, size: UInt64(changed.count), mode: 0o644)))
        $0.data(Array(binary[0..<700]))
        $0.frame(.copy(index: 1, count: 1))
        $0.data(Array("new bytes".utf8) + Array(binary[1400...]))
        $0.frame(.end(size: UInt64(changed.count), digest: SHA256Digest.hash(changed)))
        $0.frame(.file($0.entry("db", flags: replace | Wire.FileFlags.delta, size: 5000, mode: 0o644)))
        $0.frame(.copy(index: 1 << 40, count: 1))
        $0.frame(.bye)
    }
    add("metadata-delta-compressed") {
        // The same, compressed: the literal bytes in one deflate stream, flushed before the COPY.
        $0.hello(["sha256", "resume", "sync", "deflate"])
        let replace = Wire.FileFlags.sizeKnown | Wire.FileFlags.replace
        $0.file("db", binary, flags: replace)
        let tail = Array("new bytes".utf8) + Array(binary[1400...])
        let changed = Array(binary[0..<700]) + Array(binary[700..<1400]) + tail
        let flags = replace | Wire.FileFlags.delta | Wire.FileFlags.compressed
        $0.frame(.file($0.entry("db", flags: flags, size: UInt64(changed.count), mode: 0o644)))
        let pieces = deflateFlushed([Array(binary[0..<700]), tail])
        $0.data(pieces[0], piece: 100)
        $0.frame(.copy(index: 1, count: 1))
        $0.data(pieces[1], piece: 100)
        $0.frame(.end(size: UInt64(changed.count), digest: SHA256Digest.hash(changed)))
        $0.frame(.bye)
    }
    add("specials") {
        // Devices, FIFOs and sockets (a receiver offering specials, making devices): an OWNER
        // before a FIFO, a socket, a character device, one out of the directory, a CHECK of a
        // special, and a special replacing what is there.
        $0.hello(["sha256", "resume", "links", "owners", "sync", "specials"])
        let special = { (type: Wire.SpecialType, path: String, replace: Bool) in
            Frame.special(
                SpecialHeader(
                    mode: type.rawValue | 0o640, mtimeSeconds: 1_764_547_200, mtimeNanoseconds: 0,
                    major: type.isDevice ? 1 : 0, minor: type.isDevice ? 3 : 0, path: Array(path.utf8),
                    replace: replace))
        }
        $0.directory("dev")
        $0.frame(.owner(EntryOwner(uid: 1000, gid: 1000, user: "alice", group: "staff")))
        $0.frame(special(.fifo, "dev/pipe", false))
        $0.frame(special(.socket, "dev/sock", false))
        $0.frame(special(.characterDevice, "dev/null", false))
        $0.frame(special(.blockDevice, "../sda", false))
        $0.frame(
            .check(
                CheckHeader(
                    kind: .special, flags: Wire.CheckFlags.apply, size: 1 << 32 | 3,
                    mode: Wire.SpecialType.characterDevice.rawValue | 0o644, mtimeSeconds: 1_764_547_200,
                    mtimeNanoseconds: 0, path: Array("dev/null".utf8))))
        $0.frame(special(.characterDevice, "dev/null", true))
        $0.frame(.bye)
    }
    add("metadata-delta-resumed") {
        // A delta resumed where an interrupted one stopped: TOKEN, FILE flagged delta and
        // resumable, COPY and DATA for the bytes after the held ones, HELD, END.
        $0.hello(["sha256", "resume", "held-sha256", "resume-token", "sync"])
        let replace = Wire.FileFlags.sizeKnown | Wire.FileFlags.replace
        $0.file("db", binary, flags: replace)
        let changed = Array(binary[0..<700]) + Array("new bytes".utf8) + Array(binary[700...])
        $0.frame(.token([UInt8](repeating: 3, count: Wire.resumeTokenBytes)))
        let flags = replace | Wire.FileFlags.delta | Wire.FileFlags.resumable
        $0.frame(.file($0.entry("db", flags: flags, size: UInt64(changed.count), mode: 0o644)))
        $0.data(Array(changed[700..<709]))
        $0.frame(.copy(index: 1, count: UInt32(Delta.blockCount(UInt64(binary.count), 700) - 1)))
        $0.frame(.held(digest: SHA256Digest.hash(Array(changed[0..<700]))))
        $0.frame(.end(size: UInt64(changed.count), digest: SHA256Digest.hash(Array(changed[700...]))))
        $0.frame(.bye)
    }
    // Numbers at the edges of what an offset (2^63 - 1) and the field (2^64 - 1) hold: each
    // refused, or failing its file, with the session going on.
    let last = UInt64(Int64.max)
    add("metadata-edge-sparse") {
        // Sparse files: 2^64 - 1 bytes with a hole of 2^63 and a byte (eager: skipped once
        // refused); 2^63 - 1 bytes, a hole to its end and one more; a hole of 2^64 - 1 after
        // data; a byte of data at the last offset.
        $0.hello(["sha256", "resume", "links", "holes"])
        let sparse = Wire.FileFlags.sizeKnown | Wire.FileFlags.sparse
        $0.frame(.file($0.entry("huge.img", flags: sparse | Wire.FileFlags.eager, size: .max, mode: 0o644)))
        $0.frame(.hole(length: last + 1))
        $0.data([7])
        $0.frame(.end(size: last + 2, digest: SHA256Digest.hash(Wire.holeDigestInput(last + 1) + [7])))
        $0.frame(.file($0.entry("full.img", flags: sparse, size: last, mode: 0o644)))
        $0.frame(.hole(length: last))
        $0.frame(.hole(length: 1))
        $0.frame(.end(size: last, digest: SHA256Digest.hash(Wire.holeDigestInput(last))))
        $0.frame(.file($0.entry("small.img", flags: sparse | Wire.FileFlags.eager, size: 100, mode: 0o644)))
        $0.data(Array(binary[0..<10]))
        $0.frame(.hole(length: .max))
        $0.frame(.end(size: 100, digest: SHA256Digest.hash([])))
        $0.frame(.file($0.entry("edge.img", flags: sparse, size: last, mode: 0o644)))
        $0.frame(.hole(length: last - 1))
        $0.data([9])
        $0.frame(.end(size: last, digest: SHA256Digest.hash(Wire.holeDigestInput(last - 1) + [9])))
        $0.frame(.bye)
    }
    add("metadata-sync-edge-sizes") {
        // FILEs of 2^63, 2^64 - 1 and 2^63 - 1 bytes (eager: their data follows), then CHECKs of
        // such sizes, with a digest and without, and a device's numbers of 2^64 - 1.
        $0.hello(["sha256", "resume", "sync"])
        let eager = Wire.FileFlags.sizeKnown | Wire.FileFlags.eager
        for (name, size) in [("a", last + 1), ("b", UInt64.max), ("c", last)] {
            $0.frame(.file($0.entry(name, flags: eager, size: size, mode: 0o644)))
            $0.data(Array(binary[0..<3]))
            $0.frame(.end(size: 3, digest: SHA256Digest.hash(binary[0..<3])))
        }
        for size in [last, last + 1, UInt64.max] {
            for digest in [false, true] {
                $0.frame(
                    .check(
                        CheckHeader(
                            kind: .file, flags: digest ? Wire.CheckFlags.digest : 0, size: size, mode: 0o644,
                            mtimeSeconds: 1_764_547_200, mtimeNanoseconds: 500, path: Array("c".utf8),
                            digest: digest ? SHA256Digest.hash(binary) : [])))
            }
        }
        $0.frame(
            .check(
                CheckHeader(
                    kind: .special, size: .max, mode: Wire.SpecialType.blockDevice.rawValue | 0o600,
                    mtimeSeconds: 1_764_547_200, mtimeNanoseconds: 0, path: Array("c".utf8))))
        $0.frame(.bye)
    }
    add("metadata-delta-edges") {
        // A basis, then deltas: COPY of every block a count holds (the whole basis), COPY past a
        // size of 100, a delta of 2^63 bytes (refused before any signature), and last a COPY of
        // block 2^64 - 1 (a violation).
        $0.hello(["sha256", "resume", "sync"])
        let replace = Wire.FileFlags.sizeKnown | Wire.FileFlags.replace
        $0.file("db", binary, flags: replace)
        let delta = replace | Wire.FileFlags.delta
        $0.frame(.file($0.entry("db", flags: delta, size: UInt64(binary.count), mode: 0o644)))
        $0.frame(.copy(index: 0, count: .max))
        $0.frame(.end(size: UInt64(binary.count), digest: SHA256Digest.hash(binary)))
        $0.frame(.file($0.entry("db", flags: delta, size: 100, mode: 0o644)))
        $0.frame(.copy(index: 0, count: .max))
        $0.frame(.end(size: 100, digest: SHA256Digest.hash(binary[0..<100])))
        $0.frame(.file($0.entry("db", flags: delta, size: last + 1, mode: 0o644)))
        $0.frame(.file($0.entry("db", flags: delta, size: UInt64(binary.count), mode: 0o644)))
        $0.frame(.copy(index: .max, count: 1))
        $0.frame(.end(size: UInt64(binary.count), digest: SHA256Digest.hash(binary)))
        $0.frame(.bye)
    }
    add("streams-edge-ranges") {
        // RANGEs from 2^63 of a file of 2^64 - 1 bytes, from 2^64 - 1, of a length that passes
        // 2^64, and the last byte of a file of 2^63 - 1 bytes, with its data.
        $0.hello(["sha256", "resume", "streams"])
        $0.frame(.join(TransferJoin(id: Array(repeating: 0x3C, count: Wire.transferIDBytes), index: 0, count: 2)))
        let huge = $0.entry("huge", flags: Wire.FileFlags.sizeKnown, size: .max, mode: 0o644)
        $0.frame(.range(RangeHeader(range: ByteRange(start: last + 1, length: 1), entry: huge)))
        $0.frame(.range(RangeHeader(range: ByteRange(start: .max, length: 1), entry: huge)))
        $0.frame(.range(RangeHeader(range: ByteRange(start: last + 1, length: last + 6), entry: huge)))
        let full = $0.entry("full", flags: Wire.FileFlags.sizeKnown, size: last, mode: 0o644)
        $0.frame(.range(RangeHeader(range: ByteRange(start: last - 1, length: 1), entry: full)))
        $0.data([9])
        $0.frame(.rangeEnd(length: 1, digest: SHA256Digest.hash([9]), fileDigest: SHA256Digest.hash([9])))
        $0.frame(.bye)
    }
    add("sender-error") {
        $0.hello()
        $0.file("first", text)
        $0.frame(.error(reason: "disk full"))
    }
    return all
}

/// The answers a receiver sends, for the frame decoder's other direction.
func receiverStream() -> [UInt8] {
    var bytes = Wire.magic
    let frames: [Frame] = [
        .hello(version: Wire.version, capabilities: ["sha256", "deflate", "resume"]),
        .accept(offset: 0), .stored, .accept(offset: 4096), .failed(code: .data, reason: "SHA-256 mismatch"),
        .refused(code: .invalidPath, reason: "invalid path: '..' path component"),
        .refused(code: .exists, reason: "exists"), .error(reason: "busy"), .bye,
    ]
    for frame in frames { bytes += frame.encoded }
    return bytes
}

/// Receivers' answers to FuzzSender's five entries (a directory, a file, a stream, a
/// directory, a file), by name.
func answerSessions() -> [(String, [UInt8])] {
    let hello = Frame.hello(version: Wire.version, capabilities: ["sha256", "deflate", "resume"])
    let sessions: [(String, [Frame])] = [
        (
            "all-stored",
            [
                hello, .stored, .accept(offset: 0), .stored, .accept(offset: 0), .stored, .stored,
                .accept(offset: 0), .stored, .bye,
            ]
        ),
        (
            "resumed",
            [
                hello, .stored, .accept(offset: 10), .stored, .accept(offset: 0), .stored, .stored,
                .accept(offset: 1), .stored, .bye,
            ]
        ),
        (
            "refused",
            [
                hello, .refused(code: .invalidPath, reason: "invalid path"), .refused(code: .exists, reason: "exists"),
                .accept(offset: 0), .failed(code: .data, reason: "SHA-256 mismatch"), .stored, .accept(offset: 0),
                .refused(code: .tooLarge, reason: "too large"), .bye,
            ]
        ),
        (
            "no-resume",
            [
                .hello(version: Wire.version, capabilities: ["sha256"]), .stored, .accept(offset: 0), .stored,
                .accept(offset: 0), .failed(code: .io, reason: "No space left on device"), .stored, .accept(offset: 0),
                .stored, .bye,
            ]
        ),
        (
            "eager",
            [
                .hello(version: Wire.version, capabilities: ["sha256", "deflate", "resume", "eager"]), .stored,
                .stored, .accept(offset: 0), .stored, .stored, .refused(code: .exists, reason: "exists"), .bye,
            ]
        ),
        ("error", [hello, .stored, .accept(offset: 0), .error(reason: "busy")]),
        // A lying receiver's offsets at the edges: past the file, as far as an offset holds,
        // past what one holds, and 2^64 - 1.
        ("accept-edge-max", [hello, .stored, .accept(offset: .max), .bye]),
        ("accept-edge-offset", [hello, .stored, .accept(offset: UInt64(Int64.max)), .stored, .bye]),
        ("accept-edge-past", [hello, .stored, .accept(offset: UInt64(Int64.max) + 1), .stored, .bye]),
        (
            "streams",
            [
                .hello(version: Wire.version, capabilities: ["sha256", "deflate", "resume", "streams"]), .joined,
                .stored, .accept(offset: 0), .stored, .accept(offset: 0), .stored, .stored, .accept(offset: 0),
                .stored, .bye,
            ]
        ),
    ]
    return sessions.map { name, frames in (name, frames.reduce(Wire.magic) { $0 + $1.encoded }) }
}

/// A receiver's answers to a sync (FuzzSender with sync, no dry run): HAVE "differs" for each
/// CHECK, then SIGS of a basis of 2^64 - 1 bytes, from block 2^64 - 1, and of 2^63 bytes, and
/// an ACCEPT of 2^64 - 1. The seed byte is one that gives the target sync and a number of entries
/// whose CHECKs the HAVEs answer (FuzzSender's draws: compression, resume, a resume key, how many
/// of its 10 entries, sync, a dry run; it checks every entry but its third, a stream).
func syncSignaturesAtTheEdges() -> [UInt8] {
    let signature = [Delta.Signature(weak: 1, strong: 2)]
    for entries in 2...10 {
        let checks = entries > 2 ? entries - 1 : entries
        let frames: [Frame] =
            [
                .hello(
                    version: Wire.version,
                    capabilities: ["sha256", "deflate", "resume", "sync", "delta", "delta-resume", "held-sha256"])
            ]
            + Array(
                repeating: .have(HaveAnswer(status: .differs, differences: Wire.HaveDifference.size)), count: checks)
            + [
                .signatures(
                    SignatureBatch(blockSize: Delta.maximumBlock, size: .max, first: 0, signatures: signature)),
                .signatures(
                    SignatureBatch(blockSize: Delta.minimumBlock, size: 1 << 63, first: .max, signatures: signature)),
                .signatures(SignatureBatch(blockSize: Delta.maximumBlock, size: 1 << 63, first: 0, signatures: [])),
                .accept(offset: .max), .bye,
            ]
        let bytes = frames.reduce(Wire.magic) { $0 + $1.encoded }
        for byte in UInt8.min...UInt8.max {
            var c = Choices(seed: byte, length: bytes.count + 1)
            _ = c.below(2)
            guard c.below(4) != 0 else { continue }
            _ = c.below(2)
            if c.below(11) == entries && c.below(4) == 0 && c.below(4) != 0 { return [byte] + bytes }
        }
    }
    fatalError("MakeSeeds: no seed byte gives FuzzSender a sync")
}

/// The first flight of a client holding `key`: its ClientHello (with a new random and key share
/// each time it is made).
func clientHello(_ key: PreSharedKey) -> [UInt8] {
    var settings = TLSSettings(role: .client)
    settings.preSharedKey = key
    guard let context = try? TLSContext(settings), let engine = try? TLSEngine(context: context, name: "seed"),
        engine.handshake() == .wantInput
    else { fatalError("MakeSeeds: no ClientHello") }
    return Array(engine.output())
}

/// A TLS 1.2 ClientHello (ECDHE-RSA with AES-GCM, no TLS 1.3 extension), as an old client
/// sends: the receiver, TLS 1.3 only, must refuse it.
func tls12ClientHello() -> [UInt8] {
    func length16(_ bytes: [UInt8]) -> [UInt8] { [UInt8(bytes.count >> 8), UInt8(bytes.count & 0xff)] + bytes }
    let extensions =
        [0x00, 0x0a] + length16(length16([0x00, 0x17, 0x00, 0x18]))  // supported_groups
        + [0x00, 0x0b] + length16([0x01, 0x00])  // ec_point_formats
        + [0x00, 0x0d] + length16(length16([0x04, 0x01, 0x05, 0x01]))  // signature_algorithms
    let body: [UInt8] =
        [0x03, 0x03] + (0..<32).map { UInt8(truncatingIfNeeded: $0 &* 13 &+ 5) } + [0x00]
        + length16([0xc0, 0x2f, 0xc0, 0x30, 0x00, 0x9c]) + [0x01, 0x00] + length16(extensions)
    let handshake: [UInt8] = [0x01, 0x00] + length16(body)
    return [0x16, 0x03, 0x01] + length16(handshake)
}

/// FuzzTLSReceiver's seeds (after the seed byte), by name: a control byte, then raw bytes, or a
/// client's edits and plaintext (see that target).
func tlsSeeds() -> [(String, [UInt8])] {
    let hello = clientHello(FuzzKeys.receiver)
    let plaintext = Dictionary(uniqueKeysWithValues: sessions())
    let http = Array("GET / HTTP/1.1\r\nHost: receiver\r\n\r\n".utf8)
    // After the ClientHello: a ChangeCipherSpec and an application data record of garbage.
    let records: [UInt8] =
        [0x14, 0x03, 0x03, 0x00, 0x01, 0x01, 0x17, 0x03, 0x03, 0x00, 0x28] + (0..<40).map { UInt8($0) }
    let raw: UInt8 = 0
    let client: UInt8 = 0x01
    let wrongKey: UInt8 = 0x04
    let closeNotify: UInt8 = 0x08
    func edits(_ list: [[UInt8]]) -> [UInt8] { list.flatMap { $0 } }
    func offset(_ value: Int) -> [UInt8] { [UInt8(value >> 8), UInt8(value & 0xff)] }
    // The client's second flight starts after its ClientHello (a ChangeCipherSpec, then the
    // encrypted Finished).
    let second = hello.count
    return [
        ("raw-empty", [raw]),
        ("raw-plaintext-session", [raw] + plaintext["one-file"]!),
        ("raw-http", [raw] + http),
        ("raw-client-hello", [raw] + hello),
        ("raw-client-hello-truncated", [raw] + hello.prefix(hello.count / 2)),
        ("raw-client-hello-wrong-key", [raw] + clientHello(FuzzKeys.wrong)),
        ("raw-client-hello-then-records", [raw] + hello + records),
        ("raw-tls12-client-hello", [raw] + tls12ClientHello()),
        ("client-empty", [client | closeNotify] + plaintext["empty"]!),
        ("client-one-file", [client | closeNotify] + plaintext["one-file"]!),
        ("client-tree", [client | closeNotify] + plaintext["tree"]!),
        ("client-compressed-cut", [client] + plaintext["compressed"]!),
        ("client-http", [client | closeNotify] + http),
        ("client-wrong-key", [client | wrongKey | closeNotify] + plaintext["one-file"]!),
        // One edit each: kind (0 insert, 1 overwrite, 2 cut), offset, length, bytes.
        ("edit-record-before-hello", [client | 1 << 4] + edits([[0] + offset(0) + [5, 0x16, 0x03, 0x01, 0x00, 0x00]])),
        ("edit-hello-overwritten", [client | 1 << 4] + edits([[1] + offset(0x40) + [2, 0xff, 0xff]])),
        ("edit-hello-cut", [client | 1 << 4] + edits([[2] + offset(hello.count / 2) + [0]])),
        ("edit-finished-cut", [client | 1 << 4] + edits([[2] + offset(second + 6) + [0]])),
        (
            "edit-finished-overwritten",
            [client | closeNotify | 1 << 4] + edits([[1] + offset(second + 6 + 8) + [1, 0x00]]) + plaintext["empty"]!
        ),
        (
            "edit-two",
            [client | closeNotify | 2 << 4] + edits([[0] + offset(second) + [6, 0x14, 0x03, 0x03, 0x00, 0x01, 0x01]])
                + edits([[1] + offset(1) + [2, 0x03, 0x03]]) + plaintext["one-file"]!
        ),
        // The record's length made larger than what follows: the client stalls mid-record.
        ("edit-record-length-stall", [client | 1 << 4] + edits([[1] + offset(3) + [2, 0x03, 0x03]])),
    ]
}

func write(_ bytes: [UInt8], to path: String) {
    guard FileManager.default.createFile(atPath: path, contents: Data(bytes)) else {
        fatalError("MakeSeeds: cannot write \(path)")
    }
}

func makeDirectory(_ path: String) {
    do {
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    } catch {
        fatalError("MakeSeeds: \(error)")
    }
}

let arguments = CommandLine.arguments
switch arguments.count > 2 ? arguments[1] : "" {
case "sessions":
    let root = arguments[2]
    makeDirectory(root + "/frames")
    makeDirectory(root + "/receiver")
    for (name, bytes) in sessions() {
        // FuzzFrames: decode as the receiver does; FuzzReceiver: no size limit.
        let count = bytes.count + 1
        let frames = FuzzInput.seedByte(count: count) { $0.below(4) != 0 }
        write([frames] + bytes, to: "\(root)/frames/\(name)")
        // Sessions of a transfer over several connections need a receiver offering streams.
        let streams = name.hasPrefix("streams")
        let receiver = FuzzInput.seedByte(count: count) { c in
            _ = c.below(4)
            // The resumed sessions need a receiver that resumes.
            let resumes = c.below(4) != 0
            guard c.below(4) >= 2, resumes || !name.hasSuffix("resumed") else { return false }
            let offered = c.below(2) == 0
            let mustJoin = offered && c.below(8) == 0
            // The eager sessions need a receiver offering eager.
            guard !mustJoin && (offered || !streams) && (c.below(4) != 0 || !name.hasPrefix("eager")) else {
                return false
            }
            // The specials sessions: one offering links, owners, sync, specials and devices
            // besides (the draws in the order the receiver target makes them).
            if name.hasPrefix("specials") {
                return c.below(4) != 0 && c.below(4) != 0 && c.below(4) != 0 && c.below(2) == 0 && c.below(4) != 0
                    && c.below(4) != 0 && c.below(4) != 0 && c.below(4) != 0 && c.below(2) == 0
            }
            // The metadata sessions, one offering links, holes, xattrs, owners, sync and delta.
            // The attributes session, a receiver offering sync-attributes besides.
            let all =
                c.below(4) != 0 && c.below(4) != 0 && c.below(4) != 0 && c.below(2) == 0 && c.below(4) != 0
                && c.below(4) != 0 && (!name.hasSuffix("attributes") || c.below(4) != 0)
            return all || !name.hasPrefix("metadata")
        }
        write([receiver] + bytes, to: "\(root)/receiver/\(name)")
    }
    makeDirectory(root + "/sender")
    for (name, bytes) in answerSessions() {
        // The first five entries, resume allowed.
        let byte = FuzzInput.seedByte(count: bytes.count + 1) { c in
            _ = c.below(2)
            return c.below(4) != 0 && c.below(9) == 5
        }
        write([byte] + bytes, to: "\(root)/sender/\(name)")
    }
    write(syncSignaturesAtTheEdges(), to: "\(root)/sender/sync-sigs-edges")
    let answers = receiverStream()
    write([FuzzInput.seedByte(count: answers.count + 1) { $0.below(4) == 0 }] + answers, to: "\(root)/frames/answers")
case "inflate" where arguments.count > 3:
    let out = arguments[2]
    makeDirectory(out)
    for path in arguments[3...] {
        guard let data = FileManager.default.contents(atPath: path) else {
            fatalError("MakeSeeds: cannot read \(path)")
        }
        let bytes = [UInt8](data)
        // Auto-detection, as `sluice copy -d` decodes.
        let auto = FuzzInput.seedByte(count: bytes.count + 1) { $0.below(8) < 5 }
        write([auto] + bytes, to: out + "/" + (path as NSString).lastPathComponent)
    }
case "tls":
    let out = arguments[2]
    makeDirectory(out)
    // The seed byte only picks the pieces the client's bytes are written in.
    for (name, payload) in tlsSeeds() { write([0] + payload, to: "\(out)/\(name)") }
default:
    print("usage: MakeSeeds sessions CORPUS_DIR | MakeSeeds inflate OUT_DIR FILE... | MakeSeeds tls OUT_DIR")
    exit(64)
}
