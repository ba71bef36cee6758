import FoundationEssentials
import Sluice

#if canImport(Glibc)
    import Glibc
#endif

/// A line chart written as plain SVG text (`sluice bench --svg`): axes with tick labels and
/// grid lines, one polyline with points per series, a legend and a title. No external tool,
/// no script, no stylesheet: any browser opens it, and it is well-formed XML (text escaped).
///
/// Each series is a `<g class="series" data-series="ID" data-kind="KIND">` holding its
/// polyline and one `<circle>` (with a `<title>` tooltip) per point, so a script can count and
/// read them back.
struct BenchChart {
    /// How an axis maps values to positions.
    enum Scale {
        /// Base-10 logarithmic, over a range of positive values.
        case log(ClosedRange<Double>)
        case linear(ClosedRange<Double>)

        /// `value`'s place from 0 (the range's start) to 1 (its end), clamped to the range.
        func fraction(_ value: Double) -> Double {
            switch self {
            case .log(let range):
                let low = Glibc.log10(range.lowerBound)
                let high = Glibc.log10(range.upperBound)
                guard high > low, value > 0 else { return 0 }
                return min(1, max(0, (Glibc.log10(value) - low) / (high - low)))
            case .linear(let range):
                guard range.upperBound > range.lowerBound else { return 0 }
                return min(1, max(0, (value - range.lowerBound) / (range.upperBound - range.lowerBound)))
            }
        }
    }

    struct Axis {
        var label: String
        var scale: Scale
        /// The ticks: a value and its label.
        var ticks: [(value: Double, label: String)]
    }

    struct Series {
        /// A short machine-readable name: `memory`, `stream-2`, `sum`.
        var id: String
        /// `path` (a matrix row), `stream` or `sum`.
        var kind: String
        /// The legend's text.
        var title: String
        var points: [(x: Double, y: Double, note: String)]
        var colour: String
        var width = 2.0
        /// A dash pattern (`stroke-dasharray`), for series past the palette's colours.
        var dash: String? = nil

        var dashAttribute: String { dash.map { " stroke-dasharray=\"\($0)\"" } ?? "" }
    }

    var title: String
    var subtitle: String
    var x: Axis
    var y: Axis
    var series: [Series]
    /// A line of text under the plot: a figure that has no place on its axes (the matrix's
    /// many-files row, which has no chunk size).
    var note: String? = nil

    /// Okabe and Ito's palette, which readers with any common colour blindness can tell apart
    /// (its yellow, too light on white, is left out), and a grey.
    static let palette = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#999999"]
    /// The palette without the black that draws a sum.
    static let streamPalette = palette.filter { $0 != "#000000" }

    static let width = 960.0
    static let height = 560.0
    /// The plot area.
    static let left = 80.0
    static let right = 660.0
    static let top = 70.0
    static let bottom = 490.0
    /// Legend entries drawn; further series are counted in one last line.
    static let legendLimit = 24

    func render() -> String {
        let w = Self.width
        let h = Self.height
        var out = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
        out += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"\(n(w))\" height=\"\(n(h))\" "
        out += "viewBox=\"0 0 \(n(w)) \(n(h))\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\">\n"
        out += "<title>\(Self.escape(title))</title>\n"
        out += "<rect x=\"0\" y=\"0\" width=\"\(n(w))\" height=\"\(n(h))\" fill=\"#ffffff\"/>\n"
        out +=
            "<text x=\"\(n(Self.left))\" y=\"30\" font-size=\"17\" font-weight=\"bold\">\(Self.escape(title))</text>\n"
        out +=
            "<text x=\"\(n(Self.left))\" y=\"52\" font-size=\"12\" fill=\"#444444\">\(Self.escape(subtitle))</text>\n"
        out += axes()
        out += "<g class=\"plot\">\n"
        for item in series { out += draw(item) }
        out += "</g>\n"
        out += legend()
        if let note {
            out += "<text class=\"note\" x=\"\(n(Self.left))\" y=\"\(n(Self.height - 8))\" font-size=\"11\" "
            out += "fill=\"#333333\">\(Self.escape(note))</text>\n"
        }
        out += "</svg>\n"
        return out
    }

