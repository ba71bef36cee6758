/// A command-line option: its names, whether it takes a value, and its help text.
///
/// Values follow getopt_long: a required value is attached (`--chunk-size=64K`, `-b64K`) or
/// the next word (`--chunk-size 64K`, `-b 64K`); an optional value is only ever attached
/// (`--compress=zlib:1`, `-zzlib:1`), so a separate word after the option is an operand.
struct OptionSpec: Hashable, Sendable {
    /// Whether the option takes a value.
    enum Value: Hashable, Sendable {
        /// A flag: `-f`, `--force`.
        case none
        /// A value that must be given; the placeholder names it in help (`SIZE`).
        case required(String)
        /// A value that may be attached; the placeholder is written after the name in help,
        /// brackets included (`[=FORMAT]`).
        case optional(String)
    }

    /// The key the parsed result is looked up by; the long name unless given.
    var key: String
    /// The long name, without dashes: `chunk-size`.
    var long: String?
    /// The short name: `b`.
    var short: Character?
    var value: Value
    /// One line for `--help`.
    var help: String

    init(_ long: String?, short: Character? = nil, value: Value = .none, key: String? = nil, help: String) {
        precondition(long != nil || short != nil, "an option needs a name")
        self.key = key ?? long ?? String(short!)
        self.long = long
        self.short = short
        self.value = value
        self.help = help
    }

    /// How the option is written in messages: the spelling the user used is preferred.
    var displayName: String {
        if let long { return "--\(long)" }
        return "-\(short!)"
    }

    /// `-b, --chunk-size SIZE` or `-d, --decompress[=FORMAT]`, for help.
    var synopsis: String {
        var names: [String] = []
        if let short { names.append("-\(short)") }
        if let long { names.append("--\(long)") }
        var text = names.joined(separator: ", ")
        switch value {
        case .none: break
        case .required(let placeholder): text += " \(placeholder)"
        case .optional(let placeholder): text += placeholder
        }
        return text
    }
}

/// A mistake on the command line: exits 64 (EX_USAGE) with the message on one line.
struct UsageError: Error, Hashable, Sendable, CustomStringConvertible {
    var message: String
    init(_ message: String) { self.message = message }
    var description: String { message }
}

/// What the parser found: the options in the order given, and the operands.
struct ParsedArguments: Sendable, Equatable {
    /// One option as given.
    struct Occurrence: Sendable, Equatable {
        /// The spec's key.
        var key: String
        /// As written: `--chunk-size` or `-b`.
        var spelling: String
        var value: String?
    }

    var options: [Occurrence] = []
    var operands: [String] = []

    /// True if the option was given at least once.
    func has(_ key: String) -> Bool { options.contains { $0.key == key } }

    /// The last occurrence of the option (the last one wins).
    func last(_ key: String) -> Occurrence? { options.last { $0.key == key } }

    /// The value of the last occurrence of the option.
    func value(_ key: String) -> String? { last(key)?.value }

    /// Which of `keys` was given last, if any: for pairs such as `--progress`/`--no-progress`.
    func lastOf(_ keys: Set<String>) -> String? { options.last { keys.contains($0.key) }?.key }
}

/// A small getopt_long-style parser: options anywhere among the operands, `--opt=value` and
/// `--opt value`, clusters of short flags (`-qf`), short options with attached values (`-b64K`),
/// optional values only when attached, and `--` to end the options. A lone `-` is an operand.
struct ArgumentParser: Sendable {
    let specs: [OptionSpec]

    init(_ specs: [OptionSpec]) {
        self.specs = specs
        let longs = specs.compactMap(\.long)
        let shorts = specs.compactMap(\.short)
        precondition(Set(longs).count == longs.count, "duplicate long option")
        precondition(Set(shorts).count == shorts.count, "duplicate short option")
    }

    /// Parses `arguments` (without the program and command names).
    func parse(_ arguments: [String]) throws(UsageError) -> ParsedArguments {
        var result = ParsedArguments()
        var index = 0
        while index < arguments.count {
            let word = arguments[index]
            index += 1
            if word == "--" {
                result.operands += arguments[index...]
                break
            }
            if word.hasPrefix("--") {
                try parseLong(word, arguments, &index, into: &result)
            } else if word.hasPrefix("-") && word != "-" {
                try parseShortCluster(word, arguments, &index, into: &result)
            } else {
                result.operands.append(word)
            }
        }
        return result
    }

    private func parseLong(
        _ word: String, _ arguments: [String], _ index: inout Int, into result: inout ParsedArguments
    ) throws(UsageError) {
        let body = word.dropFirst(2)
        let name: Substring
        let attached: String?
        if let equals = body.firstIndex(of: "=") {
            name = body[..<equals]
            attached = String(body[body.index(after: equals)...])
        } else {
            name = body
            attached = nil
        }
        guard let spec = specs.first(where: { $0.long == String(name) }) else {
            throw UsageError("unknown option '--\(name)'")
        }
        let spelling = "--\(name)"
        switch spec.value {
        case .none:
            if attached != nil { throw UsageError("option '\(spelling)' takes no value") }
            result.options.append(.init(key: spec.key, spelling: spelling, value: nil))
        case .optional:
            result.options.append(.init(key: spec.key, spelling: spelling, value: attached))
        case .required:
            var value = attached
            if value == nil {
                guard index < arguments.count else { throw UsageError("option '\(spelling)' needs a value") }
                value = arguments[index]
                index += 1
            }
            result.options.append(.init(key: spec.key, spelling: spelling, value: value))
        }
    }

    private func parseShortCluster(
        _ word: String, _ arguments: [String], _ index: inout Int, into result: inout ParsedArguments
    ) throws(UsageError) {
        var rest = word.dropFirst()
        while let letter = rest.first {
            rest = rest.dropFirst()
            guard let spec = specs.first(where: { $0.short == letter }) else {
                throw UsageError("unknown option '-\(letter)'")
            }
            let spelling = "-\(letter)"
            switch spec.value {
            case .none:
                result.options.append(.init(key: spec.key, spelling: spelling, value: nil))
            case .optional:
                result.options.append(
                    .init(key: spec.key, spelling: spelling, value: rest.isEmpty ? nil : String(rest)))
                return
            case .required:
                let value: String
                if !rest.isEmpty {
                    value = String(rest)
                } else {
                    guard index < arguments.count else { throw UsageError("option '\(spelling)' needs a value") }
                    value = arguments[index]
                    index += 1
                }
                result.options.append(.init(key: spec.key, spelling: spelling, value: value))
                return
            }
        }
    }

    /// Help lines for the options: synopsis padded to a column, then the help text. Options
    /// with no help text (the aliases `-2` … `-9`) are not listed.
    func helpLines(indent: Int = 2, column: Int = 28) -> [String] {
        specs.filter { !$0.help.isEmpty }.map { spec in
            var line = String(repeating: " ", count: indent) + spec.synopsis
            if line.count + 2 > column {
                line += "\n" + String(repeating: " ", count: column)
            } else {
                line += String(repeating: " ", count: column - line.count)
            }
            let continuation = "\n" + String(repeating: " ", count: column)
            return line + spec.help.split(separator: "\n").joined(separator: continuation)
        }
    }
}
