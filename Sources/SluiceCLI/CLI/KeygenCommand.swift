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
        switch Result(catching: { () throws(SluiceError) in try KeyFile.generate(atPath: path) }) {
        case .success: return .ok
        case .failure(let error): return failed(error)
        }
    }

    /// Kept out of `run`: a typed catch there crashes the Swift 6.3.1 optimizer (CopyPropagation
    /// ownership error) in release builds.
    @inline(never)
    private static func failed(_ error: SluiceError) -> ExitStatus {
        let exists = error.errno == .fileExists
        Terminal.report(error.description + (exists ? " (keygen never replaces a key)" : ""))
        return exists ? .cannotCreate : CLIError.status(for: error, during: .creatingDestination)
    }
}
