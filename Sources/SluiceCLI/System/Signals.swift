import Dispatch
import FoundationEssentials
import Sluice
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// Turns SIGINT, SIGTERM and SIGHUP (the terminal or ssh session gone) into calls of a handler
/// on an ordinary thread, with no signal handler at all: `install()` blocks the signals before
/// any other thread starts (threads inherit the mask, so none of them takes the signal), and a
/// thread of its own waits for them with `sigwait(2)`. The handler hands the work to the event loop
/// (`loop.execute { pipeline.cancel() }`), so cancelling happens on the loop's thread.
///
/// With no handler set, a signal ends the process at once with status 128 + signal: before a
/// copy starts and after it ends there is nothing to clean up.
final class SignalWatcher: Sendable {
    static let shared = SignalWatcher()

    private let handler = Mutex<(@Sendable (Int32) -> Void)?>(nil)
    private let installed = Atomic<Bool>(false)

    private init() {}

    private static var watchedSet: sigset_t {
        var set = sigset_t()
        sigemptyset(&set)
        sigaddset(&set, SIGINT)
        sigaddset(&set, SIGTERM)
        sigaddset(&set, SIGHUP)
        return set
    }

    /// Blocks SIGINT, SIGTERM and SIGHUP and starts the waiting thread. Call first thing in `main`.
    /// Also ignores SIGPIPE for the whole command: the library never does that for its users,
    /// and stdout piped into `head` must end in an EPIPE error, not a signal.
    func install() {
        guard !installed.exchange(true, ordering: .acquiringAndReleasing) else { return }
        signal(SIGPIPE, SIG_IGN)
        var set = Self.watchedSet
        pthread_sigmask(SIG_BLOCK, &set, nil)
        // A thread of its own, blocked in sigwait(2) for the life of the process.
        DispatchQueue(label: "sluice-signals").async { [self] in
            var set = Self.watchedSet
            while true {
                var signal: Int32 = 0
                guard sigwait(&set, &signal) == 0 else { continue }
                if let handler = self.handler.withLock({ $0 }) {
                    handler(signal)
                } else {
                    _exit(128 + signal)
                }
            }
        }
    }

    /// Sets (or, with nil, clears) what a signal does.
    func setHandler(_ body: (@Sendable (Int32) -> Void)?) {
        handler.withLock { $0 = body }
    }
}

/// Something that stops cleanly on SIGINT, SIGTERM or SIGHUP, on its loop's thread.
protocol Interruptible: AnyObject {
    func interrupt(_ signal: Int32)
}

extension SignalWatcher {
    /// Hands SIGINT, SIGTERM and SIGHUP to `target.interrupt` on `loop`'s thread.
    func route(to target: any Interruptible, on loop: EventLoop) {
        let box = UncheckedSendable(target)
        setHandler { signal in
            loop.execute { box.value.interrupt(signal) }
        }
    }
}

/// The event loop a command runs on; nil (after reporting why) if the kernel refused one.
func makeCommandLoop() -> EventLoop? {
    do {
        return try EventLoop()
    } catch {
        Terminal.report("event loop: \(error)")
        return nil
    }
}
