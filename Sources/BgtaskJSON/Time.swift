#if canImport(Glibc)
@preconcurrency import Glibc
#endif

/// ISO-8601 in local time with its offset (`2026-11-26T01:00:00+01:00`), for `--json`.
public func isoText(_ epoch: Double, utc: Bool = false) -> String {
    guard epoch.isFinite, abs(epoch) < 1e12 else { return "?" }
    var secs = time_t(epoch.rounded(.down))
    var t = Glibc.tm()
    if utc { gmtime_r(&secs, &t) } else { localtime_r(&secs, &t) }
    func p(_ v: Int) -> String { v < 10 ? "0\(v)" : String(v) }
    let off = utc ? 0 : t.tm_gmtoff
    let zone = off == 0 ? "Z" : (off < 0 ? "-" : "+") + p(abs(off) / 3600) + ":" + p(abs(off) % 3600 / 60)
    return "\(t.tm_year + 1900)-\(p(Int(t.tm_mon) + 1))-\(p(Int(t.tm_mday)))T\(p(Int(t.tm_hour))):\(p(Int(t.tm_min))):\(p(Int(t.tm_sec)))" + zone
}
