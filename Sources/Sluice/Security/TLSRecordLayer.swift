import CCrypto

/// TLS 1.3's record layer (RFC 8446 §5) after OpenSSL's handshake, as the kernel's kTLS does
/// it: application data is sealed from the caller's buffer straight into the ciphertext
/// output, several records a call, and opened from the input buffer straight into the
/// caller's buffer (in place, and handed out in pieces, when the caller has less room than
/// the record holds). Post-handshake messages: NewSessionTicket is ignored, KeyUpdate applied
/// (and answered when asked). Anything else from the peer (a bad tag, an oversized or
/// malformed record, an unknown type) fails the connection with a reason, never a trap.
final class TLSRecordLayer {
    /// The most plaintext one record carries (2^14).
    static let maxPlaintext = 16384
    /// The longest record body allowed (2^14 + 256, RFC 8446 §5.2).
    static let maxBody = 16384 + 256
    /// The longest whole record, header included.
    static let maxRecord = 5 + maxBody
    /// A record's overhead: header, inner content type, tag.
    static let overhead = 5 + 1 + 16

    let input: TLSInputBuffer
    let output: TLSOutputBuffer
    private let sending: TLSTrafficKeys
    private let receiving: TLSTrafficKeys
    let name: String
    /// Whose AES-GCM seals and opens this connection's records.
    var engine: AESGCMEngine { sending.engine }
    /// Why the connection failed (sticky: every later call reports it).
    private(set) var failure: SluiceError?
    /// The peer's close_notify arrived.
    private(set) var peerClosed = false
    /// We sent (or queued) close_notify: nothing more is written.
    private(set) var closedForWriting = false
    /// The peer's KeyUpdates applied so far.
    private(set) var keyUpdates = 0
    /// Records owed to the peer that did not fit the output yet.
    private var owesKeyUpdate = false
    private var owesCloseNotify = false
    /// The fatal alert owed to the peer for a record it sent that we refused (RFC 8446 §6.2:
    /// bad_record_mac for a record that failed its tag, and so on), sent after what is already
    /// in the output and before nothing else. Sent once; none for the peer's own alert or its
    /// end.
    private var owesAlert: UInt8?
    /// Handshake bytes of a message whose rest is in a later record.
    private var handshakeBytes: [UInt8] = []
    /// Plaintext of a record opened in place, not yet handed out: offsets in the input buffer.
    private var heldStart = 0
    private var heldEnd = 0

    /// A record layer with the two directions' traffic secrets; nil when OpenSSL fails.
    /// `engine`: whose AES-GCM, for an AES-GCM suite on a CPU that runs it.
    init?(
        suite: TLSSuite, sendSecret: UnsafeRawBufferPointer, receiveSecret: UnsafeRawBufferPointer,
        input: TLSInputBuffer, output: TLSOutputBuffer, name: String, engine: AESGCMEngine = .current
    ) {
        guard let sending = TLSTrafficKeys(suite: suite, secret: sendSecret, encrypts: true, engine: engine),
            let receiving = TLSTrafficKeys(suite: suite, secret: receiveSecret, encrypts: false, engine: engine)
        else { return nil }
        self.sending = sending
        self.receiving = receiving
        self.input = input
        self.output = output
        self.name = name
    }

    /// Bytes a read may return without the socket: plaintext held from a record, or a whole
    /// record waiting in the input buffer.
    var plaintextPending: Bool { heldEnd > heldStart || input.completeRecord != nil }

    // MARK: Sending

    /// Seals records of up to 2^14 bytes from `buffer` into the output while it has room.
    func write(from buffer: UnsafeRawBufferPointer) -> TLSEngine.Step {
        guard buffer.count > 0, let base = buffer.baseAddress else { return .done(0) }
        if let failure { return .failed(failure) }
        if closedForWriting { return .failed(SluiceError(.closed, operation: "write", subject: name)) }
        guard emitOwedRecords() else { return .wantOutput }
        var total = 0
        while total < buffer.count {
            let n = min(Self.maxPlaintext, buffer.count - total)
            guard let record = output.reserve(n + Self.overhead) else { break }
            guard seal(base + total, count: n, type: 23, into: record) else {
                return .failed(failure ?? fail("TLS"))
            }
            total += n
        }
        return total > 0 ? .done(total) : .wantOutput
    }