    private func px(_ value: Double) -> Double { Self.left + x.scale.fraction(value) * (Self.right - Self.left) }
    private func py(_ value: Double) -> Double { Self.bottom - y.scale.fraction(value) * (Self.bottom - Self.top) }

    private func axes() -> String {
        var out = "<g class=\"axes\" font-size=\"11\" fill=\"#333333\">\n"
        out += "<rect x=\"\(n(Self.left))\" y=\"\(n(Self.top))\" width=\"\(n(Self.right - Self.left))\" "
        out += "height=\"\(n(Self.bottom - Self.top))\" fill=\"none\" stroke=\"#888888\"/>\n"
        for tick in x.ticks {
            let at = px(tick.value)
            out +=
                line(at, Self.top, at, Self.bottom, "#e4e4e4") + line(at, Self.bottom, at, Self.bottom + 5, "#888888")
            out += label(tick.label, x: at, y: Self.bottom + 18, anchor: "middle")
        }
        for tick in y.ticks {
            let at = py(tick.value)
            out += line(Self.left, at, Self.right, at, "#e4e4e4") + line(Self.left - 5, at, Self.left, at, "#888888")
            out += label(tick.label, x: Self.left - 8, y: at + 4, anchor: "end")
        }
        let middleX = (Self.left + Self.right) / 2
        let middleY = (Self.top + Self.bottom) / 2
        out += "<text x=\"\(n(middleX))\" y=\"\(n(Self.bottom + 40))\" text-anchor=\"middle\" font-size=\"13\">"
        out += "\(Self.escape(x.label))</text>\n"
        out += "<text x=\"20\" y=\"\(n(middleY))\" text-anchor=\"middle\" font-size=\"13\" "
        out += "transform=\"rotate(-90 20 \(n(middleY)))\">\(Self.escape(y.label))</text>\n"
        out += "</g>\n"
        return out
    }

    private func line(_ x1: Double, _ y1: Double, _ x2: Double, _ y2: Double, _ colour: String) -> String {
        "<line x1=\"\(n(x1))\" y1=\"\(n(y1))\" x2=\"\(n(x2))\" y2=\"\(n(y2))\" stroke=\"\(colour)\"/>\n"
    }

    private func label(_ text: String, x: Double, y: Double, anchor: String) -> String {
        "<text x=\"\(n(x))\" y=\"\(n(y))\" text-anchor=\"\(anchor)\">\(Self.escape(text))</text>\n"
    }

    private func draw(_ item: Series) -> String {
        var out =
            "<g class=\"series\" data-series=\"\(Self.escape(item.id))\" data-kind=\"\(Self.escape(item.kind))\">\n"
        let points = item.points.map { "\(n(px($0.x))),\(n(py($0.y)))" }.joined(separator: " ")
        if item.points.count > 1 {
            out += "<polyline points=\"\(points)\" fill=\"none\" stroke=\"\(item.colour)\" "
            out += "stroke-width=\"\(n(item.width))\" stroke-linejoin=\"round\"\(item.dashAttribute)/>\n"
        }
        for point in item.points {
            out += "<circle cx=\"\(n(px(point.x)))\" cy=\"\(n(py(point.y)))\" r=\"\(n(item.width + 1.5))\" "
            out += "fill=\"\(item.colour)\"><title>\(Self.escape(item.title + ": " + point.note))</title></circle>\n"
        }
        out += "</g>\n"
        return out
    }

    private func legend() -> String {
        var out = "<g class=\"legend\" font-size=\"12\">\n"
        var y = Self.top + 8
        let x = Self.right + 20
        for item in series.prefix(Self.legendLimit) {
            out += "<line x1=\"\(n(x))\" y1=\"\(n(y))\" x2=\"\(n(x + 24))\" y2=\"\(n(y))\" stroke=\"\(item.colour)\" "
            out += "stroke-width=\"\(n(item.width))\"\(item.dashAttribute)/>\n"
            out += "<circle cx=\"\(n(x + 12))\" cy=\"\(n(y))\" r=\"\(n(item.width + 1.5))\" fill=\"\(item.colour)\"/>\n"
            out += "<text x=\"\(n(x + 32))\" y=\"\(n(y + 4))\">\(Self.escape(item.title))</text>\n"
            y += 20
        }
        if series.count > Self.legendLimit {
            out += "<text x=\"\(n(x))\" y=\"\(n(y + 4))\" fill=\"#444444\">"
            out += "and \(series.count - Self.legendLimit) more</text>\n"
        }
        out += "</g>\n"
        return out
    }

