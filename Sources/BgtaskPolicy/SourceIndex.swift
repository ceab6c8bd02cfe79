/// Finds where keys and values sit in a TOML file's text, since the TOML parser reports positions
/// only for syntax errors. Good enough for the files people write: keys at the start of a line.
struct SourceIndex {
    let path: String
    let lines: [String]

    init(path: String, text: String) {
        self.path = path
        lines = text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
    }

    func location(line: Int, column: Int) -> SourceLocation { SourceLocation(file: path, line: line, column: column) }

    func error(_ message: String, line: Int, column: Int = 1, length: Int = 1) -> PolicyError {
        PolicyError(location: location(line: line, column: column), message: message,
                    sourceLine: lines.indices.contains(line - 1) ? lines[line - 1] : nil, length: length)
    }

    /// 1-based line numbers of `[[rule]]` headers, in order.
    var ruleHeaders: [Int] {
        lines.enumerated().filter { stripped($0.element).hasPrefix("[[rule]]") }.map { $0.offset + 1 }
    }

    func header(_ table: String) -> Int? {
        lines.firstIndex { stripped($0).hasPrefix("[\(table)]") }.map { $0 + 1 }
    }

    func stripped(_ s: String) -> String { String(s.drop { $0 == " " || $0 == "\t" }) }

    /// The line and column of `key = value` between two lines, pointing at the value (or the key).
    func find(key: String, from: Int, to: Int?, atValue: Bool = true) -> (line: Int, column: Int)? {
        let end = min(to ?? lines.count + 1, lines.count + 1)
        guard from >= 1, from < end else { return nil }
        for n in from..<end {
            let line = Array(lines[n - 1])
            var i = 0
            while i < line.count, line[i] == " " || line[i] == "\t" { i += 1 }
            let keyStart = i
            let k = Array(key)
            guard line.count >= i + k.count, Array(line[i..<i + k.count]) == k else { continue }
            i += k.count
            while i < line.count, line[i] == " " || line[i] == "\t" { i += 1 }
            guard i < line.count, line[i] == "=" else { continue }
            if !atValue { return (n, keyStart + 1) }
            i += 1
            while i < line.count, line[i] == " " || line[i] == "\t" { i += 1 }
            return (n, i + 1)
        }
        return nil
    }

    /// Maps a character offset inside a string value starting at (line, column) to a file position.
    func position(ofOffset offset: Int, inStringAt line: Int, column: Int) -> (line: Int, column: Int) {
        let text = Array(lines[line - 1])
        var l = line, c = column - 1
        // Skip the opening delimiter: ' " ''' """ (a newline right after a triple quote is trimmed by TOML).
        var row = text
        if c < row.count {
            let q = row[c]
            if c + 2 < row.count, row[c + 1] == q, row[c + 2] == q {
                c += 3
                if c >= row.count { l += 1; c = 0; row = l <= lines.count ? Array(lines[l - 1]) : [] }
            } else { c += 1 }
        }
        var remaining = offset
        while remaining > 0 {
            if c >= row.count {
                l += 1
                guard l <= lines.count else { break }
                row = Array(lines[l - 1]); c = 0
                remaining -= 1   // the newline
                continue
            }
            c += 1
            remaining -= 1
        }
        return (l, c + 1)
    }
}
