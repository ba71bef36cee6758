// libFuzzer target: the parsers of short texts from outside the protocol. The sizes a user or a
// script types (`--chunk-size`, `--rate-limit`: `ChunkSize(parsing:)` and
// `ChunkSize.parseBytes`), a key file's text (`KeyFile.parse`), a pairing code as a person
// types it (`PairingCode.parse`), and a partial file's range list as found in its
// `user.sluice.ranges` attribute (`ReceiverStore.parseRanges`: anyone who can write the
// directory can set it), a short code as a person types it (`WordCode.parse`), a launcher's
// task variables (`Shard.fromLauncher`, for `send --shard auto`), and a peer's SPAKE2 share
// (`SPAKE2.finish(peerShare:)`: any bytes are a key or `invalidShare`); the first line a
// stranger sends `sluice relay` (`RelayHello.parse`) and what a relay answers
// (`RelayClient.parse(answer:)`), a stranger's datagram on the local network
// (`LocalAnnounce.parse`), a peer's sealed offer and answer (`CodeKey.open`,
// `ReachOffer.parse`, `ReachAnswer.parse`), and what an inotify descriptor reads
// (`InotifyEvent.parse`, for `send --watch`: whole events or a refusal), and a path as a peer
// names an entry (`PathCheck.components` and `.receivable`: its components, or why not), and
// TLS 1.3 records as a peer sends them after the handshake (`TLSRecordLayer.read`, keyed with
// fixed secrets: raw bytes, or records of any type and content sealed with the right key, a
// byte flipped or not, read with buffers of several sizes).
// Any text must give a value or a clean refusal, never a crash or an
// overflow; what is accepted must be in range and read back the same from its own written
// form. (The CLI's endpoint parser lives in the executable target, which another package
// cannot import: it has no target here.)
import FuzzDriver
import FuzzSupport

@testable import Sluice
@testable import SluiceTransfer

/// One fuzz input (libFuzzer's `LLVMFuzzerTestOneInput`).
func fuzzParsers(_ start: UnsafePointer<UInt8>?, _ count: Int) -> CInt {
    guard let start, let (_, bytes) = FuzzInput.split(start, count) else { return 0 }
    let text = String(decoding: bytes, as: UTF8.self)
    sizes(text)
    keyFile(text)
    pairingCode(text)
    wordCode(text)
    launcher(text)
    spakeShare(Array(bytes))
    relayHello(Array(bytes))
    relayAnswer(Array(bytes))
    announcement(Array(bytes))
    sealedOffer(Array(bytes))
    inotifyEvents(Array(bytes))
    path(Array(bytes))
    tlsRecords(Array(bytes))
    // The file's size, from the seed byte: 0, small, far beyond any range's end, or at the
    // edges of what an offset and the field hold (0xfc, 0xfd, 0xfe: 2^63 - 1, 2^63, 2^64 - 1).
    let seed = UInt64(start[0])
    let edges = [UInt64(Int64.max), UInt64(Int64.max) + 1, .max]
    ranges(Array(bytes), size: (0xfc...0xfe).contains(seed) ? edges[Int(seed - 0xfc)] : seed << (seed % 48))
    return 0
}

func sizes(_ text: String) {
    if let value = ChunkSize.parseBytes(text) {
        expect(value >= 0, "parseBytes(\(text.debugDescription)) = \(value)")
    }
    let parsed = Result { () throws(SluiceError) in try ChunkSize(parsing: text) }
    switch parsed {
    case .success(let size):
        expect(ChunkSize.range.contains(size.bytes), "\(text.debugDescription) parsed as \(size.bytes) bytes")
        expect(
            ChunkSize.parseBytes(text) == size.bytes, "ChunkSize and parseBytes disagree on \(text.debugDescription)")
        let again = try? ChunkSize(parsing: size.description)
        expect(again == size, "\(size.description) does not read back as \(size.bytes) bytes")
    case .failure(let error):
        expect(error.code == .invalidArgument, "\(text.debugDescription): \(error)")
    }
}

func keyFile(_ text: String) {
    guard let key = KeyFile.parse(text) else { return }
    expect(key.bytes.count == 32, "a key of \(key.bytes.count) bytes from \(text.debugDescription)")
    let hex = key.bytes.map { byte in
        let digits = Array("0123456789abcdef")
        return String([digits[Int(byte >> 4)], digits[Int(byte & 15)]])
    }.joined()
    expect(KeyFile.parse("sluice-key-v1 \(hex)\n") == key, "\(text.debugDescription) does not read back")
}

