import Foundation
import Sluice

#if canImport(Glibc)
    import Glibc
#endif

/// `sluice bench`: measures throughput through the real pipeline — a local matrix of paths
/// and chunk sizes, or a client and server over the network, like iperf3.
enum BenchCommand: Command {
    static let name = "bench"
    static let summary = "measure throughput: a local matrix, or client/server"
    static var parser: ArgumentParser { BenchOptions.parser }

    static var help: String {
        """
        Usage: sluice bench [options]                      the local matrix
               sluice bench --listen [HOST:]PORT [--once]  a network server
               sluice bench [options] tcp:HOST:PORT        a network client

        Without an operand, measure each path (memory → memory, file → file and,
        for reference, a bare read/write loop; memory → TCP loopback → discard,
        TCP with gzip -1 and gunzip, gzip -d) at each chunk size through the real
        pipeline, and print MB/s (10^6 bytes a second), the best chunk size of
        each path, and the peak memory. With
        --listen, serve bench clients; with tcp:HOST:PORT, send to such a server
        (or receive from it with --reverse) for --seconds, reporting every
        --interval. Both sides report the same byte count.

        The source/sink columns say which side the pipeline waited on: "source"
        is time the sink sat with nothing to write, "sink" is time the source sat
        with a full queue.

        Options:
        \(BenchOptions.parser.helpLines().joined(separator: "\n"))

        \(SluiceCommand.exitStatusHelp)

        """
    }

    static func run(_ parsed: ParsedArguments) -> ExitStatus {
        let options: BenchOptions
        do {
            options = try BenchOptions(parsed)
        } catch {
            Terminal.report(error.message)
            return .usage
        }
        do {
            switch options.mode {
            case .matrix: try runMatrix(options)
            case .server(let host, let port): try runServer(options, host: host, port: port)
            case .client(let host, let port): try runClient(options, host: host, port: port)
            }
            return .ok
        } catch let error as CLIError {
            Terminal.report(error.message)
            return error.status
        } catch let error as SluiceError {
            let cli = CLIError(error, during: .openingSource)
            Terminal.report(cli.message)
            return cli.status
        } catch {
            Terminal.report("bench: \(error)")
            return .ioError
        }
    }

    // MARK: The local matrix

    private static func runMatrix(_ options: BenchOptions) throws {
        let showProgress = CopySession.showsProgress(options.progress, stderrIsTerminal: Terminal.isTerminal(2))
        let total = BenchPath.allCases.count * options.chunkSizes.count
        var done = 0
        var bench = LocalBench(chunkSizes: options.chunkSizes, size: options.size)
        if let threads = options.threads { bench.threads = threads }
        if showProgress {
            bench.progress = { cell in
                done += 1
                Terminal.write("\r\u{1B}[K[\(done)/\(total)] \(cell)", to: 2)
            }
        }
        let cells: [BenchCell]
        do {
            cells = try bench.run()
        } catch {
            if showProgress { Terminal.write("\r\u{1B}[K", to: 2) }
            throw CLIError(.ioError, "bench: \(error)")
        }
        if showProgress { Terminal.write("\r\u{1B}[K", to: 2) }
        let rss = peakResidentBytes()
        if options.json {
            Terminal.write(matrixJSON(cells, options: options, peakRSS: rss) + "\n", to: 1)
        } else {
            Terminal.write(matrixTable(cells, options: options, peakRSS: rss), to: 1)
        }
    }

    static func matrixTable(_ cells: [BenchCell], options: BenchOptions, peakRSS: Int) -> String {
        let width = 24
        func pad(_ text: String, _ n: Int, left: Bool = false) -> String {
            let count = text.count
            guard count < n else { return text }
            let spaces = String(repeating: " ", count: n - count)
            return left ? text + spaces : spaces + text
        }
        var out = "sluice bench: \(Format.bytes(UInt64(options.size))) per cell through the pipeline, "
        out += "\(machineDescription())\n\n"
        out += pad("MB/s", width, left: true)
        for chunk in options.chunkSizes { out += pad(chunk.description, 9) }
        out += pad("best", 7) + "   waits at best (source/sink)\n"
        let threads = options.threads ?? WorkerPool.shared.threadCount
        for path in BenchPath.allCases {
            let row = cells.filter { $0.path == path }
            guard let best = row.max(by: { $0.bytesPerSecond < $1.bytesPerSecond }) else { continue }
            out += pad(path.title(threads: threads), width, left: true)
            for cell in row { out += pad(Format.fixed(cell.bytesPerSecond / 1e6, 0), 9) }
            out += pad(best.chunkSize.description, 7)
            let waited = best.seconds > 0 ? 100 / best.seconds : 0
            out +=
                "   \(Format.fixed(best.sourceBoundSeconds * waited, 0))% / \(Format.fixed(best.sinkBoundSeconds * waited, 0))%\n"
        }
        out += "\npeak RSS \(Format.bytes(UInt64(peakRSS))): bounded by chunk size and queue depth, not by --size\n"
        return out
    }

