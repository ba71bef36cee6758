import Sluice

#if canImport(Glibc)
    import Glibc
#endif

/// The directories a receiver's session gives the sender's mode and mtime at goodbye (those it
/// made, and with sync those it found there): kept compactly (one buffer of paths, 24 bytes an
/// entry) and bounded, so that a sender announcing or CHECKing a million directories costs the
/// receiver a known amount of memory. Past the bound a directory is left as it is, and counted.
struct DirectoriesToSettle: Sendable {
    /// The most directories one session settles.
    static let maxCount = 1 << 19
    /// The most bytes of their paths.
    static let maxPathBytes = 16 << 20

    private struct Entry: Sendable {
        /// Where the path ends in `paths` (it starts where the previous one ends).
        var end: UInt32
        var mode: UInt32
        var seconds: Int64
        var nanoseconds: Int32
    }

    private var paths: [UInt8] = []
    private var entries: [Entry] = []
    /// Directories not kept: past `maxCount` or `maxPathBytes`.
    private(set) var dropped = 0

    var isEmpty: Bool { entries.isEmpty }
    var count: Int { entries.count }

    /// Keeps `path` to be settled; false (and counted in `dropped`) past the bound.
    @discardableResult
    mutating func append(_ path: String, mode: UInt32, mtime: timespec) -> Bool {
        let bytes = path.utf8.count
        guard entries.count < Self.maxCount, paths.count + bytes <= Self.maxPathBytes else {
            dropped += 1
            return false
        }
        paths.append(contentsOf: path.utf8)
        entries.append(
            Entry(
                end: UInt32(paths.count), mode: mode, seconds: Int64(mtime.tv_sec),
                nanoseconds: Int32(truncatingIfNeeded: mtime.tv_nsec)))
        return true
    }

    /// Calls `body` with each directory, the last kept first (a directory after what is below
    /// it, as they were announced parents first).
    func forEachLastFirst(_ body: (_ path: String, _ mode: UInt32, _ mtime: timespec) -> Void) {
        for index in entries.indices.reversed() {
            let entry = entries[index]
            let start = index == 0 ? 0 : Int(entries[index - 1].end)
            let path = String(decoding: paths[start..<Int(entry.end)], as: UTF8.self)
            body(path, entry.mode, timespec(tv_sec: Int(entry.seconds), tv_nsec: Int(entry.nanoseconds)))
        }
    }
}

/// The warnings of one receiver's session: the first `shown` are told, the rest counted, so
/// that a sender that makes the receiver warn a million times leaves a few lines and
/// "… and N more".
struct SessionWarnings: Sendable {
    static let shown = 5

    private(set) var told = 0
    private(set) var held = 0

    /// Whether the next warning is to be told (else it is counted in `held`).
    mutating func admit() -> Bool {
        guard told < Self.shown else {
            held += 1
            return false
        }
        told += 1
        return true
    }

    /// Counts `count` warnings held back elsewhere (by a job that told only its first ones).
    mutating func hold(_ count: Int) { held += count }

    /// The line that tells of those held back, if any were.
    var summary: String? {
        held > 0 ? "… and \(held) more warning\(held == 1 ? "" : "s") in this session" : nil
    }
}
