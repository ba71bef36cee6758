import Sluice

/// The pre-shared keys of the tls target: the receiver's, which its seeds' ClientHellos were
/// made with, and another that fails.
public enum FuzzKeys {
    public static let receiver = PreSharedKey(key: (0..<32).map { UInt8($0) &* 7 &+ 1 })!
    public static let wrong = PreSharedKey(key: (0..<32).map { UInt8($0) &* 7 &+ 2 })!
}
