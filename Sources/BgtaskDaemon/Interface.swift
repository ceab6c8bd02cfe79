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
        <!-- A task changed state: pending, running, throttled, paused, expiring, finished, cancelled. -->
        <signal name="TaskChanged">
          <arg name="id" type="s"/>
          <arg name="state" type="s"/>
        </signal>
      </interface>
    </node>

    """
}
