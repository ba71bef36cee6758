import Sluice
import SluiceTransfer

/// A `sluice` command: its name, a line for the command list, its help, and how it runs.
protocol Command: Sendable {
    static var name: String { get }
    static var summary: String { get }
    /// The text of `sluice COMMAND --help`.
    static var help: String { get }
    /// The command's option parser (for `--help` and the man-page test).
    static var parser: ArgumentParser { get }
    /// Runs with the words after the command name; help and version are handled already.
    static func run(_ parsed: ParsedArguments) -> ExitStatus
}

/// The program: dispatches to a command, prints help and the version.
enum SluiceCommand {
    static let version = "0.1.0"

    /// The commands, in the order `--help` lists them. Add new commands here.
    static let commands: [any Command.Type] = [
        CopyCommand.self, SendCommand.self, ReceiveCommand.self, RelayCommand.self, BenchCommand.self,
        KeygenCommand.self,
    ]

    static let endpointsHelp = """
        Endpoints (SOURCE and DEST):
          PATH, file:PATH          a file (file: for a name with a colon)
          -                        stdin as SOURCE, stdout as DEST
          tcp:HOST:PORT            connect over TCP; IPv6 as tcp:[::1]:PORT
          tcp-listen:[HOST:]PORT   listen on TCP, accept one connection
          unix:PATH                connect to a Unix-domain socket
          unix-listen:PATH         listen on a Unix-domain socket, accept one
                                   connection
          tls:HOST:PORT[,OPT=VAL...]
                                   connect with TLS 1.3; OPT: cert=, key=, cafile=,
                                   verify=0|1 (0: warns, nothing checked without
                                   pin=), name=, pin=sha256:HEX; or a key for both
                                   ends: key-file=FILE, code=1 (SLUICE_CODE),
                                   code-file=FILE
          tls-listen:[HOST:]PORT[,OPT=VAL...]
                                   listen with TLS 1.3 and serve the first client
                                   that authenticates (cafile=, pin=, key-file=, or
                                   code=1: prints a pairing code); others are logged
                                   and turned away, at most 8 waiting per address
                                   (oldest out); prints its certificate's pin
        """

    static let exitStatusHelp = """
        Exit status:
          0 success; 64 usage error; 65 corrupt or truncated data; 66 missing source;
          69 unavailable (connection refused, unknown host); 73 destination exists or
          cannot be created; 74 input/output error (a TLS connection cut without
          close_notify); 77 authentication failed (pin, certificate, name, key);
          129 hung up (SIGHUP); 130 interrupted (SIGINT); 143 terminated (SIGTERM)
        """

    static var help: String {
        let width = max(8, commands.map { $0.name.count }.max() ?? 0) + 2
        let list = commands.map { "  " + $0.name + String(repeating: " ", count: width - $0.name.count) + $0.summary }
        return """
            sluice \(version): copy bytes between files, stdio and sockets, with backpressure

            Usage:
              sluice copy [options] SOURCE DEST
              sluice send [options] PATH... [HOST:]PORT
              sluice receive [options]
              sluice relay [options]
              sluice bench [options] [tcp:HOST:PORT | --listen [HOST:]PORT]
              sluice keygen FILE
              sluice help [COMMAND]
              sluice --help | --version | COMMAND --help

            Commands:
            \(list.joined(separator: "\n"))
              help\(String(repeating: " ", count: width - 4))show the help of a command

            \(endpointsHelp)

            Run 'sluice COMMAND --help' for the options of a command, 'man sluice' for more.

            """
    }

    /// `sluice --version`: the version, then the compression engines and transfer digests
    /// present and those missing, and whose AES-GCM seals TLS records.
    static var versionText: String {
        var lines = ["sluice \(version)"]
        let engines = CompressionEngine.allCases.map { engine in
            engine.version.map { "\(engine) \($0)" } ?? "no \(engine)"
        }
        lines.append("engines: " + engines.joined(separator: ", "))
        let digests = TransferDigest.allCases.map { digest in
            digest.isAvailable
                ? digest.libraryVersion.map { "\(digest) (libxxhash \($0))" } ?? "\(digest)" : "no \(digest)"
        }
        lines.append("transfer digests: " + digests.joined(separator: ", "))
        lines.append("TLS AES-GCM: " + AESGCMEngine.current.summary)
        let threads = WorkerPool.shared.threadCount
        lines.append("worker threads: \(threads) (one per core)")
        return lines.joined(separator: "\n") + "\n"
    }