func pairingCode(_ text: String) {
    guard case .success(let code) = PairingCode.parse(text) else { return }
    expect(code.payload.utf8.count == PairingCode.payloadLength, "payload \(code.payload.debugDescription)")
    expect(PairingCode.parse(code.description) == .success(code), "\(code) does not read back")
    expect(PairingCode.parse(code.description.lowercased()) == .success(code), "\(code) lower-cased")
}

func wordCode(_ text: String) {
    guard case .success(let code) = WordCode.parse(text) else { return }
    expect(WordCode.wordCounts.contains(code.words.count), "\(code.words.count) words from \(text.debugDescription)")
    expect(code.nameplate <= WordCode.maxNameplate, "nameplate \(code.nameplate) from \(text.debugDescription)")
    expect(WordCode.parse(code.description) == .success(code), "\(code) does not read back")
}

/// The text as every variable a launcher sets, then as the index alone (the count from the
/// text's length): a shard in range, or a refusal.
func launcher(_ text: String) {
    for (name, count) in [(nil, nil), ("PMI_RANK", text.utf8.count + 1)] as [(String?, Int?)] {
        let environment: (String) -> String? = { variable in name == nil || variable == name ? text : nil }
        guard case .success(let (shard, _)) = Shard.fromLauncher(environment: environment, count: count) else {
            continue
        }
        expect(shard.count >= 1 && (0..<shard.count).contains(shard.index), "\(shard) from \(text.debugDescription)")
    }
}

/// One side of an exchange, made once (its w fixed: no scrypt per input); `finish` leaves it as
/// it was, so every input meets the same side.
nonisolated(unsafe) let spakeSide = try? SPAKE2(
    role: .a, password: [UInt8](repeating: 7, count: 32), identityA: Array("sender".utf8), identityB: [])

func spakeShare(_ bytes: [UInt8]) {
    guard let spakeSide else {
        expect(false, "SPAKE2 could not start")
        return
    }
    switch Result(catching: { () throws(SPAKE2.Failure) in try spakeSide.finish(peerShare: bytes) }) {
    case .success(let exchange):
        expect(bytes.count == SPAKE2.shareBytes && exchange.key.count == 16, "a key from \(bytes.count) bytes")
    case .failure(let failure):
        expect(failure == .invalidShare, "\(failure) from \(bytes.count) bytes")
    }
}

/// A relay's answer line: one of the answers, each of them in range, or nil.
func relayAnswer(_ bytes: [UInt8]) {
    switch RelayClient.parse(answer: bytes) {
    case .nameplate(let n)?:
        expect((1...WordCode.maxNameplate).contains(n), "nameplate \(n) from \(bytes)")
    case .refused(.other(let reason))?:
        expect(reason.utf8.count < RelayClient.maxLine, "a reason of \(reason.utf8.count) bytes")
    case .paired?, .refused?, nil:
        break
    }
}

/// A relay hello: incomplete, bad, or a hello that ends within the bytes and within the longest
/// line, and reads back from its own line; and fed a byte at a time, the same answer.
func relayHello(_ bytes: [UInt8]) {
    let parsed = RelayHello.parse(bytes)
    if case .hello(let hello, let length) = parsed {
        expect(length <= bytes.count && length <= RelayHello.maximumLength, "hello of \(length) bytes")
        expect(Array(hello.line.utf8) == Array(bytes[..<length]), "\(hello) does not read back")
        if case .join(let nameplate) = hello {
            expect((1...RelayHello.maximumNameplate).contains(nameplate), "\(hello)")
        }
    }
    if case .incomplete = parsed { expect(bytes.count < RelayHello.maximumLength, "incomplete at \(bytes.count)") }
    // A prefix never decides otherwise than the whole, unless it is still incomplete.
    for end in 0..<min(bytes.count, RelayHello.maximumLength) {
        let early = RelayHello.parse(bytes[..<end])
        guard early != .incomplete else { continue }
        expect(early == parsed, "\(end) bytes decide \(early), all \(parsed)")
        break
    }
}