    static func matrixJSON(_ cells: [BenchCell], options: BenchOptions, peakRSS: Int) -> String {
        let results = cells.map { cell in
            "{\"path\": \(Format.jsonString(cell.path.rawValue)), \"chunk_size\": \(cell.chunkSize.bytes), "
                + "\"bytes\": \(cell.bytes), \"seconds\": \(Format.jsonNumber(cell.seconds)), "
                + "\"bytes_per_second\": \(Format.jsonNumber(cell.bytesPerSecond)), "
                + "\"source_bound_seconds\": \(Format.jsonNumber(cell.sourceBoundSeconds)), "
                + "\"sink_bound_seconds\": \(Format.jsonNumber(cell.sinkBoundSeconds))}"
        }
        let best = BenchPath.allCases.compactMap { path -> String? in
            guard let top = cells.filter({ $0.path == path }).max(by: { $0.bytesPerSecond < $1.bytesPerSecond })
            else { return nil }
            return "\(Format.jsonString(path.rawValue)): \(top.chunkSize.bytes)"
        }
        let threads = options.threads ?? WorkerPool.shared.threadCount
        let engine = ParallelDeflate.defaultEngine(level: 1).rawValue
        return "{\"size\": \(options.size), \"threads\": \(threads), \"gzip_engine\": \"\(engine)\", \"results\": ["
            + results.joined(separator: ", ") + "], \"best\": {"
            + best.joined(separator: ", ") + "}, \"peak_rss_bytes\": \(peakRSS), \"machine\": "
            + Format.jsonString(machineDescription()) + "}"
    }

    // MARK: Network

    private static func runServer(_ options: BenchOptions, host: String?, port: UInt16) throws {
        let context = try options.tls?.makeContext(role: .server, host: nil, operand: "--tls")
        let listener = try Socket.listen(host: host, port: port)
        if !options.quiet { Terminal.report("bench server listening on \(listener.address)") }
        if let pin = context?.localPin { Terminal.write("pin \(pin)\n", to: 2) }
        let server = NetworkBenchServer(
            listener: listener, chunkSize: options.chunkSizes.count == 1 ? options.chunkSizes[0] : .default,
            once: options.once, tls: context,
            onSession: { report, peer in
                if options.json {
                    Terminal.write(
                        "{\"peer\": \(Format.jsonString(peer.description)), \"bytes\": \(report.bytes), "
                            + "\"seconds\": \(Format.jsonNumber(report.seconds)), "
                            + "\"bytes_per_second\": \(Format.jsonNumber(report.bytesPerSecond))}\n", to: 1)
                } else {
                    Terminal.write(
                        "\(peer): \(report.bytes) bytes in \(Format.seconds(report.seconds)) s, "
                            + "\(Format.fixed(report.bytesPerSecond / 1e6, 1)) MB/s "
                            + "(\(Format.fixed(report.bytesPerSecond * 8 / 1e9, 2)) Gbit/s)\n", to: 1)
                }
            },
            onError: { Terminal.report("bench: \($0)") })
        try server.run()
    }