    /// Queues close_notify (the end of our data); sent once the output has room.
    func shutdown() {
        guard !closedForWriting else { return }
        closedForWriting = true
        owesCloseNotify = true
        _ = emitOwedRecords()
    }

    /// The ciphertext to send next (a contiguous part of it).
    func readable() -> UnsafeRawBufferPointer {
        if output.pending == 0 { _ = emitOwedRecords() }
        return output.readable()
    }

    /// Bytes waiting to be sent, owed records counted.
    var pending: Int { output.pending + (owesKeyUpdate || owesCloseNotify ? 1 : 0) }

    /// Seals one record of `count` bytes at `plaintext` with inner type `type` at `record`.
    private func seal(_ plaintext: UnsafeRawPointer, count: Int, type: UInt8, into record: UnsafeMutableRawPointer)
        -> Bool
    {
        guard let nonce = sending.nextNonce() else {
            _ = fail("TLS", "2^64 - 1 records sent with one key (the sequence number would wrap)")
            return false
        }
        let sealed = sending.seal(
            plaintext.assumingMemoryBound(to: UInt8.self), count: count, type: type,
            into: record.assumingMemoryBound(to: UInt8.self), nonce: nonce)
        guard sealed == count + Self.overhead else { return false }
        output.commit(sealed)
        return true
    }

    /// Seals `bytes` as one record of inner type `type` (an alert, a KeyUpdate), if it fits.
    func seal(_ bytes: [UInt8], type: UInt8) -> Bool {
        guard let record = output.reserve(bytes.count + Self.overhead) else { return false }
        return bytes.withUnsafeBytes { plaintext in
            guard let base = plaintext.baseAddress else { return false }
            return seal(base, count: plaintext.count, type: type, into: record)
        }
    }

    /// Sends a KeyUpdate (RFC 8446 §4.6.3), asking the peer for its own when `requested`, and
    /// moves our sending keys on. False when the output has no room or the keys fail.
    func sendKeyUpdate(requested: Bool) -> Bool {
        guard failure == nil, !closedForWriting, seal([24, 0, 0, 1, requested ? 1 : 0], type: 22) else {
            return false
        }
        guard sending.update() else {
            fail("TLS", "could not derive the next sending key")
            return false
        }
        return true
    }

    /// Sends what is owed (our KeyUpdate, then close_notify) as far as the output has room.
    /// True when nothing is owed any more.
    private func emitOwedRecords() -> Bool {
        if let alert = owesAlert {
            // Sealed with our sending keys, which the peer's bad record did not touch.
            guard seal([2, alert], type: 21) else { return false }
            owesAlert = nil
            return true
        }
        if owesKeyUpdate {
            // KeyUpdate, update_not_requested; then our own sending keys move on.
            guard output.reserve(5 + Self.overhead) != nil else { return false }
            owesKeyUpdate = false
            guard sendKeyUpdate(requested: false) else { return true }
        }
        if owesCloseNotify {
            guard seal([1, 0], type: 21) else { return false }
            owesCloseNotify = false
        }
        return true
    }

    // MARK: Receiving

    /// Opens records into `buffer`: application data counted, other records processed.
    func read(into buffer: UnsafeMutableRawBufferPointer) -> TLSEngine.Step {
        guard buffer.count > 0, let base = buffer.baseAddress else { return .done(0) }
        var total = 0
        while total < buffer.count {
            if heldEnd > heldStart {
                let n = min(heldEnd - heldStart, buffer.count - total)
                (base + total).copyMemory(from: input.storage + heldStart, byteCount: n)
                heldStart += n
                total += n
                if heldStart == heldEnd { input.pinned = false }
                continue
            }
            if failure != nil || peerClosed { break }
            guard openRecord(into: base + total, room: buffer.count - total, total: &total) else { break }
        }
        if total > 0 { return .done(total) }
        if let failure { return .failed(failure) }
        if peerClosed { return .closed }
        if input.ended {
            return .failed(fail("TLS", "connection cut without close_notify (the data may be truncated)"))
        }
        return .wantInput
    }

