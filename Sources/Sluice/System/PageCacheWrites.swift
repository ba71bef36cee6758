/// How much one `write(2)`, `pwrite(2)` or `splice(2)` puts into the page cache of a regular
/// file at most: larger writes are made in pieces of this size.
///
/// A write of 1 MiB into a file's page cache lets the kernel make 1 MiB folios for it, and on a
/// virtual machine whose freed memory goes back to the host (free page reporting, ballooning)
/// those come from memory the host has taken back: the copy into them then takes 3–4× the
/// system time (on the reference machine, 1 GiB written as 1 MiB `write`s cost 0.73–1.02 s of
/// system time a few seconds after the previous file was removed, as 512 KiB `write`s
/// 0.18–0.25 s). Where memory stays with the machine, 512 KiB pieces cost what 1 MiB ones do
/// (0.20–0.24 s for the same GiB), so they are used everywhere. Benchmarks/RESULTS.md has the
/// measurements.
enum PageCacheWrites {
    static let maxPiece = 512 * 1024

    /// The bytes of `count` that one call should write.
    static func piece(_ count: Int) -> Int { min(count, maxPiece) }
}