/// An announcement: a nameplate and a port in range that read back the same, or nil.
func announcement(_ bytes: [UInt8]) {
    guard let (nameplate, port) = LocalAnnounce.parse(bytes) else { return }
    expect((1...WordCode.maxNameplate).contains(nameplate) && port != 0, "\(nameplate) \(port)")
    expect(LocalAnnounce.message(nameplate: nameplate, port: port) == bytes, "announcement does not read back")
}

/// The key every input meets (fixed: the input is what a peer sealed, or forged).
let offerKey = CodeKey(secret: [UInt8](repeating: 9, count: 16))

/// A sealed offer: opened only when sealed with the key, and then an offer in range or nil;
/// the bytes as a plain offer too.
func sealedOffer(_ bytes: [UInt8]) {
    if let opened = offerKey.open(bytes, from: .sender) {
        expect(offerKey.seal(opened, from: .sender) == bytes, "a forged seal opened: \(bytes.count) bytes")
    }
    if let offer = ReachOffer.parse(bytes) {
        expect((1...ReachOffer.maxStreams).contains(offer.streams), "\(offer.streams) streams")
        expect(offer.addresses.count <= ReachOffer.maxAddresses, "\(offer.addresses.count) addresses")
        expect(offer.encoded == bytes, "offer does not read back")
    }
    if let answer = ReachAnswer.parse(bytes) {
        expect(answer.encoded == bytes, "answer does not read back")
    }
}

func ranges(_ bytes: [UInt8], size: UInt64) {
    let held = ReceiverStore.parseRanges(bytes, size: size)
    expect(held.count <= ReceiverStore.maxRecordedRanges, "\(held.count) ranges kept")
    let sorted = held.keys.sorted { $0.start < $1.start }
    for (index, range) in sorted.enumerated() {
        guard let end = range.end else {
            expect(false, "range \(range) overflows")
            return
        }
        expect(range.length > 0 && end <= size, "range \(range) outside \(size) bytes")
        expect(end <= Wire.maxFileSize, "range \(range) past what an offset holds")
        if let count = held[range] { expect(count <= range.length, "range \(range) holds \(count)") }
        if index > 0 { expect(!sorted[index - 1].overlaps(range), "ranges \(sorted[index - 1]) and \(range) overlap") }
    }
    // The form the store writes reads back as the same list.
    let text = sorted.map { "\($0.start)+\($0.length)=\(held[$0] ?? 0)" }.joined(separator: ",")
    expect(ReceiverStore.parseRanges(Array(text.utf8), size: size) == held, "\(text) does not read back")
}

/// A path from a peer: components that join back into its bytes, none of them empty, `.`, `..`,
/// too long or holding a `/` or NUL; what `receivable` accepts `components` accepts the same.
func path(_ bytes: [UInt8]) {
    let receivable = try? PathCheck.receivable(bytes).get()
    guard let components = try? PathCheck.components(bytes).get() else {
        expect(receivable == nil, "receivable but not components: \(bytes)")
        return
    }
    if let receivable { expect(receivable == components, "receivable splits otherwise: \(bytes)") }
    expect(Array(components.joined(separator: "/").utf8) == bytes, "components do not join back: \(bytes)")
    for component in components {
        let utf8 = Array(component.utf8)
        expect(!utf8.isEmpty && utf8.count <= Wire.maxComponentBytes, "component of \(utf8.count) bytes")
        expect(component != "." && component != "..", "component \(component)")
        expect(!utf8.contains(0) && !utf8.contains(UInt8(ascii: "/")), "component holds NUL or /")
    }
}

runLibFuzzer(fuzzParsers)

/// Any bytes as an inotify read: whole events, each name within the bytes and without a `/`;
/// a complete parse reads back the same from the events' own layout (names NUL-padded alike).
func inotifyEvents(_ bytes: [UInt8]) {
    let (events, complete) = bytes.withUnsafeBytes { InotifyEvent.parse($0) }
    for event in events {
        expect(!(event.name ?? "").contains("/"), "an inotify name with a slash")
        expect(event.name == nil || !event.undecodable, "a name both read and undecodable")
    }
    guard complete, events.allSatisfy({ !$0.undecodable }) else { return }
    let again = InotifyEvent.encode(events).withUnsafeBytes { InotifyEvent.parse($0) }
    expect(again.complete, "inotify events do not read back whole")
    expect(
        again.events.map { [$0.watch, Int32(bitPattern: $0.mask), Int32(bitPattern: $0.cookie)] }
            == events.map { [$0.watch, Int32(bitPattern: $0.mask), Int32(bitPattern: $0.cookie)] },
        "inotify events do not read back the same")
}