    /// A coordinate: at most one decimal, no exponent.
    private func n(_ value: Double) -> String { Format.seconds((value * 10).rounded() / 10) }

    /// Text for XML: the five characters that could end it escaped, and control characters
    /// (which XML 1.0 does not allow) dropped.
    static func escape(_ text: String) -> String {
        var out = ""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "&": out += "&amp;"
            case "<": out += "&lt;"
            case ">": out += "&gt;"
            case "\"": out += "&quot;"
            case "'": out += "&apos;"
            case _ where scalar.value < 0x20 && scalar != "\t" && scalar != "\n": break
            case "\u{FFFE}", "\u{FFFF}": break
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out
    }
}

extension BenchChart {
    /// The local matrix: MB/s against chunk size, both on log scales, one series per path.
    static func matrix(_ cells: [BenchCell], title: String, subtitle: String, rowTitle: (BenchPath) -> String)
        -> BenchChart
    {
        var series: [Series] = []
        for path in BenchPath.allCases {
            let row = cells.filter { $0.path == path && $0.bytesPerSecond > 0 }
            guard !row.isEmpty else { continue }
            let name = rowTitle(path)
            series.append(
                Series(
                    id: path.rawValue, kind: "path", title: name,
                    points: row.map { cell in
                        let mbps = cell.bytesPerSecond / 1e6
                        return (
                            Double(cell.chunkSize.bytes), mbps,
                            "\(cell.chunkSize): \(Format.fixed(mbps, 0)) MB/s, "
                                + "\(Format.fixed(cell.cpu.secondsPerGiB(cell.bytes) ?? 0, 2)) CPU s per GiB"
                        )
                    }, colour: palette[series.count % palette.count]))
        }
        let chunks = (9...22).map { Double(1 << $0) }
        let x = Axis(
            label: "chunk size (bytes, log scale)", scale: .log(chunks[0]...chunks[chunks.count - 1]),
            ticks: chunks.map { ($0, (try? ChunkSize(Int($0)))?.description ?? "\(Int($0))") })
        let rates = series.flatMap { $0.points.map(\.y) }
        return BenchChart(
            title: title, subtitle: subtitle, x: x, y: logAxis(rates, label: "MB/s (10^6 bytes a second, log scale)"),
            series: series)
    }

    /// A network run: MB/s in each interval against time, one series per stream and, with
    /// several, their sum.
    static func intervals(_ report: NetworkRunReport, title: String, subtitle: String) -> BenchChart {
        var series: [Series] = []
        func points(_ slices: [NetworkReport.Interval]) -> [(x: Double, y: Double, note: String)] {
            slices.map { slice in
                let mbps = slice.bytesPerSecond / 1e6
                return (
                    (slice.start + slice.end) / 2, mbps,
                    "\(Format.fixed(slice.start, 1))-\(Format.fixed(slice.end, 1)) s: \(Format.fixed(mbps, 1)) MB/s"
                )
            }
        }
        let several = report.streams.count > 1
        for (i, stream) in report.streams.enumerated() {
            series.append(
                Series(
                    id: "stream-\(i + 1)", kind: "stream", title: several ? "stream \(i + 1)" : "the stream",
                    points: points(stream.intervals), colour: streamPalette[i % streamPalette.count],
                    width: several ? 1.5 : 2, dash: Self.dash(i / streamPalette.count)))
        }
        if several {
            series.append(
                Series(
                    id: "sum", kind: "sum", title: "sum of \(report.streams.count) streams",
                    points: points(report.intervals), colour: "#000000", width: 3))
        }
        let end = max(report.intervals.last?.end ?? 0, report.streams.compactMap { $0.intervals.last?.end }.max() ?? 0)
        let xTicks = linearTicks(upTo: max(end, 0.1))
        let peak = series.flatMap { $0.points.map(\.y) }.max() ?? 0
        let yTicks = linearTicks(upTo: max(peak * 1.05, 1))
        return BenchChart(
            title: title, subtitle: subtitle,
            x: Axis(
                label: "time (s)", scale: .linear(0...(xTicks.last?.value ?? 1)),
                ticks: xTicks.map { ($0.value, $0.label) }),
            y: Axis(
                label: "MB/s in each interval (10^6 bytes a second)", scale: .linear(0...(yTicks.last?.value ?? 1)),
                ticks: yTicks.map { ($0.value, $0.label) }),
            series: series)
    }

