import Sluice
import SluiceTransfer

extension SendOptions {
    /// `--watch` and `--settle`: what goes with them. A watch sends directories over one
    /// connection, compares (it implies `--sync`), and changes things: not with `-`,
    /// `--streams`, `--dry-run`, `--files-from` or `--shard`.
    mutating func readWatch(_ parsed: ParsedArguments) throws(UsageError) {
        if let settle = try parsed.last(Self.settle) {
            guard watch else { throw UsageError("\(settle.spelling) goes with --watch") }
            settleMilliseconds = settle.value
        }
        guard watch, let spelling = parsed.spelling(of: Self.watch) else { return }
        if paths.contains("-") { throw UsageError("\(spelling): standard input cannot be watched") }
        if streams > 1 { throw UsageError("\(spelling) sends over one connection: not with --streams") }
        if dryRun { throw UsageError("\(spelling) changes the receiver's tree: not with --dry-run") }
        if filesFrom != nil || shard != nil {
            throw UsageError("\(spelling) watches whole directories: not with --files-from or --shard")
        }
    }
}
