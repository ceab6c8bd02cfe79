#!/usr/bin/python3
"""Records a condition trace from a umockdev laptop with `bgtask watch --record`, in real time:
on AC → charger unplugged → temperature rising past the passive trip → cooling → charger back,
with a wobble (plugged, unplugged 5 s later, plugged for good). The result is the fixture
Tests/BgtaskPolicyTests/Traces/charger-heat-charger.jsonl used by `bgtask policy simulate` tests.
    /usr/bin/python3 scripts/record-trace.py .build/debug/bgtask OUT.jsonl
"""
import os
import subprocess
import sys
import time

import gi
gi.require_version('UMockdev', '1.0')
from gi.repository import UMockdev

bgtask, out = sys.argv[1], sys.argv[2]
if os.path.exists(out):
    os.unlink(out)
tb = UMockdev.Testbed.new()
ac = tb.add_device('power_supply', 'AC', None, ['type', 'Mains', 'online', '1'], ['POWER_SUPPLY_ONLINE', '1'])
bat = tb.add_device('power_supply', 'BAT0', None,
                    ['type', 'Battery', 'present', '1', 'status', 'Charging', 'energy_now', '48000000',
                     'energy_full', '60000000', 'power_now', '12000000', 'voltage_now', '12000000'], [])
tz = tb.add_device('thermal', 'thermal_zone0', None,
                   ['type', 'x86_pkg_temp', 'temp', '52000', 'trip_point_0_type', 'passive', 'trip_point_0_temp', '85000',
                    'trip_point_1_type', 'critical', 'trip_point_1_temp', '100000'], [])
env = dict(os.environ, LD_PRELOAD='libumockdev-preload.so.0', UMOCKDEV_DIR=tb.get_root_dir())
watch = subprocess.Popen([bgtask, 'watch', '--no-dbus', '--thermal-interval', '1', '--record', out],
                         env=env, stdout=subprocess.PIPE, text=True)
watch.stdout.readline()   # the first line: the watcher is up


def plug(online, status, energy=None):
    tb.set_attribute(ac, 'online', '1' if online else '0')
    tb.set_property(ac, 'POWER_SUPPLY_ONLINE', '1' if online else '0')
    tb.set_attribute(bat, 'status', status)
    if energy:
        tb.set_attribute(bat, 'energy_now', str(energy))
    tb.uevent(ac, 'change')
    tb.uevent(bat, 'change')


steps = [
    (15, lambda: plug(False, 'Discharging')),                        # unplugged
    (15, lambda: tb.set_attribute(tz, 'temp', '77000')),            # warm: fair (75 °C = 85 − 10)
    (20, lambda: tb.set_attribute(tz, 'temp', '88000')),            # hot: serious (passive 85 °C)
    (15, lambda: plug(False, 'Discharging', 42000000)),             # battery draining
    (20, lambda: tb.set_attribute(tz, 'temp', '66000')),            # cooled: nominal
    (15, lambda: plug(True, 'Charging')),                            # charger back ...
    (5, lambda: plug(False, 'Discharging')),                         # ... wobbles out
    (5, lambda: plug(True, 'Charging')),                             # ... and in for good
    (40, lambda: None),
]
for wait, action in steps:
    time.sleep(wait)   # a recording in real time: the waits are the point
    action()
watch.terminate()
watch.wait()
print(open(out).read().count('\n'), 'lines in', out)