    static func command(named name: String) -> (any Command.Type)? {
        commands.first { $0.name == name }
    }

    /// Runs the program with `arguments` (without the program name) and returns the status.
    static func main(_ arguments: [String]) -> ExitStatus {
        guard let first = arguments.first else {
            Terminal.report("missing command (usage: sluice COMMAND [options] ...; see sluice --help)")
            return .usage
        }
        let rest = Array(arguments.dropFirst())
        switch first {
        case "-h", "--help":
            Terminal.write(help, to: 1)
            return .ok
        case "--version":
            Terminal.write(versionText, to: 1)
            return .ok
        case "help":
            guard let name = rest.first else {
                Terminal.write(help, to: 1)
                return .ok
            }
            guard let command = command(named: name) else {
                Terminal.report("help: unknown command '\(name)' (\(commandNames))")
                return .usage
            }
            Terminal.write(command.help, to: 1)
            return .ok
        default:
            break
        }
        if first.hasPrefix("-") && first != "-" {
            let known = commands.contains { command in
                do {
                    _ = try command.parser.parse([first])
                    return true
                } catch {
                    return (error as? UsageError)?.message.hasPrefix("unknown option") == false
                }
            }
            if known {
                Terminal.report("option '\(first)' goes after the command: sluice COMMAND \(first) ...")
            } else {
                Terminal.report("unknown option '\(first)'")
            }
            return .usage
        }
        guard let command = command(named: first) else {
            Terminal.report("unknown command '\(first)' (\(commandNames))")
            return .usage
        }
        let parsed: ParsedArguments
        do {
            parsed = try command.parser.parse(rest)
        } catch {
            Terminal.report(error.message)
            return .usage
        }
        if command.parser.declares(CommonOptions.help), parsed[CommonOptions.help] {
            Terminal.write(command.help, to: 1)
            return .ok
        }
        if command.parser.declares(CommonOptions.version), parsed[CommonOptions.version] {
            Terminal.write(versionText, to: 1)
            return .ok
        }
        return command.run(parsed)
    }

    private static var commandNames: String {
        "commands: " + (commands.map { $0.name } + ["help"]).joined(separator: ", ")
    }
}

/// `sluice copy [options] SOURCE DEST`.
enum CopyCommand: Command {
    static let name = "copy"
    static let summary = "copy SOURCE to DEST, compressing or decompressing on the way"
    static var parser: ArgumentParser { CopyOptions.parser }

    static var help: String {
        """
        Usage: sluice copy [options] SOURCE DEST

        Copy the bytes of SOURCE to DEST through a bounded pipeline: a slow side
        slows the other down instead of filling memory. A destination file is
        written under a temporary name and renamed into place only when complete;
        an existing file is replaced only with --force. Interrupted, the
        unfinished file is removed. A file copied to an existing directory takes
        its name there, as with cp.

        Where nothing transforms the bytes (no -z, -d, --rate-limit or TLS) and
        both ends are files, pipes, TCP or Unix-domain sockets or /dev/null, the
        kernel moves them itself (copy_file_range, sendfile, splice), without
        copying them through sluice; where it refuses, read/write goes on from
        the same byte. --no-zero-copy always reads and writes. --stats names the
        path taken and the CPU seconds used, also per GiB.

        --direct writes a destination file with O_DIRECT, as dd oflag=direct:
        the bytes are read and go from sluice's buffer to the disk, without the
        kernel's copy into the page cache. That saves CPU, most on a virtual
        machine, where writing new page-cache pages can cost several times the
        copy itself; but each write waits for the disk and the file is not left
        cached. From tcp: or tcp-listen:, what a sender sends from the page
        cache is spliced from the socket into the file, no byte copied. Without
        direct I/O the file is written as usual.

        Options:
        \(CopyOptions.parser.helpLines().joined(separator: "\n"))

        \(SluiceCommand.endpointsHelp)

        \(SluiceCommand.exitStatusHelp)

        """
    }

    static func run(_ parsed: ParsedArguments) -> ExitStatus {
        let options: CopyOptions
        do {
            options = try CopyOptions(parsed)
        } catch {
            Terminal.report(error.message)
            return .usage
        }
        return CopySession.run(options)
    }
}
