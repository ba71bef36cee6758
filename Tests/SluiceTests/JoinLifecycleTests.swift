import Testing

@testable import Sluice
@testable import SluiceTransfer

/// The join of a transfer over several connections (`JoinLifecycle`), driven without sockets.
@Suite("A parallel transfer's join")
struct JoinLifecycleTests {
    typealias Phase = JoinLifecycle.Phase
    typealias Event = JoinLifecycle.Event
    typealias Effect = JoinLifecycle.Effect
    typealias Answer = JoinLifecycle.Answer

    static let answers: [Answer] = [.none, .joined, .declined]
    static let phases: [Phase] =
        [.joining, .joined, .declined] + answers.map { .cancelled($0) } + answers.map { .leadEnded($0) }
        + answers.map { .done($0) }
    static let events: [Event] = [.joined, .declined, .cancel, .leadEnded, .allEnded]

    /// The event that gives the first connection `answer`, if any.
    static func answering(_ answer: Answer) -> [Event] {
        switch answer {
        case .none: return []
        case .joined: return [.joined]
        case .declined: return [.declined]
        }
    }

    /// A lifecycle in `phase`, reached by the events a sender sends.
    static func lifecycle(in phase: Phase) throws -> JoinLifecycle {
        let path: [Event]
        switch phase {
        case .joining: path = []
        case .joined: path = [.joined]
        case .declined: path = [.declined]
        case .cancelled(let answer): path = [.cancel] + answering(answer)
        case .leadEnded(let answer): path = answering(answer) + [.leadEnded]
        case .done(let answer): path = answering(answer) + [.leadEnded, .allEnded]
        }
        var life = JoinLifecycle()
        for event in path { _ = try life.handle(event) }
        #expect(life.phase == phase)
        return life
    }

    /// Every pair a phase takes, and what it does; every pair not here is an internal error.
    static let table: TransitionTable<Phase, Event, Effect> = {
        var table = TransitionTable<Phase, Event, Effect>()
        table.add(.joining, .joined, to: .joined, .startOthers)
        table.add(.joining, .declined, to: .declined, .fallBack)
        table.add(.joining, .cancel, to: .cancelled(.none), .nothing)
        table.add(.joined, .cancel, to: .cancelled(.joined), .nothing)
        table.add(.declined, .cancel, to: .cancelled(.declined), .nothing)
        table.add(.cancelled(.none), .joined, to: .cancelled(.joined), .reportJoined)
        table.add(.cancelled(.none), .declined, to: .cancelled(.declined), .fallBack)
        table.add(.joining, .leadEnded, to: .leadEnded(.none), .stopOthers)
        table.add(.joined, .leadEnded, to: .leadEnded(.joined), .stopOthers)
        table.add(.declined, .leadEnded, to: .leadEnded(.declined), .stopOthers)
        for answer in answers {
            table.add(.cancelled(answer), .cancel, stays: .nothing)
            table.add(.cancelled(answer), .leadEnded, to: .leadEnded(answer), .stopOthers)
            table.add(.leadEnded(answer), .cancel, stays: .nothing)
            table.add(.leadEnded(answer), .allEnded, to: .done(answer), .finish)
            table.add(.done(answer), .cancel, stays: .nothing)
            table.add(.done(answer), .allEnded, stays: .nothing)
        }
        return table
    }()

    @Test("Every event in every phase does what the table says; a pair not in it is an internal error")
    func everyPairAsTabled() throws {
        for phase in Self.phases {
            for event in Self.events {
                var life = try Self.lifecycle(in: phase)
                let (expected, rows) = Self.table.transition(phase, event)
                #expect(rows <= 1, "\(phase), \(event) is in the table \(rows) times")
                if let expected {
                    #expect(try life.handle(event) == expected.effect, "\(phase), \(event)")
                    #expect(life.phase == expected.next, "\(phase), \(event)")
                } else {
                    do {
                        _ = try life.handle(event)
                        Issue.record("\(phase), \(event) was taken")
                    } catch {
                        #expect(error.phase == phase && error.event == event)
                        #expect(error.description.hasPrefix("internal error: a transfer over several connections"))
                    }
                    #expect(life.phase == phase, "an illegal event leaves the phase as it was")
                }
            }
        }
    }

    @Test("What each phase allows: the walk only while the first connection runs uncancelled")
    func queries() throws {
        for phase in Self.phases {
            let life = try Self.lifecycle(in: phase)
            let running = phase == .joining || phase == .joined || phase == .declined
            #expect(life.walks == running, "\(phase)")
            #expect(life.declined == (life.answer == .declined), "\(phase)")
        }
        #expect(try Self.lifecycle(in: .done(.declined)).declined, "one connection used, to the end")
        #expect(try !Self.lifecycle(in: .done(.joined)).declined)
    }

    /// Seeded random sequences from the start: the others start at most once and never after a
    /// cancel or the first connection's end; the receiver's answer never changes once given;
    /// the transfer finishes once, after the first connection ended; the walk never resumes.
    @Test("Random event sequences: the others start once, the answer holds, the end comes once")
    func randomSequences() {
        var generator = SeededRandom(state: 0x4A01_4E49)
        for _ in 0..<20_000 {
            var life = JoinLifecycle()
            var starts = 0
            var finishes = 0
            var leadEnded = false
            var cancelled = false
            var answer = Answer.none
            for _ in 0..<10 {
                let event = Self.events.randomElement(using: &generator) ?? .cancel
                let before = life.phase
                guard let effect = try? life.handle(event) else {
                    #expect(life.phase == before)
                    continue
                }
                switch effect {
                case .startOthers:
                    starts += 1
                    #expect(!cancelled && !leadEnded)
                case .reportJoined:
                    #expect(cancelled && !leadEnded)
                case .fallBack:
                    #expect(answer == .none && !leadEnded)
                case .stopOthers:
                    #expect(!leadEnded)
                    leadEnded = true
                case .finish:
                    finishes += 1
                    #expect(leadEnded)
                case .nothing:
                    break
                }
                if answer != .none { #expect(life.answer == answer, "the receiver's answer changed") }
                answer = life.answer
                cancelled = cancelled || event == .cancel
                if cancelled || leadEnded { #expect(!life.walks) }
            }
            #expect(starts <= 1 && finishes <= 1)
        }
    }
}