    /// Opens the record at the input's start, if all of it is here: its application data into
    /// `destination` (counted in `total`) when `room` holds it, else held for later reads.
    /// False when no whole record is waiting or the connection failed.
    private func openRecord(into destination: UnsafeMutableRawPointer, room: Int, total: inout Int) -> Bool {
        guard let length = input.headerLength else { return false }
        let type = input.byte(0)
        guard type == 23 else {
            refuse(
                .unexpectedMessage, "a record of type \(type) after the handshake (only application data is allowed)")
            return false
        }
        guard input.byte(1) == 3, input.byte(2) == 3 else {
            refuse(.decodeError, "a record with version bytes \(input.byte(1)).\(input.byte(2)) (TLS 1.3 sends 3.3)")
            return false
        }
        guard length <= Self.maxBody else {
            refuse(.recordOverflow, "a record of \(length) bytes (record_overflow: at most \(Self.maxBody))")
            return false
        }
        guard length >= 17 else {
            refuse(.decodeError, "a record of \(length) bytes (too short for its tag and type)")
            return false
        }
        guard input.count >= 5 + length else { return false }
        let header = input.storage + input.start
        let inner = length - 16
        let direct = room >= inner - 1
        let target = direct ? destination : header + 5
        guard let nonce = receiving.nextNonce() else {
            _ = fail("TLS", "2^64 - 1 records received with one key (the sequence number would wrap)")
            return false
        }
        var last: UInt8 = 0
        let opened = receiving.open(
            header: header.assumingMemoryBound(to: UInt8.self),
            ciphertext: (header + 5).assumingMemoryBound(to: UInt8.self),
            length: length, into: target.assumingMemoryBound(to: UInt8.self), last: &last, nonce: nonce)
        guard opened else {
            refuse(
                .badRecordMAC, "a record failed its authentication (bad_record_mac: altered in transit, or a wrong key)"
            )
            return false
        }
        let recordStart = input.start
        input.start += 5 + length
        // The inner content type: the last non-zero byte (RFC 8446 §5.4).
        var contentType = last
        var content = inner - 1
        if contentType == 0 {
            let bytes = target.assumingMemoryBound(to: UInt8.self)
            while content > 0 && bytes[content - 1] == 0 { content -= 1 }
            guard content > 0 else {
                refuse(.unexpectedMessage, "a record with no content type (all padding)")
                return false
            }
            content -= 1
            contentType = bytes[content]
        }
        guard content <= Self.maxPlaintext else {
            refuse(.recordOverflow, "a record of \(content) bytes of plaintext (record_overflow: at most 2^14)")
            return false
        }
        let plaintext = UnsafeRawBufferPointer(start: target, count: content)
        if contentType != 22 && !handshakeBytes.isEmpty {
            refuse(.unexpectedMessage, "a handshake message cut by a record of another type")
            return false
        }
        switch contentType {
        case 23:
            if direct {
                total += content
            } else {
                heldStart = recordStart + 5
                heldEnd = heldStart + content
                input.pinned = content > 0
            }
        case 21:
            alert(plaintext)
        case 22:
            handshakeMessages(plaintext)
        default:
            refuse(.unexpectedMessage, "a record of inner type \(contentType) after the handshake")
        }
        return failure == nil
    }

    /// An alert: close_notify ends the peer's data, anything else fails the connection.
    private func alert(_ bytes: UnsafeRawBufferPointer) {
        guard bytes.count == 2 else {
            refuse(.decodeError, "an alert record of \(bytes.count) bytes (an alert is 2)")
            return
        }
        let description = bytes[1]
        if description == 0 {
            peerClosed = true
            return
        }
        var text = "alert \(description)"
        if let name = SSL_alert_desc_string_long(Int32(description)) { text += " (\(String(cString: name)))" }
        let code: SluiceError.Code =
            Self.authenticationAlerts.contains(description) ? .authenticationFailed : .protocolViolation
        failure = SluiceError(code, operation: "TLS", subject: name, detail: "the peer sent \(text)")
    }

