import Sluice
import SluiceTransfer

/// `send`'s flags for what is read of the sources besides names, bytes, modes and times, each
/// with the `SourceOptions` it turns on: the one table from which `send` takes them, lists
/// them in `--help` (in this order) and reads them.
enum SourceOptionFlags {
    static let numericIDs = Flag("numeric-ids", help: "with --owner: by number, not by name")

    /// Each flag and what it turns on.
    static let table: [(flag: Flag, turnsOn: SourceOptions)] = [
        (
            Flag(
                "hard-links", short: "H",
                help: "send a file with several names once, and the\nother names as links to it"),
            .hardLinks
        ),
        (Flag("xattrs", short: "X", help: "send user.* extended attributes"), .xattrs),
        (
            Flag(
                "owner", help: "send owners and groups, kept by a receiver\nrunning as root (by name, else by number)"),
            .owners
        ),
        (numericIDs, .numericIDs),
        (
            Flag(
                "devices",
                help:
                    "send character and block devices, made by a\nreceiver running as root with --devices (else\nrefused)"
            ),
            .devices
        ),
        (Flag("specials", help: "send FIFOs and sockets (never opened)"), .specials),
        (Flag(nil, short: "D", help: "--devices --specials"), [.devices, .specials]),
        (
            Flag(
                "archive", short: "a",
                help: "what rsync -a keeps: with links, modes and\ntimes (always sent), --owner, -D"),
            [.owners, .devices, .specials]
        ),
    ]

    /// The options the flags given turn on, together.
    static func read(_ parsed: ParsedArguments) -> SourceOptions {
        table.reduce(into: []) { options, row in
            if parsed[row.flag] { options.formUnion(row.turnsOn) }
        }
    }
}
