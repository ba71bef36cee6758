import Sluice

/// Why a relative path from the wire is not acceptable.
enum PathCheck {
    /// Splits a relative path from the wire into its components, or says why it is refused:
    /// empty, longer than 4096 bytes, not UTF-8, a NUL byte, absolute, an empty, `.` or `..`
    /// component, or a component longer than 255 bytes.
    static func components(_ path: [UInt8]) -> Result<[String], PathRefusal> {
        guard !path.isEmpty else { return .failure(PathRefusal("empty path")) }
        guard path.count <= Wire.maxPathBytes else {
            return .failure(PathRefusal("path longer than \(Wire.maxPathBytes) bytes"))
        }
        guard !path.contains(0) else { return .failure(PathRefusal("NUL byte in path")) }
        // ASCII is valid UTF-8: only a path with other bytes is decoded to be checked.
        guard path.allSatisfy({ $0 < 0x80 }) || String(validating: path, as: UTF8.self) != nil else {
            return .failure(PathRefusal("path is not valid UTF-8"))
        }
        guard path.first != UInt8(ascii: "/") else { return .failure(PathRefusal("absolute path")) }
        var components: [String] = []
        components.reserveCapacity(path.count(where: { $0 == UInt8(ascii: "/") }) + 1)
        for part in path.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: false) {
            if part.isEmpty { return .failure(PathRefusal("empty path component")) }
            if part.elementsEqual([UInt8(ascii: ".")]) { return .failure(PathRefusal("'.' path component")) }
            if part.elementsEqual([UInt8(ascii: "."), UInt8(ascii: ".")]) {
                return .failure(PathRefusal("'..' path component"))
            }
            if part.count > Wire.maxComponentBytes {
                return .failure(PathRefusal("path component longer than \(Wire.maxComponentBytes) bytes"))
            }
            components.append(String(decoding: part, as: UTF8.self))
        }
        return .success(components)
    }

    /// `components`, for a path the receiver is to create, check or remove: refused besides
    /// when any of its components has the form of the receiver's own temporary names
    /// (`isPartialName`). As the last component, a later transfer of NAME would take it for
    /// its partial and empty, or resume, it without `--overwrite`; as a directory on the way,
    /// it would hold entries under a name the receiver takes for one of its own (PRUNE passes
    /// such names over) and stand where a later file of NAME puts its partial.
    static func receivable(_ path: [UInt8]) -> Result<[String], PathRefusal> {
        components(path).flatMap { components in
            guard components.contains(where: isPartialName) else { return .success(components) }
            return .failure(PathRefusal("the name of a partial file (.NAME.sluice-part) is reserved"))
        }
    }

    /// The relative path of a `path` that `components` accepted: its components joined by "/",
    /// which are its bytes as they came, decoded once (no string built per component and joined).
    static func relative(_ path: [UInt8]) -> String {
        String(decoding: path, as: UTF8.self)
    }

    /// Whether `name` matches `.*.sluice-part` or `.sluice-part.*`, the names partial files take
    /// (and links being made, `.sluice-part.link-*`).
    static func isPartialName(_ name: String) -> Bool {
        let suffix = ".sluice-part"
        if name.hasPrefix(suffix + ".") { return true }
        return name.hasPrefix(".") && name.hasSuffix(suffix) && name.utf8.count > suffix.utf8.count
    }
}

/// A path refused by `PathCheck`, with the reason.
struct PathRefusal: Error {
    var reason: String
    init(_ reason: String) { self.reason = reason }
}