/// Bytes as TLS 1.3 records after the handshake, into a record layer with fixed secrets.
/// Control byte: bit 0 raw (the bytes as they are) or sealed (`[type, length, content…]`
/// sealed by the peer's layer); bit 1 flips the byte at the offset of the next byte; bits 2–3
/// the suite; bits 4–6 the read size; bit 7 which end has sluice's own AES-GCM (the other
/// OpenSSL's, where the CPU runs it: so sealed records also cross between the two). No crash;
/// no more plaintext than was fed; a failure or close stays; sealed application data alone
/// reads back as it was sealed.
func tlsRecords(_ bytes: [UInt8]) {
    guard let control = bytes.first else { return }
    var rest = bytes.dropFirst()
    let suite = [TLSSuite.aes128GCM, .aes256GCM, .chacha20Poly1305][Int(control >> 2 & 3) % 3]
    let readSize = [1, 7, 100, 4096, 16383, 16384, 16385, 70000][Int(control >> 4 & 7)]
    let ownAtPeer = control & 0x80 == 0
    func layer(_ send: UInt8, _ receive: UInt8, _ engine: AESGCMEngine) -> TLSRecordLayer? {
        let a = [UInt8](repeating: send, count: suite.hashLength)
        let b = [UInt8](repeating: receive, count: suite.hashLength)
        return a.withUnsafeBytes { s in
            b.withUnsafeBytes { r in
                TLSRecordLayer(
                    suite: suite, sendSecret: s, receiveSecret: r, input: TLSInputBuffer(capacity: 1 << 18),
                    output: TLSOutputBuffer(capacity: 1 << 18), name: "fuzz", engine: engine)
            }
        }
    }
    guard let peer = layer(1, 2, ownAtPeer ? .vector : .openssl), let us = layer(2, 1, ownAtPeer ? .openssl : .vector)
    else { return expect(false, "no record layer") }
    var stream: [UInt8]
    var expected: [UInt8]? = []
    if control & 1 == 0 {
        stream = Array(rest)
        expected = nil
    } else {
        stream = []
        while rest.count >= 2 {
            let type = rest[rest.startIndex]
            let length = Int(rest[rest.startIndex + 1]) * 67
            rest = rest.dropFirst(2)
            var content = Array(rest.prefix(length))
            rest = rest.dropFirst(content.count)
            if length > content.count {
                content += [UInt8](repeating: UInt8(length & 0xff), count: length - content.count)
            }
            if type == 23 && content.count <= 16384 { expected? += content } else { expected = nil }
            guard peer.seal(content, type: type) else { break }
            stream += peer.readable()
            peer.output.consume(peer.readable().count)
        }
        if control & 2 != 0, !stream.isEmpty, let at = bytes.dropFirst().first {
            stream[Int(at) * 97 % stream.count] ^= 0x20
            expected = nil
        }
    }
    var fed = 0
    var received: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: readSize)
    var final: TLSEngine.Step?
    while final == nil {
        let space = us.input.space()
        let n = min(space.count, stream.count - fed)
        if n > 0 {
            stream.withUnsafeBytes { space.baseAddress!.copyMemory(from: $0.baseAddress! + fed, byteCount: n) }
            us.input.commit(n)
            fed += n
        } else if fed == stream.count {
            us.input.ended = true
        }
        while true {
            let step = buffer.withUnsafeMutableBytes { us.read(into: $0) }
            if case .done(let count) = step {
                expect(count > 0 && count <= readSize, "a read of \(count) into \(readSize)")
                received += buffer[..<count]
                continue
            }
            if step != .wantInput { final = step }
            break
        }
        if final == nil && n == 0 && !us.input.ended { return expect(false, "no room in the input buffer") }
    }
    expect(received.count <= stream.count, "more plaintext than ciphertext")
    let again = buffer.withUnsafeMutableBytes { us.read(into: $0) }
    expect(again == final, "\(String(describing: final)) then \(again)")
    if let expected {
        expect(received == expected, "sealed data read back otherwise")
        if case .failed(let error) = final { expect("\(error)".contains("close_notify"), "\(error)") }
    }
}
