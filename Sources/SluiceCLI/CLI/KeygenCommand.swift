import Sluice

/// `sluice keygen FILE`: a long-lived key for `send`/`receive --key-file`.
enum KeygenCommand: Command {
    static let name = "keygen"
    static let summary = "make a key file for send and receive (mode 0600)"
    static var parser: ArgumentParser { ArgumentParser([]) }

    static var help: String {
        """
        Usage: sluice keygen FILE

        Write a new random 256-bit key to FILE, readable by its owner only (mode
        0600). Copy it to the other host over a trusted channel; both sides then
        authenticate with it instead of a one-time pairing code. An existing FILE
        is never replaced.

        \(SluiceCommand.exitStatusHelp)

        """
    }

    static func run(_ parsed: ParsedArguments) -> ExitStatus {
        guard parsed.operands.count == 1, let path = parsed.operands.first else {
            Terminal.report("keygen takes one operand, the key file to create (usage: sluice keygen FILE)")
            return .usage
        }
        do {
            try KeyFile.generate(atPath: path)
            return .ok
        } catch {
            let status: ExitStatus =
                error.errno == .fileExists ? .cannotCreate : CLIError.status(for: error, during: .creatingDestination)
            Terminal.report(error.description + (error.errno == .fileExists ? " (keygen never replaces a key)" : ""))
            return status
        }
    }
}
