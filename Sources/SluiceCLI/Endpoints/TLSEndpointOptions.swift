import Sluice

#if canImport(Glibc)
    import Glibc
#endif

/// The options of a `tls:` or `tls-listen:` endpoint, written after the address as
/// `,OPTION=VALUE…` in socat's style: `cert=FILE`, `key=FILE`, `cafile=FILE`, `verify=0|1`,
/// `name=HOST`, `pin=sha256:HEX`.
struct TLSEndpointOptions: Hashable, Sendable {
    var certificateFile: String?
    var keyFile: String?
    var caFile: String?
    var verify = true
    var name: String?
    var pin: TLSPin?

    static let names = ["cert", "key", "cafile", "verify", "name", "pin"]

    /// Parses the options after the first comma of `operand`.
    init(parsing text: Substring, in operand: String) throws(UsageError) {
        for item in text.split(separator: ",", omittingEmptySubsequences: false) {
            guard let equals = item.firstIndex(of: "="), equals != item.startIndex else {
                throw UsageError(
                    "\(operand): '\(item)' is not OPTION=VALUE (options: \(Self.names.joined(separator: ", ")))")
            }
            let key = String(item[..<equals])
            let value = String(item[item.index(after: equals)...])
            guard !value.isEmpty else { throw UsageError("\(operand): empty value for '\(key)='") }
            switch key {
            case "cert": certificateFile = value
            case "key": keyFile = value
            case "cafile": caFile = value
            case "name": name = value
            case "verify":
                guard value == "0" || value == "1" else { throw UsageError("\(operand): verify= takes 0 or 1") }
                verify = value == "1"
            case "pin":
                guard let pin = TLSPin(parsing: value) else {
                    throw UsageError("\(operand): pin= takes sha256: and 64 hex digits, not '\(value)'")
                }
                self.pin = pin
            default:
                throw UsageError(
                    "\(operand): unknown TLS option '\(key)' (options: \(Self.names.joined(separator: ", ")))")
            }
        }
        if keyFile != nil && certificateFile == nil { throw UsageError("\(operand): key= needs cert=") }
    }

    init() {}

    /// The written form, for messages: `,cert=…` and so on (empty without options).
    var suffix: String {
        var parts: [String] = []
        if let certificateFile { parts.append("cert=\(certificateFile)") }
        if let keyFile { parts.append("key=\(keyFile)") }
        if let caFile { parts.append("cafile=\(caFile)") }
        if !verify { parts.append("verify=0") }
        if let name { parts.append("name=\(name)") }
        if let pin { parts.append("pin=\(pin)") }
        return parts.map { "," + $0 }.joined()
    }

    /// The library's settings for `role`; a client checks the host it connects to unless
    /// `name=` says otherwise.
    func settings(role: TLSRole, host: String?) -> TLSSettings {
        var settings = TLSSettings(role: role)
        settings.certificateFile = certificateFile
        settings.keyFile = keyFile
        settings.caFile = caFile
        settings.verifiesPeer = verify
        settings.peerName = name ?? (role == .client ? host : nil)
        settings.pin = pin
        return settings
    }

    /// Makes the context, checking first that the files named exist and can be read (66).
    func makeContext(role: TLSRole, host: String?, operand: String) throws(CLIError) -> TLSContext {
        for (option, path) in [("cert", certificateFile), ("key", keyFile), ("cafile", caFile)] {
            guard let path else { continue }
            if access(path, R_OK) != 0 {
                let reason = SluiceError(.system(.current), operation: "\(option)=", subject: path)
                throw CLIError(.noInput, reason.description)
            }
        }
        do {
            return try TLSContext(settings(role: role, host: host))
        } catch {
            throw CLIError(.usage, "\(operand): \(error.description)")
        }
    }
}
