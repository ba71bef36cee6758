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

/// An option a command declares once, as a constant: its names and help, and how its value
/// is read. A command reads what was given through the constant (`parsed[Self.delete]`), so a
/// misspelled option is a compile error rather than one that reads as never given.
protocol CommandOption: Sendable {
    /// The names and help: one spec, or several sharing one key (`-1` … `-9`).
    var specs: [OptionSpec] { get }
}

extension CommandOption {
    /// The key the parser records the option's occurrences under.
    var key: String { specs[0].key }
    /// How messages name the option: `--delete`, or `-D` without a long name.
    var displayName: String { specs[0].displayName }
}

/// An option without a value, given or not: `-f`, `--force`.
struct Flag: CommandOption, Hashable {
    let spec: OptionSpec
    var specs: [OptionSpec] { [spec] }

    init(_ long: String?, short: Character? = nil, help: String) {
        spec = OptionSpec(long, short: short, help: help)
    }
}

/// An option with a value, required or optional, read as a `Value` when given: `read` turns
/// what was written into the value, or throws the usage error that names the option as
/// spelled (`-P '0': must be …`). Reading happens when the command asks, so a command's
/// checks keep their order.
struct Option<Value>: CommandOption {
    let specs: [OptionSpec]
    /// The value of one occurrence (its `value` is nil only for an optional value not given).
    let read: @Sendable (ParsedArguments.Occurrence) throws(UsageError) -> Value

    init(
        _ long: String?, short: Character? = nil, value: OptionSpec.Value, help: String,
        read: @escaping @Sendable (ParsedArguments.Occurrence) throws(UsageError) -> Value
    ) {
        precondition(value != .none, "an option with a value; a Flag has none")
        self.init(specs: [OptionSpec(long, short: short, value: value, help: help)], read: read)
    }

    /// Several specs under one key, read alike (`-1` … `-9`).
    init(specs: [OptionSpec], read: @escaping @Sendable (ParsedArguments.Occurrence) throws(UsageError) -> Value) {
        precondition(!specs.isEmpty && specs.allSatisfy { $0.key == specs[0].key }, "one key for an option")
        self.specs = specs
        self.read = read
    }

    /// The same option with other help (`copy`'s `--threads`, each command's `--timeout`).
    func withHelp(_ help: String) -> Option {
        precondition(specs.count == 1, "one spec to change the help of")
        var spec = specs[0]
        spec.help = help
        return Option(specs: [spec], read: read)
    }

    /// The same option read another way (`bench`'s `--timeout`).
    func reading<Other>(
        _ read: @escaping @Sendable (ParsedArguments.Occurrence) throws(UsageError) -> Other
    ) -> Option<Other> {
        Option<Other>(specs: specs, read: read)
    }
}

extension Option where Value == String {
    /// An option whose value is its text as written.
    init(_ long: String?, short: Character? = nil, value: OptionSpec.Value, help: String) {
        self.init(long, short: short, value: value, help: help) { $0.value ?? "" }
    }
}

/// How the values of several commands' options are read: each turns one occurrence into its
/// value or a usage error naming the option as it was written.
enum Read {
    /// A path, which may not be empty (`PATH: empty path`).
    static func path(_ option: ParsedArguments.Occurrence) throws(UsageError) -> String {
        guard let path = option.value, !path.isEmpty else { throw UsageError("\(option.spelling): empty path") }
        return path
    }

    /// A number of `what` within `range`: as `Int` reads it (a sign allowed), or with
    /// `digitsOnly` in at most three decimal digits and nothing else.
    static func number(
        of what: String, in range: ClosedRange<Int>, digitsOnly: Bool = false
    ) -> @Sendable (ParsedArguments.Occurrence) throws(UsageError) -> Int {
        { (option: ParsedArguments.Occurrence) throws(UsageError) -> Int in
            let text = option.value ?? ""
            let written = !digitsOnly || (text.count <= 3 && text.allSatisfy { $0.isASCII && $0.isNumber })
            guard written, let n = Int(text), range.contains(n) else {
                throw UsageError(
                    "\(option.spelling) '\(text)': must be a number of \(what) from \(range.lowerBound) to "
                        + "\(range.upperBound)")
            }
            return n
        }
    }
}

/// What the parser found: the options in the order given, and the operands. Read through the
/// command's declarations: `parsed[flag]`, `try parsed[option]`, `try parsed.last(option)`.
struct ParsedArguments: Sendable, Equatable {
    /// One option as given.
    struct Occurrence: Sendable, Equatable {
        /// The spec's key.
        var key: String
        /// As written: `--chunk-size` or `-b`.
        var spelling: String
        var value: String?
    }

