import ArgumentParser
import BgtaskBus
import BgtaskProtocol
import BgtaskConfig
import BgtaskJSON
import BgtaskPolicy
#if canImport(Glibc)
@preconcurrency import Glibc
#endif

extension Bgtask {
    struct Apps: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "apps",
            abstract: "The apps whose manifests bgtaskd knows, and the switch for each one's background work.",
            subcommands: [List.self, Enable.self, Disable.self], defaultSubcommand: List.self)

        struct List: ParsableCommand {
            static let configuration = CommandConfiguration(commandName: "list", abstract: "List the manifests (and those that do not load, with file:line).")
            @Flag(name: .long, help: "Print the list as JSON.") var json = false

            func run() throws {
                let (apps, dicts) = try DaemonClient.items(.listApps, [], AppInfo.init(variant:))
                if json { print(BusValue.dicts(dicts).json.rendered); return }
                if apps.isEmpty { out("no app manifests (in \(AppManifests.directories().joined(separator: ", ")))"); return }
                for a in apps {
                    if let e = a.error { out("skipped: \(e)"); continue }
                    let on = a.enabled ?? true
                    out("\(a.id ?? "?"): \(on ? "on" : "off")\(a.connected == true ? ", connected" : "") — "
                        + "\((a.identifiers ?? []).joined(separator: ", ")) (\(a.path ?? ""))")
                    if let n = a.endedBySystem, n > 0, let held = a.refreshHeldBackS {
                        out("  \(n) task(s) the system had to end (no setTaskCompleted in time), not made good: its refresh work waits \(formatDuration(held)) longer")
                    }
                }
            }
        }

        struct Enable: ParsableCommand {
            static let configuration = CommandConfiguration(commandName: "enable", abstract: "Turn an app's background work on.")
            @Argument(help: ArgumentHelp("The app id.", valueName: "app-id")) var app: String
            func validate() throws { if !AppManifest.validID(app) { throw ValidationError("\(app): not an app id") } }
            func run() throws { try Apps.set(app, true) }
        }

        struct Disable: ParsableCommand {
            static let configuration = CommandConfiguration(commandName: "disable", abstract: "Turn an app's background work off (its pending work is cancelled).")
            @Argument(help: ArgumentHelp("The app id.", valueName: "app-id")) var app: String
            func validate() throws { if !AppManifest.validID(app) { throw ValidationError("\(app): not an app id") } }
            func run() throws { try Apps.set(app, false) }
        }

        /// Through the daemon when it runs (it cancels what is pending at once); else the switch file it reads at start.
        static func set(_ app: String, _ on: Bool) throws {
            if let bus = try? BusConnection() {
                do {
                    _ = try bus.call(.setAppEnabled, [.string(app), .bool(on)])
                    out("\(app): background work \(on ? "on" : "off")")
                    return
                } catch where error.name == BusError.wrongReply {
                    // Something answered, not as bgtaskd does: it is not taken for "bgtaskd is not running".
                    DaemonClient.fail("\(error.message): \(DaemonClient.wrongReplyTail)", ExitStatus.software)
                } catch {}
            }
            do { try AppManifests.setEnabled(app, on) } catch {
                err("\(error)")
                throw ExitCode(ExitStatus.cantCreate)
            }
            out("\(app): background work \(on ? "on" : "off") (bgtaskd is not running; it reads this when it starts)")
        }
    }
}
