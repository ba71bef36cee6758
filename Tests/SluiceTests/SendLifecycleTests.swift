import Testing

@testable import Sluice
@testable import SluiceTransfer

/// The sender's file lifecycle, driven without sockets or disks.
@Suite("A sent file's lifecycle")
struct SendLifecycleTests {
    typealias Phase = SendLifecycle.Phase
    typealias Event = SendLifecycle.Event
    typealias Effect = SendLifecycle.Effect

    static let phases: [Phase] = [
        .awaitingAccept, .hashingPrefix, .matching, .sending, .drainingCompression, .compressionDrained,
        .checkingChange, .finishing, .closed,
    ]
    static let events: [Event] = [
        .start, .hashPrefix, .match, .prefixHashed, .opsFound, .sourceEnded, .compressionFinished,
        .dataOut(checkChange: true), .dataOut(checkChange: false), .changeChecked, .sourceReadable, .streamRead,
        .close,
    ]

    /// A lifecycle in `phase`, its stream source readable or not, reached by the events a
    /// sender sends.
    static func lifecycle(in phase: Phase, readable: Bool = false) throws -> SendLifecycle {
        var life = SendLifecycle()
        if readable { #expect(try life.handle(.sourceReadable) == .produce) }
        let path: [Event]
        switch phase {
        case .awaitingAccept: path = []
        case .hashingPrefix: path = [.hashPrefix]
        case .matching: path = [.match]
        case .sending: path = [.start]
        case .drainingCompression: path = [.start, .sourceEnded]
        case .compressionDrained: path = [.start, .sourceEnded, .compressionFinished]
        case .checkingChange: path = [.start, .dataOut(checkChange: true)]
        case .finishing: path = [.start, .dataOut(checkChange: false)]
        case .closed: path = [.close]
        }
        for event in path { _ = try life.handle(event) }
        #expect(life.phase == phase)
        #expect(life.sourceReadable == readable)
        return life
    }

    /// What an event does: the phase and readiness after it and the effect.
    struct Transition: Equatable {
        let next: Phase
        let readable: Bool
        let effect: Effect
    }

    /// Every pair a phase (and readiness) takes, and what it does; every pair not here is an
    /// internal error.
    static func table(_ phase: Phase, readable: Bool, _ event: Event) -> Transition? {
        let stay = { (effect: Effect) in Transition(next: phase, readable: readable, effect: effect) }
        let to = { (next: Phase, effect: Effect) in Transition(next: next, readable: readable, effect: effect) }
        let rows: [(Phase, Event, Transition)] = [
            (.awaitingAccept, .start, to(.sending, .produce)),
            (.awaitingAccept, .hashPrefix, to(.hashingPrefix, .nothing)),
            (.awaitingAccept, .match, to(.matching, .nothing)),
            (.awaitingAccept, .close, to(.closed, .discardDigest)),
            (.hashingPrefix, .prefixHashed, to(.sending, .produce)),
            (.hashingPrefix, .close, to(.closed, .discardDigest)),
            (.matching, .opsFound, to(.sending, .produce)),
            (.matching, .close, to(.closed, .discardDigest)),
            (.sending, .opsFound, stay(.produce)),
            (.sending, .sourceEnded, to(.drainingCompression, .nothing)),
            (.sending, .dataOut(checkChange: true), to(.checkingChange, .checkChange)),
            (.sending, .dataOut(checkChange: false), to(.finishing, .finishDigest)),
            (
                .sending, .streamRead,
                readable ? Transition(next: .sending, readable: false, effect: .read) : stay(.nothing)
            ),
            (.sending, .close, to(.closed, .discardDigest)),
            (.drainingCompression, .compressionFinished, to(.compressionDrained, .nothing)),
            (.drainingCompression, .close, to(.closed, .discardDigest)),
            (.compressionDrained, .compressionFinished, stay(.nothing)),
            (.compressionDrained, .dataOut(checkChange: true), to(.checkingChange, .checkChange)),
            (.compressionDrained, .dataOut(checkChange: false), to(.finishing, .finishDigest)),
            (.compressionDrained, .close, to(.closed, .discardDigest)),
            (.checkingChange, .changeChecked, to(.finishing, .finishDigest)),
            (.checkingChange, .dataOut(checkChange: true), stay(.ignore)),
            (.checkingChange, .dataOut(checkChange: false), stay(.ignore)),
            (.checkingChange, .close, to(.closed, .discardDigest)),
            (.finishing, .dataOut(checkChange: true), stay(.ignore)),
            (.finishing, .dataOut(checkChange: false), stay(.ignore)),
            (.finishing, .opsFound, stay(.ignore)),
            (.finishing, .close, to(.closed, .nothing)),
            (.closed, .prefixHashed, stay(.ignore)),
            (.closed, .opsFound, stay(.ignore)),
            (.closed, .changeChecked, stay(.ignore)),
            (.closed, .sourceReadable, stay(.ignore)),
        ]
        if event == .sourceReadable && phase != .closed {
            return Transition(next: phase, readable: true, effect: .produce)
        }
        return rows.first { $0.0 == phase && $0.1 == event }?.2
    }

    @Test("Every event in every phase does what the table says; a pair not in it is an internal error")
    func everyPairAsTabled() throws {
        for phase in Self.phases {
            for readable in [false, true] {
                for event in Self.events {
                    var life = try Self.lifecycle(in: phase, readable: readable)
                    let before = life
                    if let expected = Self.table(phase, readable: readable, event) {
                        #expect(try life.handle(event) == expected.effect, "\(phase), \(readable), \(event)")
                        #expect(life.phase == expected.next, "\(phase), \(readable), \(event)")
                        #expect(life.sourceReadable == expected.readable, "\(phase), \(readable), \(event)")
                    } else {
                        do {
                            _ = try life.handle(event)
                            Issue.record("\(phase), \(readable), \(event): taken, the table says an error")
                        } catch {
                            #expect(error.phase == phase && error.event == event)
                            #expect(error.description.hasPrefix("internal error: a sent file in phase"))
                        }
                        #expect(life == before, "an illegal event leaves the lifecycle as it was")
                    }
                }
            }
        }
    }

    @Test("Data goes out only in the sending phases")
    func producing() throws {
        for phase in Self.phases {
            let life = try Self.lifecycle(in: phase)
            #expect(life.isProducing == [.sending, .drainingCompression, .compressionDrained].contains(phase))
        }
    }

    @Test("A resumed file: no data while its prefix is hashed; its digest finished once, END after")
    func resumedFile() throws {
        var life = SendLifecycle()
        #expect(try life.handle(.hashPrefix) == .nothing)
        #expect(!life.isProducing)
        #expect(try life.handle(.prefixHashed) == .produce)
        #expect(life.isProducing)
        #expect(try life.handle(.dataOut(checkChange: false)) == .finishDigest)
        #expect(try life.handle(.dataOut(checkChange: false)) == .ignore, "a second end, reached by a call back")
        #expect(try life.handle(.close) == .nothing, "its digest was finished: nothing to discard")
    }

    @Test("A compressed file: its deflate stream drains after its source, then the change check, then the digest")
    func compressedFile() throws {
        var life = try Self.lifecycle(in: .sending)
        #expect(try life.handle(.sourceEnded) == .nothing)
        #expect(life.isProducing, "the deflate stream's last bytes go out")
        #expect(throws: SendLifecycle.IllegalTransition.self) { try life.handle(.streamRead) }
        #expect(throws: SendLifecycle.IllegalTransition.self) { try life.handle(.dataOut(checkChange: false)) }
        #expect(try life.handle(.compressionFinished) == .nothing)
        #expect(try life.handle(.compressionFinished) == .nothing)
        #expect(try life.handle(.dataOut(checkChange: true)) == .checkChange)
        #expect(!life.isProducing)
        #expect(try life.handle(.changeChecked) == .finishDigest)
        #expect(life.phase == .finishing)
    }

    @Test("A stream is read only once per readiness it announced, even when it came before ACCEPT")
    func streamReadiness() throws {
        var life = SendLifecycle()
        #expect(try life.handle(.sourceReadable) == .produce)
        #expect(try life.handle(.start) == .produce)
        #expect(try life.handle(.streamRead) == .read)
        #expect(try life.handle(.streamRead) == .nothing, "no second read before the stream says so")
        #expect(try life.handle(.sourceReadable) == .produce)
        #expect(try life.handle(.sourceReadable) == .produce)
        #expect(try life.handle(.streamRead) == .read, "readiness is one, however often it was said")
        #expect(try life.handle(.streamRead) == .nothing)
    }

    @Test("A delta: no data until the match finds operations; a late report after the end is ignored")
    func delta() throws {
        var life = SendLifecycle()
        #expect(try life.handle(.match) == .nothing)
        #expect(!life.isProducing)
        #expect(try life.handle(.opsFound) == .produce)
        #expect(try life.handle(.opsFound) == .produce)
        #expect(try life.handle(.dataOut(checkChange: false)) == .finishDigest)
        #expect(try life.handle(.opsFound) == .ignore)
        #expect(try life.handle(.close) == .nothing)
        for late in [Event.opsFound, .prefixHashed, .changeChecked, .sourceReadable] {
            #expect(try life.handle(late) == .ignore)
        }
        #expect(throws: SendLifecycle.IllegalTransition.self) { try life.handle(.close) }
    }

    /// Random sequences from every phase: the digest is finished at most once and discarded
    /// only when it was not; a read takes a readiness announced before it; data goes out only
    /// after a start; nothing but `ignore` follows the close.
    @Test("Random event sequences keep the lifecycle's invariants")
    func randomSequences() throws {
        var generator = SeededRandom(state: 0x5e4d_11fe)
        for _ in 0..<20_000 {
            let start = Self.phases.randomElement(using: &generator)!
            let readable = Bool.random(using: &generator)
            var life = try Self.lifecycle(in: start, readable: readable)
            var finishes = [Phase.finishing, .closed].contains(start) ? 1 : 0
            var discards = start == .closed ? 1 : 0
            var checks = start == .checkingChange ? 1 : 0
            var startedData = ![Phase.awaitingAccept, .hashingPrefix, .matching].contains(start)
            var announced = readable
            for _ in 0..<16 {
                let event = Self.events.randomElement(using: &generator)!
                let before = life
                let effect: Effect
                do {
                    effect = try life.handle(event)
                } catch {
                    #expect(life == before)
                    continue
                }
                switch effect {
                case .finishDigest: finishes += 1
                case .discardDigest:
                    discards += 1
                    #expect(finishes == 0, "a finished digest is never discarded")
                case .checkChange: checks += 1
                case .read:
                    #expect(announced, "a read takes a readiness the stream announced")
                    announced = false
                case .produce where event != .sourceReadable: startedData = true
                case .nothing, .ignore, .produce: break
                }
                if event == .sourceReadable && effect == .produce { announced = true }
                if before.phase == .closed { #expect(effect == .ignore) }
                if life.isProducing { #expect(startedData, "data only after ACCEPT, the prefix or the match") }
                if event == .changeChecked && effect == .finishDigest { #expect(checks == 1) }
                #expect(life.sourceReadable == announced)
            }
            #expect(finishes <= 1 && discards <= 1 && checks <= 1, "from \(start)")
            #expect(finishes + discards <= 2)
        }
    }
}
