import FoundationEssentials
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
        each path with its CPU seconds per GiB, and the peak memory. A last row
        sends 2,000 files of 1-16 KiB (a tree made the same every run) with
        send → receive over loopback, in process and without fsync, and prints
        files per second and MB/s: what a transfer pays per file. With
        --listen, serve bench clients; with tcp:HOST:PORT, send to such a server
        (or receive from it with --reverse) for --seconds, reporting every
        --interval. Both sides report the same byte count. With -P N the client
        runs N connections at once and reports each and their sum ([SUM]), as
        iperf3 -P does; the server reports each connection and the sum.

        The source/sink columns say which side the pipeline waited on: "source"
        is time the sink sat with nothing to write, "sink" is time the source sat
        with a full queue. CPU s/GiB is the process's CPU time (user + system,
        every thread) per GiB moved.

        --svg FILE draws the matrix (MB/s against chunk size, one line per path)
        or a client's run (MB/s in each interval, one line per stream and the
        sum) as a plain SVG picture that a browser opens.

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
        let picture = try options.svg.map { path throws(CLIError) in
            try BenchPictureFile(path: path, force: options.force)
        }
        let showProgress = CopySession.showsProgress(options.progress, stderrIsTerminal: Terminal.isTerminal(2))
        let total = BenchPath.available.count * options.chunkSizes.count + 1
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
        let files: FilesBenchResult
        do {
            cells = try bench.run()
            files = try runFiles(progress: bench.progress)
        } catch {
            if showProgress { Terminal.write("\r\u{1B}[K", to: 2) }
            picture?.discard()
            throw CLIError(.ioError, "bench: \(error)")
        }
        if showProgress { Terminal.write("\r\u{1B}[K", to: 2) }
        let rss = peakResidentBytes()
        if options.json {
            Terminal.write(matrixJSON(cells, files: files, options: options, peakRSS: rss) + "\n", to: 1)
        } else {
            Terminal.write(matrixTable(cells, files: files, options: options, peakRSS: rss), to: 1)
        }
        if let picture {
            let threads = options.threads ?? WorkerPool.shared.threadCount
            var chart = BenchChart.matrix(
                cells, title: "sluice bench: the local matrix, \(Format.bytes(UInt64(options.size))) per cell",
                subtitle: pictureSubtitle(), rowTitle: { $0.title(threads: threads) })
            chart.note =
                "many files (\(files.files) of \(FilesBench().sizes), send → receive on loopback, no fsync): "
                + "\(Format.fixed(files.filesPerSecond, 0)) files/s, \(Format.fixed(files.bytesPerSecond / 1e6, 1)) MB/s"
            try picture.write(chart.render())
        }
    }

    /// The many-files row, in a directory of its own removed afterwards.
    private static func runFiles(progress: ((String) -> Void)?) throws -> FilesBenchResult {
        let bench = FilesBench()
        progress?(bench.title)
        let dir = temporaryDirectory() + "sluice-bench-files-\(getpid())"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        return try bench.run(in: dir)
    }

    /// The table's two lines: `many files: 2000 of 1–16 KiB, …` and
    /// `  5064 files/s, 43.8 MB/s (17313878 bytes in 0.395 s); CPU 0.39 s (…): 23.99 s per GiB`.
    static func filesLine(_ files: FilesBenchResult) -> String {
        "\(FilesBench().title)\n  \(Format.fixed(files.filesPerSecond, 0)) files/s, "
            + "\(Format.fixed(files.bytesPerSecond / 1e6, 1)) MB/s (\(files.bytes) bytes in "
            + "\(Format.fixed(files.seconds, 3)) s); \(files.cpu.text(bytes: files.bytes))"
    }

    static func matrixTable(_ cells: [BenchCell], files: FilesBenchResult?, options: BenchOptions, peakRSS: Int)
        -> String
    {
        let threads = options.threads ?? WorkerPool.shared.threadCount
        // Wide enough for the longest row title (a compression row names its engine).
        let width = max(24, (BenchPath.allCases.map { $0.title(threads: threads).count }.max() ?? 0) + 2)
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
        out += pad("best", 7) + pad("CPU s/GiB", 11) + "   waits at best (source/sink)\n"
        for path in BenchPath.allCases {
            let row = cells.filter { $0.path == path }
            guard let best = row.max(by: { $0.bytesPerSecond < $1.bytesPerSecond }) else { continue }
            out += pad(path.title(threads: threads), width, left: true)
            for cell in row { out += pad(Format.fixed(cell.bytesPerSecond / 1e6, 0), 9) }
            out += pad(best.chunkSize.description, 7)
            out += pad(Format.fixed(best.cpu.secondsPerGiB(best.bytes) ?? 0, 2), 11)
            let waited = best.seconds > 0 ? 100 / best.seconds : 0
            out +=
                "   \(Format.fixed(best.sourceBoundSeconds * waited, 0))% / \(Format.fixed(best.sinkBoundSeconds * waited, 0))%\n"
        }
        if let files { out += "\n" + filesLine(files) + "\n" }
        out += "\npeak RSS \(Format.bytes(UInt64(peakRSS))): bounded by chunk size and queue depth, not by --size\n"
        out += "CPU s/GiB: CPU seconds (user + system) of the whole process per GiB moved, at the best chunk size\n"
        return out
    }

    static func matrixJSON(_ cells: [BenchCell], files: FilesBenchResult?, options: BenchOptions, peakRSS: Int)
        -> String
    {
        let results = cells.map { cell in
            "{\"path\": \(Format.jsonString(cell.path.rawValue)), \"chunk_size\": \(cell.chunkSize.bytes), "
                + "\"bytes\": \(cell.bytes), \"seconds\": \(Format.jsonNumber(cell.seconds)), "
                + "\"bytes_per_second\": \(Format.jsonNumber(cell.bytesPerSecond)), "
                + "\"source_bound_seconds\": \(Format.jsonNumber(cell.sourceBoundSeconds)), "
                + "\"sink_bound_seconds\": \(Format.jsonNumber(cell.sinkBoundSeconds)), "
                + cell.cpu.jsonFields(bytes: cell.bytes) + "}"
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
            + best.joined(separator: ", ") + "}, \"files\": " + (files.map(filesJSON) ?? "null")
            + ", \"peak_rss_bytes\": \(peakRSS), \"machine\": "
            + Format.jsonString(machineDescription()) + "}"
    }

    /// The many-files row as a JSON object.
    static func filesJSON(_ files: FilesBenchResult) -> String {
        let bench = FilesBench()
        return "{\"files\": \(files.files), \"smallest_file\": \(bench.smallest), \"largest_file\": \(bench.largest), "
            + "\"fsync\": false, \"bytes\": \(files.bytes), \"seconds\": \(Format.jsonNumber(files.seconds)), "
            + "\"files_per_second\": \(Format.jsonNumber(files.filesPerSecond)), "
            + "\"bytes_per_second\": \(Format.jsonNumber(files.bytesPerSecond)), "
            + files.cpu.jsonFields(bytes: files.bytes) + "}"
    }

    // MARK: Network

    private static func runServer(_ options: BenchOptions, host: String?, port: UInt16) throws {
        let context = try options.tls?.makeContext(role: .server, host: nil, operand: "--tls")
        let listener = try Socket.listen(host: host, port: port)
        if !options.quiet { Terminal.report("bench server listening on \(listener.address)") }
        if let pin = context?.localPin { Terminal.write("pin \(pin)\n", to: 2) }
        let server = NetworkBenchServer(
            listener: listener, chunkSize: options.chunkSizes.count == 1 ? options.chunkSizes[0] : .default,
            once: options.once, joinTimeout: .milliseconds(Int64((options.timeoutSeconds ?? 10) * 1000)), tls: context,
            onSession: { report, peer, group in
                let place = group.map { " [\($0.index + 1)/\($0.count)]" } ?? ""
                if options.json {
                    var fields = ["\"peer\": \(Format.jsonString(peer.description))"]
                    if let group { fields += ["\"stream\": \(group.index + 1)", "\"streams\": \(group.count)"] }
                    fields.append(rateJSON(bytes: report.bytes, seconds: report.seconds))
                    if let cpu = report.cpu { fields.append(cpu.jsonFields(bytes: report.bytes)) }
                    Terminal.write("{" + fields.joined(separator: ", ") + "}\n", to: 1)
                } else {
                    let cpu = report.cpu.map { "; " + $0.text(bytes: report.bytes) } ?? ""
                    Terminal.write(
                        "\(peer)\(place): \(rateText(bytes: report.bytes, seconds: report.seconds))\(cpu)\n", to: 1)
                }
            },
            onGroup: { sum, peer in
                let host = peer.host ?? peer.description
                if options.json {
                    Terminal.write(
                        "{\"peer\": \(Format.jsonString(host)), \"sum\": true, \"streams\": \(sum.streams), "
                            + "\"expected_streams\": \(sum.expected), \(rateJSON(bytes: sum.bytes, seconds: sum.seconds)), "
                            + sum.cpu.jsonFields(bytes: sum.bytes) + "}\n", to: 1)
                } else {
                    let count = sum.streams == sum.expected ? "\(sum.streams)" : "\(sum.streams) of \(sum.expected)"
                    Terminal.write(
                        "\(host) [SUM, \(count) streams]: \(rateText(bytes: sum.bytes, seconds: sum.seconds)); "
                            + sum.cpu.text(bytes: sum.bytes) + "\n", to: 1)
                }
            },
            onError: { Terminal.report("bench: \($0)") })
        try server.run()
    }

    /// `123 bytes in 1.5 s, 82.0 MB/s (0.66 Gbit/s)`.
    private static func rateText(bytes: UInt64, seconds: Double) -> String {
        let rate = seconds > 0 ? Double(bytes) / seconds : 0
        return "\(bytes) bytes in \(Format.seconds(seconds)) s, \(Format.fixed(rate / 1e6, 1)) MB/s "
            + "(\(Format.fixed(rate * 8 / 1e9, 2)) Gbit/s)"
    }

    private static func rateJSON(bytes: UInt64, seconds: Double) -> String {
        "\"bytes\": \(bytes), \"seconds\": \(Format.jsonNumber(seconds)), "
            + "\"bytes_per_second\": \(Format.jsonNumber(seconds > 0 ? Double(bytes) / seconds : 0))"
    }

    private static func runClient(_ options: BenchOptions, host: String, port: UInt16) throws {
        let chunk = options.chunkSizes.count == 1 ? options.chunkSizes[0] : .default
        let streams = options.parallel
        let what = options.reverse ? "receiving from" : "sending to"
        let heading =
            "sluice bench: \(what) \(host):\(port) for \(Format.seconds(options.seconds)) s, chunk \(chunk)"
            + (options.compress ? ", gzip -1" : "") + (streams > 1 ? ", \(streams) streams" : "")
        let text = !options.json && !options.jsonStream && !options.quiet
        let picture = try options.svg.map { path throws(CLIError) in
            try BenchPictureFile(path: path, force: options.force)
        }
        if text { Terminal.write(heading + "\n", to: 1) }
        let client = NetworkBenchClient(
            host: host, port: port, seconds: options.seconds, chunkSize: chunk, compress: options.compress,
            reverse: options.reverse, interval: options.interval,
            timeout: options.timeoutSeconds.map { .milliseconds(Int64($0 * 1000)) },
            tls: try options.tls?.makeContext(role: .client, host: host, operand: "tls:\(host):\(port)"),
            streams: streams,
            onInterval: { tick in
                if options.jsonStream {
                    for (i, slice) in tick.streams.enumerated() {
                        Terminal.write(
                            "{\"type\": \"interval\", \"stream\": \(i + 1), " + intervalJSON(slice) + "}\n", to: 1)
                    }
                    if streams > 1 {
                        Terminal.write("{\"type\": \"interval_sum\", " + intervalJSON(tick.sum) + "}\n", to: 1)
                    }
                } else if text {
                    var lines = ""
                    for (i, slice) in tick.streams.enumerated() {
                        lines += (streams > 1 ? streamLabel(i) + " " : "") + intervalText(slice)
                    }
                    if streams > 1 { lines += "[SUM] " + intervalText(tick.sum) }
                    Terminal.write(lines, to: 1)
                }
            })
        let report: NetworkRunReport
        do {
            report = try client.run()
        } catch let error as BenchFailure {
            picture?.discard()
            let status: ExitStatus = error.error?.code == .authenticationFailed ? .notPermitted : .unavailable
            throw CLIError(status, "bench: \(error.description)")
        } catch {
            picture?.discard()
            throw error
        }
        if options.json {
            Terminal.write("{" + runJSON(report, options: options, chunk: chunk, intervals: true) + "}\n", to: 1)
        } else if options.jsonStream {
            Terminal.write(
                "{\"type\": \"summary\", " + runJSON(report, options: options, chunk: chunk, intervals: false) + "}\n",
                to: 1)
        } else if !options.quiet {
            Terminal.write(runText(report, options: options), to: 1)
        }
        if let picture {
            let chart = BenchChart.intervals(report, title: heading, subtitle: pictureSubtitle())
            try picture.write(chart.render())
        }
    }

    /// `[  1]`, as iperf3 numbers its streams.
    private static func streamLabel(_ index: Int) -> String {
        let number = String(index + 1)
        return "[" + String(repeating: " ", count: max(0, 3 - number.count)) + number + "]"
    }

    private static func intervalText(_ slice: NetworkReport.Interval) -> String {
        "[\(Format.fixed(slice.start, 1))-\(Format.fixed(slice.end, 1)) s] "
            + "\(Format.bytes(slice.bytes))  \(Format.fixed(slice.bytesPerSecond / 1e6, 1)) MB/s  "
            + "\(Format.fixed(slice.bytesPerSecond * 8 / 1e9, 2)) Gbit/s\n"
    }

    /// The client's final report: each stream and the sum (one stream: as before `-P`), then
    /// the CPU time per GiB.
    private static func runText(_ report: NetworkRunReport, options: BenchOptions) -> String {
        let verb = options.reverse ? "received" : "sent"
        func line(_ bytes: UInt64, _ seconds: Double, _ rate: Double) -> String {
            "\(verb) \(bytes) bytes in \(Format.seconds(seconds)) s: \(Format.fixed(rate / 1e6, 1)) MB/s "
                + "(\(Format.fixed(rate * 8 / 1e9, 2)) Gbit/s)"
        }
        var text = ""
        if report.streams.count == 1 {
            text += line(report.bytes, report.seconds, report.bytesPerSecond) + "\n"
            if let peer = report.peerBytes { text += "server received \(peer) bytes\n" }
        } else {
            text += String(repeating: "- ", count: 30) + "\n"
            for (i, stream) in report.streams.enumerated() {
                text += streamLabel(i) + " " + line(stream.bytes, stream.seconds, stream.bytesPerSecond)
                text += stream.peerBytes.map { "; server received \($0) bytes" } ?? ""
                text += "\n"
            }
            text += "[SUM] " + line(report.bytes, report.seconds, report.bytesPerSecond)
            text += report.peerBytes.map { "; server received \($0) bytes" } ?? ""
            text += "\n"
        }
        text += report.cpu.text(bytes: report.bytes) + " (this client; the server reports its own)\n"
        return text
    }

    /// The summary's fields: the sum at the top level (the one stream's figures without
    /// `-P`), then `streams`, each stream's figures.
    private static func runJSON(_ report: NetworkRunReport, options: BenchOptions, chunk: ChunkSize, intervals: Bool)
        -> String
    {
        func slices(_ list: [NetworkReport.Interval]) -> String {
            "[" + list.map { "{" + intervalJSON($0) + "}" }.joined(separator: ", ") + "]"
        }
        let streams = report.streams.enumerated().map { i, stream in
            "{\"stream\": \(i + 1), \(rateJSON(bytes: stream.bytes, seconds: stream.seconds)), "
                + "\"server_bytes\": \(stream.peerBytes.map(String.init) ?? "null"), "
                + "\"source_bound_seconds\": \(Format.jsonNumber(stream.sourceBoundSeconds)), "
                + "\"sink_bound_seconds\": \(Format.jsonNumber(stream.sinkBoundSeconds))"
                + (intervals ? ", \"intervals\": " + slices(stream.intervals) : "") + "}"
        }
        var fields =
            rateJSON(bytes: report.bytes, seconds: report.seconds) + ", "
            + "\"server_bytes\": \(report.peerBytes.map(String.init) ?? "null"), "
            + "\"reverse\": \(options.reverse), \"compress\": \(options.compress), \"chunk_size\": \(chunk.bytes), "
            + "\"parallel\": \(report.streams.count), "
            + "\"source_bound_seconds\": \(Format.jsonNumber(report.sourceBoundSeconds)), "
            + "\"sink_bound_seconds\": \(Format.jsonNumber(report.sinkBoundSeconds)), "
            + "\"tls_protocol\": \(report.tls.map { Format.jsonString($0.protocol) } ?? "null"), "
            + "\"tls_cipher\": \(report.tls.map { Format.jsonString($0.cipher) } ?? "null"), "
            + report.cpu.jsonFields(bytes: report.bytes) + ", "
            + "\"streams\": [" + streams.joined(separator: ", ") + "]"
        if intervals { fields += ", \"intervals\": " + slices(report.intervals) }
        return fields
    }

    private static func intervalJSON(_ slice: NetworkReport.Interval) -> String {
        "\"start\": \(Format.jsonNumber(slice.start)), \"end\": \(Format.jsonNumber(slice.end)), "
            + "\"bytes\": \(slice.bytes), \"bytes_per_second\": \(Format.jsonNumber(slice.bytesPerSecond))"
    }

    /// The machine, the version and the time, under a picture's title.
    private static func pictureSubtitle() -> String {
        var now = time(nil)
        var parts = tm()
        gmtime_r(&now, &parts)
        var buffer = [CChar](repeating: 0, count: 32)
        let count = strftime(&buffer, buffer.count, "%Y-%m-%d %H:%M UTC", &parts)
        let date = String(decoding: buffer.prefix(count).map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return "\(machineDescription()); sluice \(SluiceCommand.version); \(date)"
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
            .map { String($0.drop(while: \.isWhitespace)) } ?? "unknown CPU"
        return "\(ProcessInfo.processInfo.activeProcessorCount) cores, \(cpu)"
    }
}
