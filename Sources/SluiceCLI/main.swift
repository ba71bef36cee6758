#if canImport(Glibc)
    import Glibc
#endif

// Parse → validate → run; every failure is one line on stderr and a sysexits status.
SignalWatcher.shared.install()
exit(SluiceCommand.main(Array(CommandLine.arguments.dropFirst())).rawValue)
