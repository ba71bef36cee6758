import Sluice

#if canImport(Glibc)
    import Glibc
#endif

/// One event read from an inotify descriptor (`inotify(7)`): the watch it came from, what
/// happened (`mask`), the cookie that pairs the two halves of a rename, and the name in the
/// watched directory it is about (nil: the directory itself, or a name that is not UTF-8).
struct InotifyEvent: Equatable, Sendable {
    var watch: Int32
    var mask: UInt32
    var cookie: UInt32
    var name: String?
    /// The name was there but is not valid UTF-8: it cannot be sent, and is passed over.
    var undecodable = false

    /// The bytes of `struct inotify_event` before its name.
    static let headerSize = 16

    /// Whether the event is about a directory (`IN_ISDIR`).
    var isDirectory: Bool { mask & UInt32(IN_ISDIR) != 0 }

    /// Whether `mask` has any of `bits`.
    func has(_ bits: Int32) -> Bool { mask & UInt32(bitPattern: bits) != 0 }

    /// The events in `bytes`, as one `read` of an inotify descriptor returns them, in order.
    /// Bytes that are not whole events (a header cut short, a name length past the end) end
    /// the parse: `complete` is false, and what came before is returned. The kernel never
    /// gives such bytes; they are refused all the same, never trusted.
    static func parse(_ bytes: UnsafeRawBufferPointer) -> (events: [InotifyEvent], complete: Bool) {
        var events: [InotifyEvent] = []
        var offset = 0
        while offset < bytes.count {
            guard bytes.count - offset >= headerSize else { return (events, false) }
            let watch = Int32(bitPattern: field(bytes, offset))
            let mask = field(bytes, offset + 4)
            let cookie = field(bytes, offset + 8)
            let length = Int(field(bytes, offset + 12))
            guard length <= bytes.count - offset - headerSize else { return (events, false) }
            let nameBytes = bytes[(offset + headerSize)..<(offset + headerSize + length)]
            let end = nameBytes.firstIndex(of: 0) ?? nameBytes.endIndex
            var event = InotifyEvent(watch: watch, mask: mask, cookie: cookie, name: nil)
            if end > nameBytes.startIndex {
                let raw = Array(bytes[nameBytes.startIndex..<end])
                if let name = String(validating: raw, as: UTF8.self), !name.contains("/") {
                    event.name = name
                } else {
                    event.undecodable = true
                }
            }
            events.append(event)
            offset += headerSize + length
        }
        return (events, true)
    }

    /// A 32-bit field in the machine's byte order, read byte by byte (no alignment assumed).
    private static func field(_ bytes: UnsafeRawBufferPointer, _ at: Int) -> UInt32 {
        var value: UInt32 = 0
        withUnsafeMutableBytes(of: &value) { out in
            for index in 0..<4 { out[index] = bytes[at + index] }
        }
        return value
    }

    /// The event as the kernel lays it out: for tests and the fuzz target's seeds.
    static func encode(_ events: [InotifyEvent], padding: Int = 0) -> [UInt8] {
        var out: [UInt8] = []
        for event in events {
            let name = Array((event.name ?? "").utf8)
            let length = name.isEmpty && padding == 0 ? 0 : name.count + 1 + padding
            for value in [UInt32(bitPattern: event.watch), event.mask, event.cookie, UInt32(length)] {
                withUnsafeBytes(of: value) { out += $0 }
            }
            if length > 0 { out += name + [UInt8](repeating: 0, count: length - name.count) }
        }
        return out
    }
}
