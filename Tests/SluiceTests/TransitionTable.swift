/// The transitions a lifecycle under test is expected to make: rows of (phase, event) leading
/// to a phase and an effect, each pair in one row at most. A test walks every pair and looks
/// up what it should do; a pair in no row is one the lifecycle must refuse.
struct TransitionTable<Phase, Event, Effect>: Sendable
where Phase: Equatable & Sendable, Event: Equatable & Sendable, Effect: Equatable & Sendable {
    /// What an event does in a phase: the phase after it and the effect.
    struct Transition: Equatable, Sendable {
        let next: Phase
        let effect: Effect
    }

    private var rows: [(phase: Phase, event: Event, transition: Transition)] = []

    /// `event` in `phase` moves to `next`, doing `effect`.
    mutating func add(_ phase: Phase, _ event: Event, to next: Phase, _ effect: Effect) {
        rows.append((phase, event, Transition(next: next, effect: effect)))
    }

    /// `event` in `phase` stays there, doing `effect`.
    mutating func add(_ phase: Phase, _ event: Event, stays effect: Effect) {
        add(phase, event, to: phase, effect)
    }

    /// What `event` does in `phase`, or nil when no row says; and how many rows have the pair
    /// (more than one is a mistake of the table).
    func transition(_ phase: Phase, _ event: Event) -> (transition: Transition?, rows: Int) {
        let matches = rows.filter { $0.phase == phase && $0.event == event }
        return (matches.first?.transition, matches.count)
    }
}
