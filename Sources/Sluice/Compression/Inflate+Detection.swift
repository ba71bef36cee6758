extension Inflate {
    /// With ISA-L, at the start of a gzip member or zlib stream: the header bit ISA-L does not
    /// check as zlib does (`headerCheck`).
    struct HeaderCheck {
        /// The byte of the header to check, and the bits that must be clear in it.
        let index: Int
        let mask: UInt8
        let reason: String
        var seen = 0

        /// The reserved bits of a gzip member's FLG, which RFC 1952 requires a decoder to
        /// reject (zlib and `gzip -d` do; ISA-L ignores them).
        static let gzip = HeaderCheck(index: 3, mask: 0xe0, reason: "unknown header flags set")
        /// A zlib header's FDICT bit: a preset dictionary, which zlib refuses; ISA-L reports it
        /// only when the header arrives in one piece.
        static let zlib = HeaderCheck(index: 1, mask: 0x20, reason: "zlib stream needs a preset dictionary")
    }

    /// Whether `byte` may begin a gzip or zlib header, so a second byte is needed to decide.
    static func mayStartHeader(_ byte: UInt8) -> Bool {
        byte == 0x1f || (byte & 0x0f == 8 && byte >> 4 <= 7)
    }

    /// The format starting with `first`, `second`.
    static func detect(_ first: UInt8, _ second: UInt8) -> CompressionFormat {
        if first == 0x1f && second == 0x8b { return .gzip }
        if first & 0x0f == 8 && first >> 4 <= 7 && (UInt16(first) << 8 | UInt16(second)) % 31 == 0 {
            return .zlib
        }
        return .deflate
    }

    // MARK: - Errors

    var subject: String { detectedFormat?.rawValue ?? format.rawValue }

    func checkLimits() throws(SluiceError) {
        try limit.check(totalIn: totalIn, totalOut: totalOut, operation: "inflate", subject: subject)
    }

    /// The error names the compressed offset reached, as `zstd` and `gzip -t` locate damage.
    func corrupt(_ detail: String) -> SluiceError {
        SluiceError(
            .corruptData, operation: "inflate", subject: subject,
            detail: (detail.contains("offset") ? detail : "\(detail) (near compressed offset \(totalIn))") + guessed)
    }

    func truncated(_ detail: String) -> SluiceError {
        SluiceError(
            .truncatedData, operation: "inflate", subject: subject,
            detail: "\(detail) (at compressed offset \(totalIn))" + guessed)
    }

    /// Raw deflate has no header: detection takes whatever is not gzip, zlib (or zstd, which
    /// `Decompressor` finds first) for it. When that fails, the likelier story is input that is
    /// not compressed at all, and the message says so rather than leave "deflate" unexplained.
    private var guessed: String {
        format == .auto && detectedFormat == .deflate
            ? "; the input has no gzip, zlib or zstd header, so it was read as raw deflate" : ""
    }

    func trailingGarbage() -> SluiceError {
        switch detectedFormat {
        case .gzip?: return corrupt("trailing garbage after gzip member")
        case .zlib?: return corrupt("trailing garbage after zlib stream")
        case .deflate?, nil: return corrupt("trailing garbage after deflate stream")
        }
    }
}