    /// An option's value as read, and the option as written, for messages.
    struct Given<Value> {
        var value: Value
        var spelling: String
    }

    /// The keys of the options the parser knows: reading another is a mistake in the command.
    private let declared: Set<String>
    /// The options in the order given.
    private var options: [Occurrence] = []
    var operands: [String] = []

    fileprivate init(declared: Set<String>) { self.declared = declared }

    fileprivate mutating func append(_ occurrence: Occurrence) { options.append(occurrence) }

    /// The occurrences of any of `options`, in the order given, as written.
    func occurrences(of options: [any CommandOption]) -> [Occurrence] {
        for option in options {
            precondition(declared.contains(option.key), "\(option.displayName) is not an option of this command")
        }
        let keys = Set(options.map(\.key))
        return self.options.filter { keys.contains($0.key) }
    }

    /// The occurrences of `option`, in the order given.
    private func occurrences(_ option: any CommandOption) -> [Occurrence] { occurrences(of: [option]) }

    /// True if the flag was given at least once.
    subscript(flag: Flag) -> Bool { isGiven(flag) }

    /// True if the option was given at least once, with whatever value.
    func isGiven(_ option: any CommandOption) -> Bool { !occurrences(option).isEmpty }

    /// How the last occurrence of the option was written (`-P`, `--streams`), if given.
    func spelling(of option: any CommandOption) -> String? { occurrences(option).last?.spelling }

    /// The value of the last occurrence of the option, read (the last one wins), if given.
    subscript<Value>(option: Option<Value>) -> Value? {
        get throws(UsageError) { try last(option)?.value }
    }

    /// The value of the last occurrence of the option, read, with its spelling, if given.
    func last<Value>(_ option: Option<Value>) throws(UsageError) -> Given<Value>? {
        guard let occurrence = occurrences(option).last else { return nil }
        return Given(value: try option.read(occurrence), spelling: occurrence.spelling)
    }

    /// The values of every occurrence of the option, read, in the order given (`--exclude`).
    func all<Value>(_ option: Option<Value>) throws(UsageError) -> [Value] {
        var values: [Value] = []
        for occurrence in occurrences(option) { values.append(try option.read(occurrence)) }
        return values
    }

    /// What the flag given last among `choices` stands for, if any: for pairs such as
    /// `--progress`/`--no-progress`, where the last one wins.
    func lastGiven<Choice>(_ choices: [(Flag, Choice)]) -> Choice? {
        let keys = occurrences(of: choices.map(\.0)).map(\.key)
        guard let key = keys.last else { return nil }
        return choices.first { $0.0.key == key }?.1
    }
}

/// A small getopt_long-style parser: options anywhere among the operands, `--opt=value` and
/// `--opt value`, clusters of short flags (`-qf`), short options with attached values (`-b64K`),
/// optional values only when attached, and `--` to end the options. A lone `-` is an operand.
struct ArgumentParser: Sendable {
    let specs: [OptionSpec]

    /// A parser of `options`, listed in `--help` in this order.
    init(_ options: [any CommandOption]) {
        let specs = options.flatMap(\.specs)
        self.specs = specs
        let longs = specs.compactMap(\.long)
        let shorts = specs.compactMap(\.short)
        precondition(Set(longs).count == longs.count, "duplicate long option")
        precondition(Set(shorts).count == shorts.count, "duplicate short option")
    }

    /// Whether the parser knows `option`.
    func declares(_ option: any CommandOption) -> Bool { specs.contains { $0.key == option.key } }

    /// Parses `arguments` (without the program and command names).
    func parse(_ arguments: [String]) throws(UsageError) -> ParsedArguments {
        var result = ParsedArguments(declared: Set(specs.map(\.key)))
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
            result.append(.init(key: spec.key, spelling: spelling, value: nil))
        case .optional:
            result.append(.init(key: spec.key, spelling: spelling, value: attached))
        case .required:
            var value = attached
            if value == nil {
                guard index < arguments.count else { throw UsageError("option '\(spelling)' needs a value") }
                value = arguments[index]
                index += 1
            }
            result.append(.init(key: spec.key, spelling: spelling, value: value))
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
                result.append(.init(key: spec.key, spelling: spelling, value: nil))
            case .optional:
                result.append(
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
                result.append(.init(key: spec.key, spelling: spelling, value: value))
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
