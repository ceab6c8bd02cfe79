import BgtaskTestSupport
import Foundation
import Testing

/// A bgtaskd that is not: it owns the scheduler's name on a private bus and answers every method the CLI and the
/// front call with what the interface does not allow. `types`: each reply of another type (its own introspection
/// says so, so GDBus sends it). `values`: the right types, wrong contents — items with a key of the wrong type, an
/// empty id, a pending line that is not JSON, an id with terminal escape sequences in it. "ready" once it owns the name.
let fakeSchedulerScript = #"""
import sys
from gi.repository import Gio, GLib
mode, address = sys.argv[1], sys.argv[2]
NAME, PATH = "io.github.bgtask.Scheduler1", "/io/github/bgtask/Scheduler1"
ESC = "\x1b]0;owned\x07\x1b[2J"
# Each method: its in arguments' types; its out arguments' types (one a word) and the values it answers with.
ins = {"Submit": ["a{sv}", "as"], "Cancel": ["s"], "SetAppEnabled": ["s", "b"], "DebugLaunch": ["s"], "ListPendingJSON": ["a{sv}"], "ListPendingPage": ["a{sv}"]}
if mode == "types":
    out = {"Submit": ("u", (7,)), "Cancel": ("u", (1,)), "CancelAll": ("s", ("all",)), "ListRunning": ("as", (["t"],)),
           "ListApps": ("s", ("none",)), "DebugLaunch": ("s", ("launched",)), "GetStatus": ("s", ("fine",)),
           "ListPendingJSON": ("s", ("x",)), "ListPendingPage": ("s", ("x",)), "SetAppEnabled": ("s", ("on",))}
else:
    out = {"Submit": ("s", None), "Cancel": ("s", ("",)), "CancelAll": ("u", (2,)),
           "ListRunning": ("aa{sv}", ([{"id": GLib.Variant("s", "t"), "state": GLib.Variant("u", 7)}],)),
           "ListApps": ("aa{sv}", ([{"id": GLib.Variant("u", 7)}],)), "DebugLaunch": ("", None), "GetStatus": ("a{sv}", ({},)),
           "ListPendingJSON": ("ay s", (b'{"id":"a"}\n{"id":"' + ESC.encode() + b'"}\n', "")),
           "ListPendingPage": ("aa{sv} s", ([{"id": GLib.Variant("s", ESC)}], "")), "SetAppEnabled": ("", None)}
def args(names, direction):
    return "".join('<arg type="%s" direction="%s"/>' % (t, direction) for t in names if t)
xml = '<node><interface name="%s">%s</interface></node>' % (NAME, "".join(
    '<method name="%s">%s%s</method>' % (m, args(ins.get(m, []), "in"), args(out[m][0].split(" "), "out")) for m in out))
def call(conn, sender, path, iface, method, params, inv):
    sig, value = out[method]
    if method == "Submit" and value is None:
        value = (ESC + params.unpack()[0]["id"],) if params.unpack()[0].get("id") == "escape" else ("",)
    inv.return_value(GLib.Variant("(%s)" % sig.replace(" ", ""), value) if sig else None)
flags = Gio.DBusConnectionFlags.AUTHENTICATION_CLIENT | Gio.DBusConnectionFlags.MESSAGE_BUS_CONNECTION
bus = Gio.DBusConnection.new_for_address_sync(address, flags, None, None)
bus.register_object(PATH, Gio.DBusNodeInfo.new_for_xml(xml).interfaces[0], call, None, None)
bus.call_sync("org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus", "RequestName",
              GLib.Variant("(su)", (NAME, 4)), None, Gio.DBusCallFlags.NONE, 10000, None)
