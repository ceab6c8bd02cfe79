#if canImport(Glibc)
@preconcurrency import Glibc
#endif
import CUdev

/// The libudev context. libudev objects are not thread-safe: each thread that needs one makes its own.
final class Udev {
    let handle: OpaquePointer

    init?() {
        guard let h = udev_new() else { return nil }
        handle = h
    }
    deinit { udev_unref(handle) }

    func syspaths(subsystem: String) -> [String] {
        guard let en = udev_enumerate_new(handle) else { return [] }
        defer { udev_enumerate_unref(en) }
        udev_enumerate_add_match_subsystem(en, subsystem)
        udev_enumerate_scan_devices(en)
        var paths: [String] = []
        var entry = udev_enumerate_get_list_entry(en)
        while let e = entry {
            paths.append(String(cString: udev_list_entry_get_name(e)))
            entry = udev_list_entry_get_next(e)
        }
        return paths.sorted()
    }
}

/// A uevent as delivered by the udev netlink monitor.
public struct DeviceEvent: Sendable, Equatable {
    public var action: String
    public var subsystem: String
    public var name: String
    public var path: String
}

/// udev's netlink monitor ("udev" group: events after udevd processed them; umockdev's preload
/// fakes this socket for testbeds). The fd is non-blocking and meant for poll().
final class UdevMonitor {
    let udev: Udev
    let handle: OpaquePointer
    let fd: Int32

    init?(subsystems: [String]) {
        guard let udev = Udev(), let m = udev_monitor_new_from_netlink(udev.handle, "udev") else { return nil }
        for s in subsystems { udev_monitor_filter_add_match_subsystem_devtype(m, s, nil) }
        guard udev_monitor_enable_receiving(m) >= 0 else { udev_monitor_unref(m); return nil }
        self.udev = udev
        self.handle = m
        self.fd = udev_monitor_get_fd(m)
    }
    deinit { udev_monitor_unref(handle) }

    /// Drains every queued event without blocking. `overflow`: the kernel dropped events (ENOBUFS) because
    /// the socket's buffer filled, so some changes were never seen and everything must be read again.
    func receiveAll() -> (events: [DeviceEvent], overflow: Bool) {
        var events: [DeviceEvent] = []
        var overflow = false
        while true {
            errno = 0
            guard let dev = udev_monitor_receive_device(handle) else {
                // The error is reported once; what was queued after it can still be read.
                if errno == ENOBUFS && !overflow { overflow = true; continue }
                break
            }
            defer { udev_device_unref(dev) }
            func s(_ p: UnsafePointer<CChar>?) -> String { p.map { String(cString: $0) } ?? "" }
            events.append(DeviceEvent(action: s(udev_device_get_action(dev)),
                                      subsystem: s(udev_device_get_subsystem(dev)),
                                      name: s(udev_device_get_sysname(dev)),
                                      path: s(udev_device_get_syspath(dev))))
        }
        return (events, overflow)
    }
}
