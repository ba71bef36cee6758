import Sluice

/// What a sender reads of its sources, and sends, besides names, bytes, modes and times: the
/// options rsync users know as `-H`, `-X`, `--owner`, `--numeric-ids`, `--devices` and
/// `--specials`. Each is off by default; the walk (`SourceTree`) reads what they name and the
/// sender sends it where the receiver takes it.
///
/// ```swift
/// var options = TransferSendOptions()
/// options.sourceOptions = [.hardLinks, .xattrs, .owners]
/// ```
public struct SourceOptions: OptionSet, Hashable, Sendable {
    public let rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }

    /// Files with several names within the sources are sent once and linked (`-H`), where the
    /// receiver takes links.
    public static let hardLinks = SourceOptions(rawValue: 1 << 0)
    /// Send `user.*` extended attributes (`-X`), where the receiver takes them.
    public static let xattrs = SourceOptions(rawValue: 1 << 1)
    /// Send each entry's owner and group (`--owner`, `-a`), which a receiver running as root
    /// keeps: by name where it knows the name, else by number.
    public static let owners = SourceOptions(rawValue: 1 << 2)
    /// With `owners`: by number only (`--numeric-ids`).
    public static let numericIDs = SourceOptions(rawValue: 1 << 3)
    /// Send character and block devices found in the directories sent, with their numbers
    /// (`--devices`, `-D`, `-a`), where the receiver takes them (and, for devices, runs as
    /// root). Off, they are skipped with a warning.
    public static let devices = SourceOptions(rawValue: 1 << 4)
    /// Send FIFOs and sockets found in the directories sent (`--specials`, `-D`, `-a`) as
    /// entries of their own, never opened. Off, they are skipped with a warning.
    public static let specials = SourceOptions(rawValue: 1 << 5)
}
