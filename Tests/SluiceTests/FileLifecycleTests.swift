import Testing

@testable import Sluice
@testable import SluiceTransfer

/// The receiver's file lifecycle, driven without sockets or disks.
@Suite("A received file's lifecycle")
struct FileLifecycleTests {
    typealias Phase = FileLifecycle.Phase
    typealias Event = FileLifecycle.Event
    typealias Effect = FileLifecycle.Effect

    static let phases: [Phase] = [
        .checkingPrefix, .receiving, .waitingForRoom, .finishing, .verifying, .committing,
        .releasing(keep: true), .releasing(keep: false), .finished,
    ]
    static let events: [Event] = [
        .checkPrefix, .prefixChecked, .hasherFull, .room, .endArrived, .verify, .commit, .writeFailed, .failed, .stored,
        .drop(keep: true), .drop(keep: false),
    ]

    /// A lifecycle in `phase`, reached by the events a session sends.
    static func lifecycle(in phase: Phase) throws -> FileLifecycle {
        var life: FileLifecycle
        switch phase {
        case .checkingPrefix:
            life = FileLifecycle()
            #expect(try life.handle(.checkPrefix) == .nothing)
        case .receiving:
            return FileLifecycle()
        case .waitingForRoom:
            life = FileLifecycle()
            _ = try life.handle(.hasherFull)
        case .finishing:
            life = FileLifecycle()
            _ = try life.handle(.endArrived)
        case .verifying:
            life = FileLifecycle()
            _ = try life.handle(.verify)
        case .committing:
            life = try lifecycle(in: .verifying)
            _ = try life.handle(.commit)
        case .releasing(let keep):
            life = try lifecycle(in: .checkingPrefix)
            _ = try life.handle(.drop(keep: keep))
        case .finished:
            life = try lifecycle(in: .committing)
            _ = try life.handle(.stored)
        }
        #expect(life.phase == phase)
        return life
    }

    @Test("Every event in every phase: a transition or an internal error naming both, never a crash")
    func everyPair() throws {
        for phase in Self.phases {
            for event in Self.events {
                var life = try Self.lifecycle(in: phase)
                do {
                    _ = try life.handle(event)
                } catch {
                    #expect(error.phase == phase && error.event == event)
                    #expect(error.description.hasPrefix("internal error: a received file in phase"))
                    #expect(life.phase == phase, "an illegal event leaves the phase as it was")
                }
            }
        }
    }

    /// What an event does in a phase: the phase after it and the effect.
    struct Transition: Equatable {
        let next: Phase
        let effect: Effect
    }

