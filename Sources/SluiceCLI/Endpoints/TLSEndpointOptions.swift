import Sluice

#if canImport(Glibc)
    import Glibc
#endif

/// The options of a `tls:` or `tls-listen:` endpoint, written after the address as
/// `,OPTION=VALUE…` in socat's style: `cert=FILE`, `key=FILE`, `cafile=FILE`, `verify=0|1`,
/// `name=HOST`, `pin=sha256:HEX`; or, to authenticate both ends by a pre-shared key as `send`
/// and `receive` do, `key-file=FILE` (made by `sluice keygen`), `code=1` (a listener makes a
/// pairing code and prints it; a client reads it from `SLUICE_CODE` or the terminal) or
/// `code-file=FILE` (a client).
struct TLSEndpointOptions: Hashable, Sendable {
    var certificateFile: String?
    var keyFile: String?
    var caFile: String?
    var verify = true
    var name: String?
    var pin: TLSPin?
    /// `key-file=`: the pre-shared key from a key file.
    var presharedKeyFile: String?
    /// `code=1`: the pre-shared key from a pairing code.
    var code = false
    /// `code-file=`: a client's pairing code, from this file.
    var codeFile: String?

    static let names = ["cert", "key", "cafile", "verify", "name", "pin", "key-file", "code", "code-file"]

    /// Authenticated by a pre-shared key rather than certificates.
    var usesKey: Bool { presharedKeyFile != nil || code || codeFile != nil }

    /// Whether a listener with these options checks who its client is (a CA, a pin, a key).
    /// `verify=0` turns the CA's check off; a pin is checked all the same.
    var authenticatesClient: Bool { usesKey || pin != nil || (caFile != nil && verify) }

    /// Whether a client with these options checks who its server is (a CA chain and name, a
    /// pin, a key): all but `verify=0` without `pin=`.
    var authenticatesServer: Bool { usesKey || pin != nil || verify }

    /// The one-line warning for an endpoint that checks nothing of its peer, as `operand` in
    /// `role`: a listener that serves any client, or a client with `verify=0` and no pin that
    /// talks to whoever answers. Nil when the peer is checked.
    func unverifiedPeerWarning(role: TLSRole, operand: String) -> String? {
        switch role {
        case .server:
            guard !authenticatesClient else { return nil }
            let why =
                verify
                ? "no cafile=, pin=, key-file= or code=1 to check it by"
                : "verify=0, and no pin=, key-file= or code=1 to check it by"
            return "warning: \(operand): any client is served (\(why))"
        case .client:
            guard !authenticatesServer else { return nil }
            return "warning: \(operand): the server is not verified (verify=0, and no pin= to check it by): "
                + "whoever answers at that address is sent to or read from"
        }
    }

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
            case "key-file": presharedKeyFile = value
            case "code-file": codeFile = value
            case "code":
                guard value == "1" else { throw UsageError("\(operand): code= takes 1") }
                code = true
            default:
                throw UsageError(
                    "\(operand): unknown TLS option '\(key)' (options: \(Self.names.joined(separator: ", ")))")
            }
        }
        if keyFile != nil && certificateFile == nil { throw UsageError("\(operand): key= needs cert=") }
        if [presharedKeyFile != nil, code, codeFile != nil].filter({ $0 }).count > 1 {
            throw UsageError("\(operand): key-file=, code=1 and code-file= are three ways to give one key: take one")
        }
        if usesKey && (certificateFile != nil || caFile != nil || pin != nil || name != nil || !verify) {
            throw UsageError(
                "\(operand): with a pre-shared key (key-file=, code=, code-file=) the key alone authenticates "
                    + "both ends: cert=, cafile=, pin=, name= and verify= do not apply")
        }
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
        if let presharedKeyFile { parts.append("key-file=\(presharedKeyFile)") }
        if code { parts.append("code=1") }
        if let codeFile { parts.append("code-file=\(codeFile)") }
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
        // A listener waits on for an authenticated client: one that does not finish its
        // handshake soon is not it.
        if role == .server { settings.handshakeTimeout = .seconds(10) }
        return settings
    }

    /// Makes the context, checking first that the files named exist and can be read (66). With
    /// `code=1` a listener makes a pairing code and prints it on stderr (`sluice: code: …`), as
    /// `receive` does; a client reads its code from `code-file=`, `SLUICE_CODE` or the terminal.
    func makeContext(role: TLSRole, host: String?, operand: String) throws(CLIError) -> TLSContext {
        for (option, path) in [("cert", certificateFile), ("key", keyFile), ("cafile", caFile)] {
            guard let path else { continue }
            if access(path, R_OK) != 0 {
                let reason = SluiceError(.system(.current), operation: "\(option)=", path: path)
                throw CLIError(.noInput, reason.description)
            }
        }
        var settings = settings(role: role, host: host)
        if usesKey { settings.preSharedKey = try presharedKey(role: role, operand: operand) }
        do {
            return try TLSContext(settings)
        } catch {
            throw CLIError(.usage, "\(operand): \(error.description)")
        }
    }

    /// The pre-shared key the options name, for `role`.
    private func presharedKey(role: TLSRole, operand: String) throws(CLIError) -> PreSharedKey? {
        if let presharedKeyFile { return try TransferSecurity.senderKey(.keyFile(presharedKeyFile)).get() }
        switch role {
        case .server:
            guard codeFile == nil else {
                throw CLIError(.usage, "\(operand): code-file= is for tls:; a listener makes the code (code=1)")
            }
            let made = try TransferSecurity.receiverKey(.code(file: nil)).get()
            if let (key, code) = made, let code {
                Terminal.report("code: \(code)")
                return key
            }
            return made?.0
        case .client:
            return try TransferSecurity.senderKey(
                .code(file: codeFile), for: "copy \(operand)", orGive: "code-file=FILE or key-file=FILE"
            ).get()
        }
    }
}