    private static func runClient(_ options: BenchOptions, host: String, port: UInt16) throws {
        let chunk = options.chunkSizes.count == 1 ? options.chunkSizes[0] : .default
        if !options.json && !options.jsonStream && !options.quiet {
            let what = options.reverse ? "receiving from" : "sending to"
            Terminal.write(
                "sluice bench: \(what) \(host):\(port) for \(Format.seconds(options.seconds)) s, chunk \(chunk)"
                    + (options.compress ? ", gzip -1" : "") + "\n", to: 1)
        }
        let client = NetworkBenchClient(
            host: host, port: port, seconds: options.seconds, chunkSize: chunk, compress: options.compress,
            reverse: options.reverse, interval: options.interval,
            timeout: options.timeoutSeconds.map { .milliseconds(Int64($0 * 1000)) },
            tls: try options.tls?.makeContext(role: .client, host: host, operand: "tls:\(host):\(port)"),
            onInterval: { slice in
                if options.jsonStream {
                    Terminal.write("{\"type\": \"interval\", " + intervalJSON(slice) + "}\n", to: 1)
                } else if !options.json && !options.quiet {
                    Terminal.write(
                        "[\(Format.fixed(slice.start, 1))-\(Format.fixed(slice.end, 1)) s] "
                            + "\(Format.bytes(slice.bytes))  \(Format.fixed(slice.bytesPerSecond / 1e6, 1)) MB/s  "
                            + "\(Format.fixed(slice.bytesPerSecond * 8 / 1e9, 2)) Gbit/s\n", to: 1)
                }
            })
        let report: NetworkReport
        do {
            report = try client.run()
        } catch let error as BenchFailure {
            let status: ExitStatus = error.error?.code == .authenticationFailed ? .notPermitted : .unavailable
            throw CLIError(status, "bench: \(error.description)")
        }
        let summary =
            "\"bytes\": \(report.bytes), \"seconds\": \(Format.jsonNumber(report.seconds)), "
            + "\"bytes_per_second\": \(Format.jsonNumber(report.bytesPerSecond)), "
            + "\"server_bytes\": \(report.peerBytes.map(String.init) ?? "null"), "
            + "\"reverse\": \(options.reverse), \"compress\": \(options.compress), \"chunk_size\": \(chunk.bytes), "
            + "\"source_bound_seconds\": \(Format.jsonNumber(report.sourceBoundSeconds)), "
            + "\"sink_bound_seconds\": \(Format.jsonNumber(report.sinkBoundSeconds)), "
            + "\"tls_protocol\": \(report.tls.map { Format.jsonString($0.protocol) } ?? "null"), "
            + "\"tls_cipher\": \(report.tls.map { Format.jsonString($0.cipher) } ?? "null")"
        if options.json {
            let intervals = report.intervals.map { "{" + intervalJSON($0) + "}" }.joined(separator: ", ")
            Terminal.write("{" + summary + ", \"intervals\": [" + intervals + "]}\n", to: 1)
        } else if options.jsonStream {
            Terminal.write("{\"type\": \"summary\", " + summary + "}\n", to: 1)
        } else if !options.quiet {
            var text = "\(options.reverse ? "received" : "sent") \(report.bytes) bytes in "
            text += "\(Format.seconds(report.seconds)) s: \(Format.fixed(report.bytesPerSecond / 1e6, 1)) MB/s "
            text += "(\(Format.fixed(report.bytesPerSecond * 8 / 1e9, 2)) Gbit/s)\n"
            if let peer = report.peerBytes { text += "server received \(peer) bytes\n" }
            Terminal.write(text, to: 1)
        }
    }

    private static func intervalJSON(_ slice: NetworkReport.Interval) -> String {
        "\"start\": \(Format.jsonNumber(slice.start)), \"end\": \(Format.jsonNumber(slice.end)), "
            + "\"bytes\": \(slice.bytes), \"bytes_per_second\": \(Format.jsonNumber(slice.bytesPerSecond))"
    }

    // MARK: The machine

    /// Peak resident memory of this process, in bytes (`getrusage`).
    static func peakResidentBytes() -> Int {
        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        return usage.ru_maxrss * 1024
    }

    /// `2 cores, AMD EPYC`: what the figures were measured on.
    static func machineDescription() -> String {
        let cpu =
            (try? String(contentsOfFile: "/proc/cpuinfo", encoding: .utf8))?
            .split(separator: "\n").first { $0.hasPrefix("model name") }
            .flatMap { $0.split(separator: ":", maxSplits: 1).last }
            .map { $0.trimmingCharacters(in: .whitespaces) } ?? "unknown CPU"
        return "\(ProcessInfo.processInfo.activeProcessorCount) cores, \(cpu)"
    }
}