print("ready", flush=True)
GLib.MainLoop().run()
"""#

@Suite("bgtask does not trust what answers on bgtaskd's name")
struct ClientTrustTests {
    /// The fake, serving `mode` on `bus` until stopped.
    static func fake(_ mode: String, on bus: PrivateBus, dir: URL) throws -> Child {
        let script = dir.appendingPathComponent("fake-scheduler.py")
        try fakeSchedulerScript.write(to: script, atomically: true, encoding: .utf8)
        let c = try Child("/usr/bin/python3", [script.path, mode, bus.address], environment: Child.environment(["LD_PRELOAD": nil]))
        guard c.line(within: 20) == "ready" else {
            c.stop()
            throw DaemonTestError(message: "the fake scheduler did not start: \(c.stderr)")
        }
        return c
    }

    @Test("a client that does not trust its server: every reply type-checked (exit 70, said), no empty id, escapes shown escaped, pending --json only JSON, and 69 with nothing on stdout without a daemon")
    func clientDoesNotTrustItsServer() throws {
        let p = try PolicyEnv()
        let bus = try PrivateBus()
        let env = p.environment(preload: false, ["DBUS_SESSION_BUS_ADDRESS": bus.address])
        func bgtask(_ args: [String], _ program: String = Child.bgtaskPath) throws -> (Int32, String, String) {
            try Child.run(program, args, environment: env, deadline: 30)
        }
        // No daemon: pending --json as every other command, its JSON message included, and no stray `[`; tasks
        // says the same, and lists the foreground `bgtask run`s (none here) all the same.
        let none = try bgtask(["pending", "--json"])
        let other = try bgtask(["tasks", "--json"])
        let alone = none.2.replacingOccurrences(of: "\",\"exit_status\"", with: "; listed only the foreground `bgtask run`s\",\"exit_status\"")
        #expect(none.0 == 69 && none.1.isEmpty && other.2 == alone && other.0 == 69 && other.1 == "[]\n", "\(none) \(other)")

        let wrongTypes = try Self.fake("types", on: bus, dir: p.dir)
        let everyCall = [["tasks", "--once"], ["tasks", "--json"], ["apps"], ["apps", "list", "--json"], ["cancel", "x"], ["cancel", "--all"],
                         ["debug", "launch", "x"], ["pending"], ["pending", "--json"], ["submit", "--id", "x", "--", "true"],
                         ["apps", "enable", "org.example.app"]]
        for args in everyCall {
            for program in [Child.bgtaskPath, Child.bgtaskCLIPath] where program == Child.bgtaskPath || args[0] == "submit" {
                let r = try bgtask(args, program)
                #expect(r.0 == 70 && r.2.contains(" answered ") && r.2.contains("a bgtaskd of another version, or not bgtaskd?")
                        && r.1.isEmpty, "\(program) \(args): \(r)")
            }
        }
        wrongTypes.stop()

        let wrongValues = try Self.fake("values", on: bus, dir: p.dir)
        defer { wrongValues.stop() }
        for (args, said) in [(["tasks", "--once"], "ListRunning with an item whose"), (["tasks", "--json"], "ListRunning with an item whose"),
                             (["apps"], "ListApps with an item whose"), (["apps", "list", "--json"], "ListApps with an item whose"),
                             (["cancel", "x"], "Cancel with an empty string"), (["submit", "--id", "x", "--", "true"], "Submit with"),
                             (["pending", "--json"], "ListPendingJSON with a line that is not a JSON object (line 2")] {
            let r = try bgtask(args)
            #expect(r.0 == 70 && r.2.contains("bgtaskd answered " + said) && !r.1.contains("\u{1B}") && !r.1.contains("\"t\""), "\(args): \(r)")
        }
        let cli = try bgtask(["submit", "--id", "x", "--", "true"], Child.bgtaskCLIPath)
        #expect(cli.0 == 70 && cli.1.isEmpty && cli.2.contains("bgtaskd answered Submit with an empty string"), "\(cli)")
        // What is right is taken: a count, an empty reply.
        #expect(try bgtask(["cancel", "--all"]) == (0, "cancelled 2 pending request(s)\n", ""))
        #expect(try bgtask(["debug", "launch", "x"]) == (0, "x: launched\n", ""))
        #expect(try bgtask(["apps", "disable", "org.example.app"]) == (0, "org.example.app: background work off\n", ""))
        // An id with escape sequences reaches the terminal escaped, from the front and from the CLI alike.
        let shown = "\\x1b]0;owned\\x07\\x1b[2Jescape\n"
        #expect(try bgtask(["submit", "--id", "escape", "--", "true"]) == (0, shown, ""))
        #expect(try bgtask(["submit", "--id", "escape", "--", "true"], Child.bgtaskCLIPath) == (0, shown, ""))
    }
}