    /// Every pair a phase takes, and what it does; every pair not here is an internal error.
    static func table(_ phase: Phase, _ event: Event) -> Transition? {
        let stay = { (effect: Effect) in Transition(next: phase, effect: effect) }
        let to = { (next: Phase, effect: Effect) in Transition(next: next, effect: effect) }
        let rows: [(Phase, Event, Transition)] =
            [
                (.checkingPrefix, .prefixChecked, to(.receiving, .proceed)),
                (.checkingPrefix, .room, stay(.ignore)),
                (.checkingPrefix, .writeFailed, stay(.ignore)),
                (.checkingPrefix, .failed, to(.finished, .abandon(keep: false))),
                (.receiving, .checkPrefix, to(.checkingPrefix, .nothing)),
                (.receiving, .hasherFull, to(.waitingForRoom, .nothing)),
                (.receiving, .room, stay(.ignore)),
                (.receiving, .endArrived, to(.finishing, .nothing)),
                (.receiving, .verify, to(.verifying, .nothing)),
                (.receiving, .writeFailed, stay(.failWrite)),
                (.receiving, .failed, to(.finished, .abandon(keep: false))),
                (.waitingForRoom, .room, to(.receiving, .nothing)),
                (.waitingForRoom, .writeFailed, stay(.failWrite)),
                (.waitingForRoom, .failed, to(.finished, .abandon(keep: false))),
                (.finishing, .room, stay(.ignore)),
                (.finishing, .verify, to(.verifying, .nothing)),
                (.finishing, .writeFailed, stay(.failWrite)),
                (.finishing, .failed, to(.finished, .abandon(keep: false))),
                (.verifying, .room, stay(.ignore)),
                (.verifying, .commit, to(.committing, .nothing)),
                (.verifying, .writeFailed, stay(.ignore)),
                (.verifying, .failed, to(.finished, .abandon(keep: false))),
                (.verifying, .stored, to(.finished, .nothing)),
                (.committing, .room, stay(.ignore)),
                (.committing, .writeFailed, stay(.ignore)),
                (.committing, .failed, to(.finished, .abandon(keep: false))),
                (.committing, .stored, to(.finished, .nothing)),
                (.finished, .prefixChecked, stay(.ignore)),
                (.finished, .room, stay(.ignore)),
                (.finished, .commit, stay(.ignore)),
                (.finished, .writeFailed, stay(.ignore)),
                (.finished, .failed, stay(.ignore)),
                (.finished, .stored, stay(.ignore)),
            ]
            + [true, false].flatMap { keep -> [(Phase, Event, Transition)] in
                [
                    (.checkingPrefix, .drop(keep: keep), to(.releasing(keep: keep), .nothing)),
                    (.receiving, .drop(keep: keep), to(.finished, .abandon(keep: keep))),
                    (.waitingForRoom, .drop(keep: keep), to(.finished, .abandon(keep: keep))),
                    (.finishing, .drop(keep: keep), to(.finished, .abandon(keep: keep))),
                    (.verifying, .drop(keep: keep), to(.finished, .abandon(keep: keep))),
                    (.committing, .drop(keep: keep), stay(.nothing)),
                ]
            }
            + [true, false].flatMap { keep -> [(Phase, Event, Transition)] in
                let releasing = Phase.releasing(keep: keep)
                return [
                    (releasing, .prefixChecked, to(.finished, .abandon(keep: keep))),
                    (releasing, .failed, to(.finished, .abandon(keep: keep))),
                    (releasing, .room, stay(.ignore)),
                    (releasing, .writeFailed, stay(.ignore)),
                    (releasing, .commit, stay(.ignore)),
                    (releasing, .stored, stay(.ignore)),
                ]
            }
        return rows.first { $0.0 == phase && $0.1 == event }?.2
    }

