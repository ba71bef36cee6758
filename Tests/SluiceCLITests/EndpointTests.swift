import TestThreads
import Testing

@testable import SluiceCLI

@Suite(.ownThreads) struct EndpointTests {
    func usageMessage(_ text: String) -> String? {
        do {
            _ = try Endpoint(parsing: text)
            return nil
        } catch {
            return error.message
        }
    }

    @Test func filesAndStandardIO() throws {
        #expect(try Endpoint(parsing: "big.iso") == .file("big.iso"))
        #expect(try Endpoint(parsing: "/tmp/x") == .file("/tmp/x"))
        #expect(try Endpoint(parsing: "file:a:b") == .file("a:b"))
        #expect(try Endpoint(parsing: "file:tcp:x") == .file("tcp:x"))
        #expect(try Endpoint(parsing: "./a:b") == .file("./a:b"))
        #expect(try Endpoint(parsing: "/x/tcp:1") == .file("/x/tcp:1"))
        #expect(try Endpoint(parsing: "a.b:c") == .file("a.b:c"))
        #expect(try Endpoint(parsing: "-") == .standardIO)
        #expect(try Endpoint(parsing: "file:-") == .file("-"))
    }

    @Test func tcp() throws {
        #expect(try Endpoint(parsing: "tcp:example.org:9000") == .tcpConnect(host: "example.org", port: 9000))
        #expect(try Endpoint(parsing: "tcp:127.0.0.1:1") == .tcpConnect(host: "127.0.0.1", port: 1))
        #expect(try Endpoint(parsing: "tcp:[::1]:65535") == .tcpConnect(host: "::1", port: 65535))
        #expect(try Endpoint(parsing: "tcp-listen:9000") == .tcpListen(host: nil, port: 9000))
        #expect(try Endpoint(parsing: "tcp-listen:0.0.0.0:9000") == .tcpListen(host: "0.0.0.0", port: 9000))
        #expect(try Endpoint(parsing: "tcp-listen:[::]:9000") == .tcpListen(host: "::", port: 9000))
    }

    @Test func unix() throws {
        #expect(try Endpoint(parsing: "unix:/run/s.sock") == .unixConnect("/run/s.sock"))
        #expect(try Endpoint(parsing: "unix-listen:s.sock") == .unixListen("s.sock"))
        let long = String(repeating: "x", count: 108)
        #expect(usageMessage("unix:" + long)?.contains("at most 107") == true)
        #expect(usageMessage("unix:") == "unix:: missing socket path after 'unix:'")
    }

    @Test func badAddressesAreUsageErrors() {
        #expect(usageMessage("tcp:host:0")?.contains("port '0' is not a number from 1 to 65535") == true)
        #expect(usageMessage("tcp:host:65536")?.contains("from 1 to 65535") == true)
        #expect(usageMessage("tcp:host:http")?.contains("port 'http'") == true)
        #expect(usageMessage("tcp:host:+80")?.contains("port '+80'") == true)
        #expect(usageMessage("tcp:host:") == "tcp:host:: missing port")
        #expect(usageMessage("tcp::9000") == "tcp::9000: empty host")
        #expect(usageMessage("tcp:host") == "tcp:host: missing port (HOST:PORT)")
        #expect(usageMessage("tcp:::1:9000")?.contains("in brackets") == true)
        #expect(usageMessage("tcp:[::1]9000")?.contains("missing ':PORT'") == true)
        #expect(usageMessage("tcp:[::1:9000")?.contains("missing ']'") == true)
        #expect(usageMessage("tcp:[]:9000") == "tcp:[]:9000: empty host")
        #expect(usageMessage("tcp:[host]:9000")?.contains("brackets are for IPv6") == true)
        #expect(usageMessage("tcp-listen:") == "tcp-listen:: missing port")
        #expect(usageMessage("tcp-listen:70000")?.contains("from 1 to 65535") == true)
        #expect(usageMessage("file:") == "file:: missing path after 'file:'")
        #expect(usageMessage("") != nil)
    }

    @Test func unknownTypesAreNotSilentlyFiles() {
        let message = usageMessage("tpc:host:9000")
        #expect(message?.contains("unknown endpoint type 'tpc:'") == true)
        #expect(message?.contains("file:tpc:host:9000") == true)
    }

    @Test func descriptionsRoundTrip() throws {
        for text in [
            "big.iso", "-", "tcp:host:9000", "tcp:[::1]:9000", "tcp-listen:9000", "tcp-listen:[::]:1",
            "tcp-listen:h:2", "unix:/s", "unix-listen:/s",
        ] {
            let endpoint = try Endpoint(parsing: text)
            #expect(endpoint.description == text)
            #expect(try Endpoint(parsing: endpoint.description) == endpoint)
        }
        #expect(Endpoint.standardIO.displayName(as: .source) == "stdin")
        #expect(Endpoint.standardIO.displayName(as: .destination) == "stdout")
    }
}
