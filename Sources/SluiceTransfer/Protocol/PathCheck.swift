import Sluice

/// Why a relative path from the wire is not acceptable.
enum PathCheck {
    /// Splits a relative path from the wire into its components, or says why it is refused:
    /// empty, longer than 4096 bytes, not UTF-8, a NUL byte, absolute, an empty, `.` or `..`
    /// component, or a component longer than 255 bytes.
    static func components(_ path: [UInt8]) -> Result<[String], PathRefusal> {
        path.withUnsafeBufferPointer { split($0, refusingPartialNames: false) }
    }

    /// `components`, for a path the receiver is to create, check or remove: refused besides
    /// when any of its components has the form of the receiver's own temporary names
    /// (`isPartialName`). As the last component, a later transfer of NAME would take it for
    /// its partial and empty, or resume, it without `--overwrite`; as a directory on the way,
    /// it would hold entries under a name the receiver takes for one of its own (PRUNE passes
    /// such names over) and stand where a later file of NAME puts its partial.
    static func receivable(_ path: [UInt8]) -> Result<[String], PathRefusal> {
        path.withUnsafeBufferPointer { split($0, refusingPartialNames: true) }
    }

    /// `components` (and `receivable`'s check of partial names, after every other), in one pass
    /// over the bytes and one over each component: every file received has its path checked, so
    /// no array of pieces and no string but the components' own is made.
    private static func split(_ path: UnsafeBufferPointer<UInt8>, refusingPartialNames: Bool) -> Result<
        [String], PathRefusal
    > {
        let slash = UInt8(ascii: "/")
        let dot = UInt8(ascii: ".")
        guard !path.isEmpty else { return .failure(PathRefusal("empty path")) }
        guard path.count <= Wire.maxPathBytes else {
            return .failure(PathRefusal("path longer than \(Wire.maxPathBytes) bytes"))
        }
        var ascii = true
        var slashes = 0
        for byte in path {
            if byte == 0 { return .failure(PathRefusal("NUL byte in path")) }
            if byte >= 0x80 { ascii = false }
            if byte == slash { slashes += 1 }
        }
        // ASCII is valid UTF-8: only a path with other bytes is decoded to be checked.
        guard ascii || String(validating: path, as: UTF8.self) != nil else {
            return .failure(PathRefusal("path is not valid UTF-8"))
        }
        guard path[0] != slash else { return .failure(PathRefusal("absolute path")) }
        var components: [String] = []
        components.reserveCapacity(slashes + 1)
        var partial = false
        var start = 0
        while true {
            var end = start
            while end < path.count && path[end] != slash { end += 1 }
            let part = UnsafeBufferPointer(rebasing: path[start..<end])
            if part.isEmpty { return .failure(PathRefusal("empty path component")) }
            if part.count == 1 && part[0] == dot { return .failure(PathRefusal("'.' path component")) }
            if part.count == 2 && part[0] == dot && part[1] == dot {
                return .failure(PathRefusal("'..' path component"))
            }
            if part.count > Wire.maxComponentBytes {
                return .failure(PathRefusal("path component longer than \(Wire.maxComponentBytes) bytes"))
            }
            let component = String(decoding: part, as: UTF8.self)
            // The bytes first; the string's own comparison decides (it compares characters).
            if refusingPartialNames && !partial && mayBePartialName(part) { partial = isPartialName(component) }
            components.append(component)
            guard end < path.count else { break }
            start = end + 1
        }
        if partial { return .failure(PathRefusal("the name of a partial file (.NAME.sluice-part) is reserved")) }
        return .success(components)
    }

    /// Whether the bytes of `name` match `.*.sluice-part` or `.sluice-part.*`: true for every
    /// name `isPartialName` matches (an ASCII pattern matches only those bytes, none of its
    /// characters being equivalent to another sequence), and for a few more it does not.
    private static func mayBePartialName(_ name: UnsafeBufferPointer<UInt8>) -> Bool {
        let suffix = partialSuffix.utf8
        guard name.count > suffix.count, name[0] == UInt8(ascii: ".") else { return false }
        if name.starts(with: suffix) && name[suffix.count] == UInt8(ascii: ".") { return true }
        return name.reversed().starts(with: suffix.reversed())
    }

    /// What ends a partial file's name (`.NAME.sluice-part`) and begins a link's being made.
    private static let partialSuffix = ".sluice-part"

    /// The relative path of a `path` that `components` accepted: its components joined by "/",
    /// which are its bytes as they came, decoded once (no string built per component and joined).
    static func relative(_ path: [UInt8]) -> String {
        String(decoding: path, as: UTF8.self)
    }

    /// Whether `name` matches `.*.sluice-part` or `.sluice-part.*`, the names partial files take
    /// (and links being made, `.sluice-part.link-*`).
    static func isPartialName(_ name: String) -> Bool {
        let suffix = partialSuffix
        if name.hasPrefix(suffix + ".") { return true }
        return name.hasPrefix(".") && name.hasSuffix(suffix) && name.utf8.count > suffix.utf8.count
    }
}

/// A path refused by `PathCheck`, with the reason.
struct PathRefusal: Error {
    var reason: String
    init(_ reason: String) { self.reason = reason }
}