    @Test("Every event in every phase does what the table says; a pair not in it is an internal error")
    func everyPairAsTabled() throws {
        for phase in Self.phases {
            for event in Self.events {
                var life = try Self.lifecycle(in: phase)
                if let expected = Self.table(phase, event) {
                    #expect(try life.handle(event) == expected.effect, "\(phase), \(event)")
                    #expect(life.phase == expected.next, "\(phase), \(event)")
                } else {
                    #expect(throws: FileLifecycle.IllegalTransition.self, "\(phase), \(event)") {
                        try life.handle(event)
                    }
                    #expect(life.phase == phase)
                }
            }
        }
    }

    @Test("A file received whole: verified, committed, stored; nothing abandons it")
    func plainFile() throws {
        var life = FileLifecycle()
        #expect(life.takesData)
        #expect(try life.handle(.hasherFull) == .nothing)
        #expect(life.waitsForRoom && !life.takesData)
        #expect(try life.handle(.room) == .nothing)
        #expect(life.takesData)
        #expect(try life.handle(.verify) == .nothing)
        #expect(try life.handle(.writeFailed) == .ignore, "the commit reports a failed write")
        #expect(try life.handle(.commit) == .nothing)
        #expect(try life.handle(.drop(keep: true)) == .nothing, "the commit closes the descriptors itself")
        #expect(life.phase == .committing)
        #expect(try life.handle(.stored) == .nothing)
        #expect(life.phase == .finished)
    }

    @Test("A compressed file's END: no more data while its worker flushes; a hasher that fills meanwhile is an error")
    func compressedFlush() throws {
        var life = FileLifecycle()
        #expect(try life.handle(.endArrived) == .nothing)
        #expect(!life.takesData && life.isOpenForData)
        #expect(throws: FileLifecycle.IllegalTransition.self) { try life.handle(.hasherFull) }
        var flushing = FileLifecycle()
        _ = try flushing.handle(.endArrived)
        #expect(try flushing.handle(.room) == .ignore, "room not waited for is ignored")
        #expect(try flushing.handle(.verify) == .nothing)
    }

    @Test("Let go while its prefix is hashed: abandoned when the hash is done, with the machine's keep")
    func releasedDuringPrefix() throws {
        for keep in [true, false] {
            for outcome in [Event.prefixChecked, .failed] {
                var life = try Self.lifecycle(in: .checkingPrefix)
                #expect(!life.takesData)
                #expect(try life.handle(.drop(keep: keep)) == .nothing)
                #expect(life.phase == .releasing(keep: keep))
                #expect(try life.handle(outcome) == .abandon(keep: keep))
                #expect(life.phase == .finished)
            }
        }
        var life = try Self.lifecycle(in: .checkingPrefix)
        #expect(try life.handle(.prefixChecked) == .proceed)
        #expect(life.takesData)
        var unreadable = try Self.lifecycle(in: .checkingPrefix)
        #expect(try unreadable.handle(.failed) == .abandon(keep: false))
    }

    @Test("A failed write fails the file while it is written, and is ignored once it is verified or let go")
    func writeFailures() throws {
        for phase in [Phase.receiving, .waitingForRoom, .finishing] {
            var life = try Self.lifecycle(in: phase)
            #expect(try life.handle(.writeFailed) == .failWrite)
            #expect(try life.handle(.drop(keep: false)) == .abandon(keep: false))
        }
        for phase in [Phase.verifying, .committing, .releasing(keep: true), .finished, .checkingPrefix] {
            var life = try Self.lifecycle(in: phase)
            #expect(try life.handle(.writeFailed) == .ignore)
        }
    }

    @Test("A ranged file read back whole and found wrong is abandoned by its session")
    func rangeReadBackFails() throws {
        var life = try Self.lifecycle(in: .committing)
        #expect(try life.handle(.failed) == .abandon(keep: false))
        #expect(life.phase == .finished)
        var notLast = try Self.lifecycle(in: .verifying)
        #expect(try notLast.handle(.stored) == .nothing, "a range that was not its file's last")
        #expect(notLast.phase == .finished)
    }

    @Test("Events after the file was let go: ignored when a worker reports late, an internal error otherwise")
    func afterTheEnd() throws {
        var life = try Self.lifecycle(in: .finished)
        for late in [Event.prefixChecked, .commit, .stored, .failed, .writeFailed, .room] {
            #expect(try life.handle(late) == .ignore)
        }
        for wrong in [Event.hasherFull, .endArrived, .verify, .drop(keep: true)] {
            #expect(throws: FileLifecycle.IllegalTransition.self) { try life.handle(wrong) }
        }
    }

    /// Random sequences from every phase: a file is abandoned at most once, never once its
    /// commit holds it (but for a read back found wrong), and nothing but `ignore` follows its end.
    @Test("Random event sequences: at most one abandon, none under a commit, nothing after the end")
    func randomSequences() throws {
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<20_000 {
            let start = Self.phases.randomElement(using: &generator)!
            var life = try Self.lifecycle(in: start)
            var abandons = start == .finished ? 1 : 0
            for _ in 0..<12 {
                let event = Self.events.randomElement(using: &generator)!
                let before = life.phase
                guard let effect = try? life.handle(event) else { continue }
                if case .abandon = effect {
                    abandons += 1
                    if before == .committing { #expect(event == .failed) }
                }
                if before == .finished { #expect(effect == .ignore) }
                if life.phase == .finished && before != .finished && effect != .abandon(keep: true)
                    && effect != .abandon(keep: false)
                {
                    abandons += 1  // ended without an abandon: stored, or closed by its commit
                }
            }
            #expect(abandons <= 1, "from \(start)")
        }
    }
}
