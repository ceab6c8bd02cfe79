import BgtaskBus
import Foundation
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Names a critical section begun with `beginBackgroundTask(withName:expirationHandler:)`.
public struct BGBackgroundTaskIdentifier: RawRepresentable, Hashable, Sendable {
    public let rawValue: Int
    public init(rawValue: Int) { self.rawValue = rawValue }
    /// No section (none could be begun, or it ended).
    public static let invalid = BGBackgroundTaskIdentifier(rawValue: 0)
}

extension BGTaskScheduler {
    /// A Linux extra in the spirit of UIKit's `beginBackgroundTask`: holds a logind *delay* lock on sleep and
    /// shutdown around work that must not be cut ("finish saving before the lid closes"). When the machine
    /// is about to sleep or shut down (`PrepareForSleep`/`PrepareForShutdown`), `expirationHandler` is called:
    /// finish or give up within logind's `InhibitDelayMaxSec` (5 s by default), then call `endBackgroundTask`.
    /// The lock is released when the handler returns in any case, so sleep is never held longer.
    ///
    /// - Returns: `.invalid` (and a line on stderr) when no lock can be taken: no system bus or no logind.
    public func beginBackgroundTask(withName name: String? = nil, expirationHandler: (() -> Void)? = nil) -> BGBackgroundTaskIdentifier {
        CriticalSections.shared.begin(name: name ?? "finishing work", who: applicationIdentifier ?? ProcessInfo.processInfo.processName,
                                      expiration: expirationHandler)
    }

    /// Ends a section: releases its lock. Ending `.invalid` or an ended section does nothing.
    public func endBackgroundTask(_ identifier: BGBackgroundTaskIdentifier) {
        CriticalSections.shared.end(identifier)
    }
}

/// The sections of this process, their lock descriptors, and logind's signals.
/// Unchecked: `system` and `thread` are set once, under the sections' Mutex (in `begin`), and only read after.
final class CriticalSections: @unchecked Sendable {
    static let shared = CriticalSections()

    /// Unchecked: the app's expiration closure (not @Sendable, as Apple's), called once on `handlerQueue`.
    struct Section: @unchecked Sendable {
        /// Its delay locks (sleep and shutdown, each taken on its own).
        let fds: [Int32]
        let expiration: (() -> Void)?
    }

    struct Sections: Sendable {
        var open: [Int: Section] = [:]
        var next = 1
    }
    let sections = Mutex(Sections())
    var system: BusConnection?
    var thread: BusThread?
    let handlerQueue = DispatchQueue(label: "BackgroundTasks.critical-section", qos: .background)

    func systemBus() -> BusConnection? {
        if let s = system { return s }
        guard let s = try? BusConnection(system: true), let t = try? BusThread() else { return nil }
        t.sync {
            for member in ["PrepareForSleep", "PrepareForShutdown"] {
                s.subscribe(sender: "org.freedesktop.login1", interface: "org.freedesktop.login1.Manager", member: member,
                            path: "/org/freedesktop/login1") { [weak self] _, args in
                    if args.first?.bool == true { self?.expireAll() }
                }
            }
        }
        system = s
        thread = t
        return s
    }

    func begin(name: String, who: String, expiration: (() -> Void)?) -> BGBackgroundTaskIdentifier {
        return sections.withLock { s in
            guard let bus = systemBus() else {
                DaemonLink.warn("beginBackgroundTask(\(name)): no system bus, so no sleep lock; the work is not protected")
                return .invalid
            }
            let (held, refused) = bus.delayLocks(["sleep", "shutdown"], who: who, why: name)
            for (kind, why) in refused.sorted(by: { $0.key < $1.key }) {
                DaemonLink.warn("beginBackgroundTask(\(name)): logind gave no \(kind) delay lock: \(why)")
            }
            guard !held.isEmpty else { return .invalid }
            let id = s.next
            s.next += 1
            s.open[id] = Section(fds: Array(held.values), expiration: expiration)
            return BGBackgroundTaskIdentifier(rawValue: id)
        }
    }

    func end(_ id: BGBackgroundTaskIdentifier) {
        guard let s = sections.withLock({ $0.open.removeValue(forKey: id.rawValue) }) else { return }
        for fd in s.fds { close(fd) }
    }

    /// The machine is about to sleep or shut down: every section's handler runs, then its lock goes.
    func expireAll() {
        let all = sections.withLock { $0.open }
        for (id, s) in all.sorted(by: { $0.key < $1.key }) {
            handlerQueue.async { [weak self] in
                s.expiration?()
                self?.end(BGBackgroundTaskIdentifier(rawValue: id))
            }
        }
    }

    /// Open sections (for tests and `description`).
    var count: Int { sections.withLock { $0.open.count } }
}