    /// The alerts that mean the peer did not accept our authentication (a certificate checked
    /// only after our handshake ended, in TLS 1.3, is refused this way): bad_certificate,
    /// certificate_unknown, unknown_ca, access_denied, decrypt_error, unknown_psk_identity,
    /// certificate_required.
    private static let authenticationAlerts: Set<UInt8> = [42, 46, 48, 49, 51, 115, 116]

    /// Post-handshake handshake messages (RFC 8446 §4.6): walked by their 4-byte headers.
    private func handshakeMessages(_ bytes: UnsafeRawBufferPointer) {
        guard bytes.count > 0 else {
            refuse(.decodeError, "an empty handshake record")
            return
        }
        handshakeBytes.append(contentsOf: bytes)
        var offset = 0
        defer { handshakeBytes.removeFirst(min(offset, handshakeBytes.count)) }
        while handshakeBytes.count - offset >= 4 {
            let type = handshakeBytes[offset]
            let length =
                Int(handshakeBytes[offset + 1]) << 16 | Int(handshakeBytes[offset + 2]) << 8
                | Int(handshakeBytes[offset + 3])
            guard length <= 65536 else {
                refuse(.decodeError, "a handshake message of \(length) bytes after the handshake")
                return
            }
            guard handshakeBytes.count - offset >= 4 + length else { break }
            let body = offset + 4
            offset += 4 + length
            switch type {
            case 4:  // NewSessionTicket: sluice resumes no sessions
                continue
            case 24:
                guard length == 1, handshakeBytes[body] <= 1, offset == handshakeBytes.count else {
                    refuse(.decodeError, "a malformed KeyUpdate (or one not at the end of its record)")
                    return
                }
                keyUpdate(requested: handshakeBytes[body] == 1)
                if failure != nil { return }
            default:
                refuse(.unexpectedMessage, "a handshake message of type \(type) after the handshake")
                return
            }
        }
        if handshakeBytes.count - offset > 65536 + 4 {
            refuse(.decodeError, "a handshake message too long after the handshake")
        }
    }

    /// The peer's KeyUpdate: its next records use the next receiving keys; asked to, we send
    /// our own KeyUpdate before any more data and move our sending keys on.
    private func keyUpdate(requested: Bool) {
        guard receiving.update() else {
            _ = fail("TLS", "could not derive the next receiving key")
            return
        }
        keyUpdates += 1
        if requested && !closedForWriting {
            owesKeyUpdate = true
            _ = emitOwedRecords()
        }
    }

    /// Fails the connection for what the peer sent, and owes it the fatal `alert`: queued
    /// after what the output holds, in place of anything still owed (a KeyUpdate, close_notify),
    /// and written by the connection's next flush. Nothing is sent after it.
    @discardableResult
    private func refuse(_ alert: TLSAlert, _ detail: String) -> SluiceError {
        let firstFailure = failure == nil
        let error = fail("TLS", detail)
        guard firstFailure, !closedForWriting else { return error }
        closedForWriting = true
        owesKeyUpdate = false
        owesCloseNotify = false
        owesAlert = alert.rawValue
        _ = emitOwedRecords()
        return error
    }

    /// Records `detail` as the connection's failure (the first one stays) and returns it.
    @discardableResult
    private func fail(_ operation: String, _ detail: String = "could not seal a record") -> SluiceError {
        if let failure { return failure }
        let error = SluiceError(.protocolViolation, operation: operation, subject: name, detail: detail)
        failure = error
        return error
    }
}

/// The fatal alerts sluice's record layer sends (RFC 8446 §6.2).
enum TLSAlert: UInt8 {
    case unexpectedMessage = 10
    case badRecordMAC = 20
    case recordOverflow = 22
    case decodeError = 50
}
