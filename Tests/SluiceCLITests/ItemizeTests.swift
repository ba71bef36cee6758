import Testing

@testable import Sluice
@testable import SluiceCLI
@testable import SluiceTransfer

/// `send -i`: rsync's itemized letters, with what `--sync` sets without data.
@Suite struct ItemizeTests {
    static func result(_ path: String, _ change: TransferChange?, directory: Bool = false) -> TransferFileResult {
        var result = TransferFileResult(path: path, isDirectory: directory, size: 1, outcome: .stored)
        result.change = change
        return result
    }

    @Test func attributesSetWithoutDataShowXOAndG() {
        #expect(TransferText.itemized(Self.result("a", .unchanged(.xattrs))) == ".f........x a")
        #expect(TransferText.itemized(Self.result("b", .unchanged([.owner, .group]))) == ".f....og... b")
        #expect(TransferText.itemized(Self.result("c", .unchanged([.mode, .group]))) == ".f...p.g... c")
        #expect(TransferText.itemized(Self.result("d", .unchanged(.xattrs), directory: true)) == ".d........x d/")
        #expect(
            TransferText.itemized(Self.result("e", .replaced([.size, .mtime, .xattrs, .owner]))) == ">f.st.o...x e")
        // Left as it was (or only its mtime, by --checksum): nothing.
        #expect(TransferText.itemized(Self.result("f", .unchanged([]))) == nil)
        #expect(TransferText.itemized(Self.result("g", .unchanged(.mtime))) == nil)
        #expect(TransferText.itemized(Self.result("h", .unchanged(.mode))) == ".f...p..... h")
    }

    @Test func statsCountWhatWasSetWithoutData() throws {
        let results = [
            Self.result("a", .unchanged(.xattrs)), Self.result("b", .unchanged([])),
            Self.result("c", .unchanged([.owner, .group])), Self.result("d", .replaced(.size)),
        ]
        let summary = TransferSummary(
            files: 4, directories: 0, bytes: 1, bytesSent: 100, resumedBytes: 0, seconds: 1, results: results)
        let options = try SendOptions(try SendOptions.parser.parse(["--sync", "a", "1"]))
        let report = SendStatsReport(summary: summary, destination: "1", options: options)
        #expect(report.json.contains("\"unchanged\":3,\"updated\":2,\"replaced\":1"), "\(report.json)")
        #expect(report.text.contains("3 unchanged (not sent; 2 given new attributes), 1 replaced"), "\(report.text)")
    }
}
