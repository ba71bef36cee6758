/// A flag of the backpressure rule that keeps time: the pending-write flag (a writer offered
/// space with nothing to write keeps the offer, and writes at once when data arrives) and its
/// mirror, the full-queue flag (a reader offered bytes with no room keeps the offer, and reads
/// when room comes). The time a flag spends set is the time one side waited for the other:
/// how `copy`, `send` and `receive` tell which side is slow.
///
/// The pipeline and the transfer connection both keep their offers in this one type.
package struct BackpressureFlag {
    /// An offer is being kept.
    package private(set) var isSet = false
    private var since: UInt64 = 0
    /// Nanoseconds spent set, up to the last `take`.
    private(set) var totalNanoseconds: UInt64 = 0

    /// A clear flag.
    package init() {}

    /// Keeps an offer (the clock is read only when the flag was clear).
    package mutating func set() {
        guard !isSet else { return }
        isSet = true
        since = monotonicNanoseconds()
    }

    /// Uses the offer kept, if any: true when there was one (act on it now).
    @discardableResult
    package mutating func take() -> Bool {
        guard isSet else { return false }
        isSet = false
        totalNanoseconds += monotonicNanoseconds() - since
        return true
    }

    /// Nanoseconds spent set so far, the current spell included.
    var elapsedNanoseconds: UInt64 {
        totalNanoseconds + (isSet ? monotonicNanoseconds() - since : 0)
    }
}
