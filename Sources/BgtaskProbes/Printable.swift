/// Text from outside (sysfs names, ids, app names, reasons) as it may reach a terminal: control characters,
/// and the invisible ones that reorder or hide what a person reads — bidi overrides and isolates (U+202E
/// makes `exe.txt` read `txt.exe`), line and paragraph separators, zero-width characters — are escaped.
public enum Printable {
    /// Whether `u` must not reach a terminal as itself (`\t` and `\n` are the caller's choice).
    public static func isHidden(_ u: Unicode.Scalar) -> Bool {
        switch u.value {
        case 0..<0x20, 0x7F, 0x80..<0xA0: return true          // C0, DEL, C1
        case 0x061C, 0x200E, 0x200F, 0x202A...0x202E, 0x2066...0x2069: return true   // bidi marks, embeddings, overrides, isolates
        case 0x2028, 0x2029: return true                        // line and paragraph separators
        case 0x200B...0x200D, 0x2060, 0xFEFF: return true       // zero-width space, joiners, word joiner, BOM
        default: return false
        }
    }

    /// `\xNN` for a control character, `\u{NNNN}` for the others.
    public static func escaped(_ u: Unicode.Scalar) -> String {
        u.value < 0x100 ? "\\x" + (u.value < 0x10 ? "0" : "") + String(u.value, radix: 16) : "\\u{" + String(u.value, radix: 16) + "}"
    }

    /// `s` with every hidden character escaped (a name read from sysfs, shown in any output).
    public static func text(_ s: String) -> String {
        guard s.unicodeScalars.contains(where: isHidden) else { return s }
        var out = ""
        for u in s.unicodeScalars { if isHidden(u) { out += escaped(u) } else { out.unicodeScalars.append(u) } }
        return out
    }
}