    /// The dash pattern of the `round`th pass through the palette: none for the first.
    static func dash(_ round: Int) -> String? {
        guard round > 0 else { return nil }
        return ["6 3", "2 3", "8 3 2 3", "1 2"][(round - 1) % 4]
    }

    /// A log axis over whole decades that hold `values`, ticked at 1, 2 and 5 of each.
    static func logAxis(_ values: [Double], label: String) -> Axis {
        let positive = values.filter { $0 > 0 && $0.isFinite }
        let low = Glibc.floor(Glibc.log10(positive.min() ?? 1))
        var high = Glibc.ceil(Glibc.log10(positive.max() ?? 10))
        if high <= low { high = low + 1 }
        var ticks: [(value: Double, label: String)] = []
        var decade = low
        while decade <= high {
            for step in [1.0, 2.0, 5.0] {
                let value = step * Glibc.pow(10, decade)
                if decade == high && step > 1 { break }
                ticks.append((value, number(value)))
            }
            decade += 1
        }
        return Axis(label: label, scale: .log(Glibc.pow(10, low)...Glibc.pow(10, high)), ticks: ticks)
    }

    /// Ticks from 0 in steps of 1, 2 or 5 × 10^k, about six of them, the last at or above `top`.
    static func linearTicks(upTo top: Double) -> [(value: Double, label: String)] {
        let rough = top / 6
        let magnitude = Glibc.pow(10, Glibc.floor(Glibc.log10(rough)))
        let step = [1.0, 2.0, 5.0, 10.0].map { $0 * magnitude }.first { $0 >= rough } ?? magnitude * 10
        var ticks: [(value: Double, label: String)] = []
        var value = 0.0
        while ticks.count < 40 {
            ticks.append((value, number(value)))
            if value >= top { break }
            value += step
        }
        return ticks
    }

    /// `0.5`, `20`, `1,000`, `20,000`: as few decimals as the value needs.
    static func number(_ value: Double) -> String {
        if value != value.rounded() { return Format.seconds(value) }
        var digits = String(Int(value.rounded()))
        var grouped = ""
        while digits.count > 3 {
            grouped = "," + digits.suffix(3) + grouped
            digits.removeLast(3)
        }
        return digits + grouped
    }
}

/// The `--svg` file. Its temporary file is made beside it before the measurement starts, so a
/// path that cannot be written fails at once (73), not after minutes of measuring; the picture
/// is renamed into place only when complete. An existing file is replaced only with `force`.
/// Interrupted, the temporary file is removed.
final class BenchPictureFile {
    private let file: DestinationFile
    private let name: String

    init(path: String, force: Bool) throws(CLIError) {
        name = path
        file = try DestinationFile(path: path, force: force, append: false)
        if let temporary = file.temporaryPath {
            SignalWatcher.shared.setHandler { signal in
                unlink(temporary)
                _exit(128 + signal)
            }
        }
    }

    /// Writes `text` and gives the file its name (74 if the write fails, 73 if a file of that
    /// name appeared meanwhile).
    func write(_ text: String) throws(CLIError) {
        defer { SignalWatcher.shared.setHandler(nil) }
        let stream = file.stream
        stream.open()
        guard stream.write(all: Array(text.utf8)) else {
            let why = stream.streamError.map { "\($0)" } ?? "write failed"
            stream.close()
            file.discard()
            throw CLIError(.ioError, "--svg \(name): \(why)")
        }
        stream.close()
        try file.commit()
    }

    /// Removes the temporary file: the measurement failed.
    func discard() {
        file.discard()
        SignalWatcher.shared.setHandler(nil)
    }
}
