/// The scheduler's D-Bus interface, as exported (a test checks `data/io.github.bgtask.Scheduler1.xml` equals it).
public enum SchedulerInterface {
    public static let xml = """
    <!DOCTYPE node PUBLIC "-//freedesktop//DTD D-BUS Object Introspection 1.0//EN"
     "http://www.freedesktop.org/standards/dbus/1.0/introspect.dtd">
    <!-- bgtaskd: the per-user background task scheduler. Documented in docs/protocol.md. -->
    <node>
      <interface name="io.github.bgtask.Scheduler1">
        <!-- Queues a command; returns its identifier. A request with the same identifier that has not
             started yet is replaced. -->
        <method name="Submit">
          <arg name="options" type="a{sv}" direction="in"/>
          <arg name="command" type="as" direction="in"/>
          <arg name="id" type="s" direction="out"/>
        </method>
        <!-- Removes a pending request; expires a running task (SIGTERM, grace, SIGKILL). Returns what was done. -->
        <method name="Cancel">
          <arg name="id" type="s" direction="in"/>
          <arg name="done" type="s" direction="out"/>
        </method>
        <!-- Removes every pending request of the caller; returns how many. -->
        <method name="CancelAll">
          <arg name="count" type="u" direction="out"/>
        </method>
        <!-- What waits, each with why (the rule and its file:line) and when it could next run. -->
        <method name="ListPending">
          <arg name="tasks" type="aa{sv}" direction="out"/>
        </method>
        <!-- What runs now: state, cap, runtime, budget left. -->
        <method name="ListRunning">
          <arg name="tasks" type="aa{sv}" direction="out"/>
        </method>
        <!-- Starts a pending task now, whatever the conditions (recorded as such). -->
        <method name="DebugLaunch">
          <arg name="id" type="s" direction="in"/>
        </method>
        <!-- Sends a running task its expiration now (recorded as such). -->
        <method name="DebugExpire">
          <arg name="id" type="s" direction="in"/>
        </method>
        <!-- The daemon itself: version, pid, counts, and a warning when a policy file is broken. -->
        <method name="GetStatus">
          <arg name="status" type="a{sv}" direction="out"/>
        </method>
        <!-- Reads the policy layers again now (bgtaskd also does on SIGHUP and when a file changes): whether they
             loaded, and what changed (rules added, removed, changed; settings), or why the last good policy stays. -->
        <method name="ReloadPolicy">
          <arg name="loaded" type="b" direction="out"/>
          <arg name="said" type="s" direction="out"/>
        </method>
        <!-- The conditions iOS code reads through ProcessInfo: thermal_state (nominal, fair, serious, critical) and
             low_power_mode (power-profiles-daemon's power-saver); a key is absent while bgtask cannot read it. -->
        <method name="GetConditions">
          <arg name="conditions" type="a{sv}" direction="out"/>
        </method>
        <!-- Whether continued tasks may ask for a GPU here (a usable DRM render node): ["gpu"] or []. -->
        <method name="GetSupportedResources">
          <arg name="resources" type="as" direction="out"/>
        </method>
        <!-- The app manifests bgtaskd knows, each with whether the user has its background work on; a
             manifest that does not load appears as {"error": "file:line: message"}. -->
        <method name="ListApps">
          <arg name="apps" type="aa{sv}" direction="out"/>
        </method>
        <!-- The user's switch for an app's background work (Background App Refresh). Off cancels its pending work. -->
        <method name="SetAppEnabled">
          <arg name="app_id" type="s" direction="in"/>
          <arg name="enabled" type="b" direction="in"/>
        </method>
        <!-- For apps (the BackgroundTasks library). The app id is checked: a Flatpak app's comes from its
             sandbox; any other must have a manifest. -->
        <method name="AppRegister">
          <arg name="app_id" type="s" direction="in"/>
          <arg name="identifier" type="s" direction="in"/>
        </method>
        <method name="AppReady">
          <arg name="app_id" type="s" direction="in"/>
        </method>
        <method name="AppSubmit">
          <arg name="app_id" type="s" direction="in"/>
          <arg name="request" type="a{sv}" direction="in"/>
        </method>
        <method name="AppCancel">
          <arg name="app_id" type="s" direction="in"/>
          <arg name="identifier" type="s" direction="in"/>
        </method>
        <method name="AppCancelAll">
          <arg name="app_id" type="s" direction="in"/>
        </method>
        <method name="AppPending">
          <arg name="app_id" type="s" direction="in"/>
          <arg name="tasks" type="aa{sv}" direction="out"/>
        </method>
        <!-- A launch received: its handler runs now (handled true), or the app has none for it (the reason). An app
             that leaves the bus before saying "handled" is launched again for the task: nothing is lost. -->
        <method name="AppLaunchReceived">
          <arg name="app_id" type="s" direction="in"/>
          <arg name="identifier" type="s" direction="in"/>
          <arg name="handled" type="b" direction="in"/>
          <arg name="reason" type="s" direction="in"/>
        </method>
        <method name="AppComplete">
          <arg name="app_id" type="s" direction="in"/>
          <arg name="identifier" type="s" direction="in"/>
          <arg name="success" type="b" direction="in"/>
        </method>
        <method name="AppProgress">
          <arg name="app_id" type="s" direction="in"/>
          <arg name="identifier" type="s" direction="in"/>
          <arg name="completed" type="t" direction="in"/>
          <arg name="total" type="t" direction="in"/>
        </method>
        <method name="AppUpdateTitle">
          <arg name="app_id" type="s" direction="in"/>
          <arg name="identifier" type="s" direction="in"/>
          <arg name="title" type="s" direction="in"/>
          <arg name="subtitle" type="s" direction="in"/>
        </method>
        <!-- To one app: run the launch handler of this task (kind: refresh, processing, continued). -->
        <signal name="Launch">
          <arg name="app_id" type="s"/>
          <arg name="identifier" type="s"/>
          <arg name="kind" type="s"/>
        </signal>
        <!-- To one app: run the task's expiration handler; complete it within the grace. -->
        <signal name="Expire">
          <arg name="app_id" type="s"/>
          <arg name="identifier" type="s"/>
          <arg name="reason" type="s"/>
        </signal>
        <!-- A continued task's progress, for whoever shows it. -->
        <signal name="TaskProgress">
          <arg name="id" type="s"/>
          <arg name="completed" type="t"/>
          <arg name="total" type="t"/>
        </signal>
        <!-- Those conditions changed (to every client): what ProcessInfo's change notifications are posted from. -->
        <signal name="ConditionsChanged">
          <arg name="conditions" type="a{sv}"/>
        </signal>
        <!-- A task changed state: pending, running, throttled, paused, expiring, finished, cancelled. -->
        <signal name="TaskChanged">
          <arg name="id" type="s"/>
          <arg name="state" type="s"/>
        </signal>
      </interface>
    </node>

    """
}
