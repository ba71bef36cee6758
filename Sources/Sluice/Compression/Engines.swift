import CSluiceEngines
import CZlib
import FoundationEssentials

/// The compression engines of this build and this machine: zlib always; zstd, Intel ISA-L and
/// libdeflate where their headers were found at build time (`libzstd-dev`, `libisal-dev`,
/// `libdeflate-dev`) and their libraries load at run time (`dlopen`).
///
/// `SLUICE_ENGINES=zlib` in the environment (or any comma-separated list of engine names)
/// restricts the process to the engines listed, so the zlib-only behaviour can be tested on a
/// machine that has the others.
public enum CompressionEngine: String, Sendable, CaseIterable, CustomStringConvertible {
    case zlib
    case zstd
    case isal
    case libdeflate

    public var description: String {
        switch self {
        case .zlib: return "zlib"
        case .zstd: return "zstd"
        case .isal: return "ISA-L"
        case .libdeflate: return "libdeflate"
        }
    }

    /// Whether this build was compiled with the engine's header.
    public var isCompiledIn: Bool {
        switch self {
        case .zlib: return true
        case .zstd: return sluice_zstd_compiled() != 0
        case .isal: return sluice_isal_compiled() != 0
        case .libdeflate: return sluice_libdeflate_compiled() != 0
        }
    }

    /// Whether the engine can be used now: compiled in, allowed by `SLUICE_ENGINES`, and its
    /// library loaded.
    public var isAvailable: Bool {
        switch self {
        case .zlib: return true
        case .zstd: return Self.allowed.contains(self) && sluice_zstd_load() != 0
        case .isal: return Self.allowed.contains(self) && sluice_isal_load() != 0
        case .libdeflate: return Self.allowed.contains(self) && sluice_libdeflate_load() != 0
        }
    }

    /// The library's version, when available.
    public var version: String? {
        guard isAvailable else { return nil }
        switch self {
        case .zlib: return String(cString: zlibVersion())
        case .zstd: return String(cString: sluice_zstd_version())
        case .isal: return String(cString: sluice_isal_version())
        case .libdeflate: return String(cString: sluice_libdeflate_version())
        }
    }

    /// Why the engine cannot be used, for a one-line message (nil when it can).
    public var unavailableReason: String? {
        if isAvailable { return nil }
        let package: String
        switch self {
        case .zlib: package = "zlib1g-dev"
        case .zstd: package = "libzstd-dev"
        case .isal: package = "libisal-dev"
        case .libdeflate: package = "libdeflate-dev"
        }
        if !isCompiledIn { return "this build of sluice lacks \(self) (install \(package) and rebuild)" }
        if !Self.allowed.contains(self) { return "\(self) is disabled by SLUICE_ENGINES" }
        return "the \(self) library could not be loaded (install \(package))"
    }

    /// The engines available now, zlib first.
    public static var available: [CompressionEngine] { allCases.filter(\.isAvailable) }

    private static let allowed: Set<CompressionEngine> = {
        guard let names = environmentList("SLUICE_ENGINES") else { return Set(allCases) }
        return Set(names.compactMap(CompressionEngine.init(rawValue:))).union([.zlib])
    }()
}
