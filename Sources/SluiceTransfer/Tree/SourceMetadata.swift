import CSluiceLinux
import Sluice

#if canImport(Glibc)
    import Glibc
#endif

/// Reads what the sender sends of a file besides its bytes.
enum SourceMetadata {
    /// The `user.*` extended attributes of `path` (not following a link), as many as one entry
    /// may carry; `warn` hears of the rest.
    static func xattrs(_ path: String, warn: (String) -> Void) -> [ExtendedAttribute] {
        var size = llistxattr(path, nil, 0)
        guard size > 0 else { return [] }
        var names = [CChar](repeating: 0, count: size)
        size = llistxattr(path, &names, names.count)
        guard size > 0 else { return [] }
        var out: [ExtendedAttribute] = []
        var bytes = 0
        for raw in names[0..<size].split(separator: 0) {
            let name = String(decoding: raw.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            guard name.hasPrefix(Wire.xattrNamespace), !name.hasPrefix("user.sluice."),
                name.utf8.count <= Wire.maxXattrNameBytes
            else { continue }
            let length = lgetxattr(path, name, nil, 0)
            guard length >= 0, length <= Wire.maxXattrValueBytes else { continue }
            var value = [UInt8](repeating: 0, count: length)
            let got = value.withUnsafeMutableBytes { lgetxattr(path, name, $0.baseAddress, $0.count) }
            guard got >= 0 else { continue }
            value.removeSubrange(got...)
            bytes += name.utf8.count + value.count
            guard out.count < Wire.maxXattrsPerEntry, bytes <= Wire.maxXattrBytesPerEntry else {
                warn("\(quoted(path)): more extended attributes than one entry may carry; the rest are not sent")
                break
            }
            out.append(ExtendedAttribute(name: name, value: value))
        }
        return out
    }

    /// Sets extended attribute `name` of `path` (not following a link); false with `errno`
    /// where it cannot. For tests, which reach the C library through here.
    static func setXattr(_ path: String, _ name: String, _ value: [UInt8]) -> Bool {
        value.withUnsafeBytes { lsetxattr(path, name, $0.baseAddress, $0.count, 0) } == 0
    }

    /// The value of extended attribute `name` of `path` (not following a link), nil where it has
    /// none. For tests, as `setXattr`.
    static func xattr(_ path: String, _ name: String) -> [UInt8]? {
        let length = lgetxattr(path, name, nil, 0)
        guard length >= 0 else { return nil }
        var value = [UInt8](repeating: 0, count: length)
        let got = value.withUnsafeMutableBytes { lgetxattr(path, name, $0.baseAddress, $0.count) }
        guard got >= 0, got <= length else { return nil }
        return Array(value[0..<got])
    }

    /// Removes extended attribute `name` of `path` (not following a link); false with `errno`
    /// where it cannot. For tests, as `setXattr`.
    static func removeXattr(_ path: String, _ name: String) -> Bool {
        lremovexattr(path, name) == 0
    }

    /// The target of symbolic link `path`, as written.
    static func linkTarget(_ path: String) -> [UInt8]? {
        var buffer = [UInt8](repeating: 0, count: Wire.maxPathBytes + 1)
        let n = buffer.withUnsafeMutableBytes { raw in
            raw.withMemoryRebound(to: CChar.self) { readlink(path, $0.baseAddress!, $0.count) }
        }
        guard n > 0, n <= Wire.maxPathBytes else { return nil }
        return Array(buffer[0..<n])
    }
}
