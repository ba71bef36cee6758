import Foundation
import Testing

@testable import Sluice
@testable import SluiceTransfer

#if canImport(Glibc)
    import Glibc
#endif

/// `SourceOptions`, the one declaration of the sender's six source options: what the walk
/// reads for each, and `TransferSendOptions`' forwarding properties.
@Suite struct SourceOptionsTests {
    /// Each forwarding property sets and clears its own member of `sourceOptions` and no other.
    @Test func forwardingPropertiesSetTheirOwnMember() {
        let members: [(WritableKeyPath<TransferSendOptions, Bool>, SourceOptions)] = [
            (\.hardLinks, .hardLinks), (\.xattrs, .xattrs), (\.owners, .owners), (\.numericIDs, .numericIDs),
            (\.devices, .devices), (\.specials, .specials),
        ]
        let all: SourceOptions = [.hardLinks, .xattrs, .owners, .numericIDs, .devices, .specials]
        for (property, member) in members {
            var options = TransferSendOptions()
            #expect(options.sourceOptions.isEmpty)
            options[keyPath: property] = true
            #expect(options.sourceOptions == member)
            #expect(options[keyPath: property])
            options.sourceOptions = all
            options[keyPath: property] = false
            #expect(options.sourceOptions == all.subtracting(member))
            #expect(!options[keyPath: property])
        }
    }

    /// A FIFO and a socket are listed with `.specials` only, never with `.devices` alone;
    /// owners are read with `.owners` only, by number with `.numericIDs`.
    @Test func theWalkReadsWhatTheOptionsName() throws {
        try withTemporaryDirectory { root in
            let src = root + "/src"
            try FileManager.default.createDirectory(atPath: src, withIntermediateDirectories: true)
            try writeFile(src + "/plain", Array("plain\n".utf8), mtime: (1_600_000_000, 0))
            #expect(mkfifo(src + "/pipe", 0o600) == 0)
            func list(_ options: SourceOptions) throws -> (entries: [OutgoingEntry], warnings: [String]) {
                var warnings: [String] = []
                let entries = try SourceTree.entries([.path(src)], options: options) { warnings.append($0) }
                return (entries, warnings)
            }
            func specials(_ options: SourceOptions) throws -> [String] {
                try list(options).entries.filter(\.isSpecial).map(\.relative)
            }
            #expect(try specials([]) == [])
            #expect(try list([]).warnings.count == 1)
            #expect(try specials(.devices) == [])
            #expect(try specials(.specials) == ["src/pipe"])
            #expect(try specials([.devices, .specials]) == ["src/pipe"])
            let plain = { (options: SourceOptions) throws in
                try list(options).entries.first { $0.relative == "src/plain" }?.attributes.owner
            }
            #expect(try plain([]) == nil)
            #expect(try plain(.numericIDs) == nil)
            let byName = try #require(try plain(.owners))
            #expect(byName.uid == getuid())
            let byNumber = try #require(try plain([.owners, .numericIDs]))
            #expect(byNumber.user.isEmpty && byNumber.group.isEmpty)
            #expect(byNumber.uid == getuid() && byNumber.gid == getgid())
        }
    }
}
