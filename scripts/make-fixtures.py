#!/usr/bin/env python3
"""Turns the real recordings in ../shared/fixtures into umockdev files under
Tests/BgtaskProbesTests/Fixtures. Values are copied as recorded; anything we add
(a device path where the dump had none, a temperature where a log gave only trips,
a default route) is listed in Fixtures/README.md. Run from the repository root:
    python3 scripts/make-fixtures.py ../shared/fixtures
"""
import os
import re
import sys

SRC = sys.argv[1] if len(sys.argv) > 1 else '../shared/fixtures'
OUT = 'Tests/BgtaskProbesTests/Fixtures'


def uevent_props(path):
    """POWER_SUPPLY_* lines of a dump, split into blocks at each POWER_SUPPLY_NAME."""
    blocks, cur = [], None
    for line in open(path, encoding='utf-8', errors='replace'):
        line = line.rstrip('\n')
        m = re.match(r'^(?:.*uevent:)?(POWER_SUPPLY_[A-Z0-9_]+)=(.*)$', line)
        if not m:
            continue
        k, v = m.groups()
        if k == 'POWER_SUPPLY_NAME':
            cur = {}
            blocks.append(cur)
        if cur is not None:
            cur[k] = v
    return blocks


def esc(v):
    return v.replace('\\', '\\\\').replace('\n', '\\n')


def device(devpath, subsystem, attrs, props=None, links=None):
    out = [f'P: {devpath}', f'E: SUBSYSTEM={subsystem}']
    for k, v in (props or {}).items():
        out.append(f'E: {k}={v}')
    for k, v in attrs.items():
        out.append(f'A: {k}={esc(v)}\\n')
    for k, v in (links or {}).items():
        out.append(f'L: {k}={v}')
    return '\n'.join(out) + '\n'


def supply(props, devpath=None, extra_attrs=None):
    """A power_supply from its POWER_SUPPLY_* properties: attributes are the lower-cased keys,
    as the kernel exposes them (sysfs has a file per property)."""
    name = props['POWER_SUPPLY_NAME']
    devpath = devpath or f'/devices/LNXSYSTM:00/LNXSYBUS:00/PNP0C0A:00/power_supply/{name}'
    attrs = {k[len('POWER_SUPPLY_'):].lower(): v for k, v in props.items() if k != 'POWER_SUPPLY_NAME'}
    attrs.update(extra_attrs or {})
    return device(devpath, 'power_supply', attrs, props)


AC_PATH = '/devices/LNXSYSTM:00/LNXSYBUS:00/ACPI0003:00/power_supply/AC'


def ac(online, with_type=True):
    props = {'POWER_SUPPLY_NAME': 'AC', 'POWER_SUPPLY_ONLINE': online}
    if with_type:
        props['POWER_SUPPLY_TYPE'] = 'Mains'
    return supply(props, AC_PATH)


def write(rel, *devices):
    path = os.path.join(OUT, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, 'w') as f:
        f.write('\n'.join(devices))
    print('wrote', path)


def udevadm_supplies(path):
    """power_supply records of a checkbox udevadm dump (P: + E: lines)."""
    recs, cur = [], None
    for line in open(path, encoding='utf-8', errors='replace'):
        line = line.rstrip('\n')
        if line.startswith('P: '):
            cur = {'path': line[3:], 'props': {}}
            recs.append(cur)
        elif line.startswith('E: ') and cur is not None and '=' in line:
            k, v = line[3:].split('=', 1)
            cur['props'][k] = v
    return [r for r in recs if r['props'].get('SUBSYSTEM') == 'power_supply' and 'POWER_SUPPLY_NAME' in r['props']]


def ttar_files(path, prefix):
    """{relative path: content} of the regular files under prefix in a ttar archive."""
    files, lines = {}, open(path, encoding='utf-8', errors='replace').read().split('\n')
    i = 0
    while i < len(lines):
        if lines[i].startswith('Path: ') and i + 1 < len(lines) and lines[i + 1].startswith('Lines: '):
            p, n = lines[i][6:], int(lines[i + 1][7:])
            if p.startswith(prefix):
                files[p[len(prefix):]] = '\n'.join(lines[i + 2:i + 2 + n])
            i += 2 + n
        else:
            i += 1
    return files


U = os.path.join(SRC, 'uevent-dumps')
P = 'power/'

# One battery (and its charger where the dump has one) per file.
for fname, out, extra in [
    ('01-dell-PN1VN08-BAT0-charging-charge_based.uevent', '01-dell-charging-charge-based.umockdev', []),
    ('02-thinkpad-42T4977-BAT0-status_unknown-energy_based.uevent', '02-thinkpad-unknown-energy-based.umockdev', []),
    ('03-dell-xps15-9560-BAT0-discharging-charge_based.uevent', '03-dell-xps15-discharging.umockdev', []),
    ('04-thinkpad-42T4969-BAT1-overfull-status_unknown.uevent', '04-thinkpad-overfull-unknown.umockdev', []),
    ('05-asus-c300-chromebook-BAT0-full.uevent', '05-asus-c300-full.umockdev', []),
    ('06a-brunch-BATC-discharging.uevent', '06a-brunch-discharging.umockdev', []),
    ('06b-brunch-BATC-charging.uevent', '06b-brunch-charging.umockdev', []),
    ('10-toshiba-BAT1-status_unknown-on_ac-full-empty_model.uevent', '10-toshiba-unknown-on-ac.umockdev', [ac('1')]),
    ('12-dell-xps15-BAT1-full-no_power_now.uevent', '12-dell-xps15-full-no-power-now.umockdev', []),
    ('13-pinebook-pro-cw2015-battery-charging.uevent', '13-pinebook-pro-charging.umockdev', []),
    ('14-thinkpad-00HW022-dual_battery-BAT0-attributes.txt', '14-thinkpad-bat0-discharging-low.umockdev', []),
]:
    blocks = uevent_props(os.path.join(U, fname))
    if fname.startswith('14-'):
        # The attribute listing is complete where the uevent is cut off: take energy/capacity from it.
        b = blocks[0]
        b.update({'POWER_SUPPLY_TYPE': 'Battery', 'POWER_SUPPLY_CAPACITY': '9', 'POWER_SUPPLY_CAPACITY_LEVEL': 'Normal',
                  'POWER_SUPPLY_ENERGY_FULL': '25860000', 'POWER_SUPPLY_ENERGY_FULL_DESIGN': '23510000',
                  'POWER_SUPPLY_ENERGY_NOW': '2420000', 'POWER_SUPPLY_MODEL_NAME': '00HW022'})
    devs = [supply(b) for b in blocks]
    write(P + out, *(devs + extra))

# 07: phone with a battery without status and an offline USB charger.
b = uevent_props(os.path.join(U, '07-lg-nexus5-battery-no_status-and-bq24190-charger.uevent'))
write(P + '07-nexus5-no-status-usb-charger-offline.umockdev',
      supply(b[0], '/devices/platform/soc/battery/power_supply/battery'),
      supply(b[1], '/devices/platform/soc/i2c/bq24190/power_supply/bq24190-charger'))

# 08: a mouse is the only battery (a desktop): never the system battery.
b = uevent_props(os.path.join(U, '08-logitech-m560-hidpp_battery_5-capacity_level_only.uevent'))
write(P + '08-mouse-only-capacity-level.umockdev',
      supply(b[0], '/devices/pci0000:00/0000:00:14.0/usb1/1-2/1-2:1.2/0003:046D:C52B.0003/0003:046D:4069.0004/power_supply/hidpp_battery_5'))

# 11 + 14 (composite, two ThinkPads): a dual-battery machine on battery, secondary drained.
b11 = uevent_props(os.path.join(U, '11-thinkpad-45N1041-BAT1-second_battery-empty-critical.uevent'))[0]
b14 = dict(uevent_props(os.path.join(U, '14-thinkpad-00HW022-dual_battery-BAT0-attributes.txt'))[0])
b14.update({'POWER_SUPPLY_TYPE': 'Battery', 'POWER_SUPPLY_CAPACITY': '9', 'POWER_SUPPLY_ENERGY_FULL': '25860000',
            'POWER_SUPPLY_ENERGY_NOW': '2420000'})
write(P + '11-14-dual-battery-secondary-empty.umockdev', supply(b14), supply(b11, '/devices/LNXSYSTM:00/LNXSYBUS:00/PNP0C0A:01/power_supply/BAT1'), ac('0'))

# 19: minimal AC without a type line, no battery.
b = uevent_props(os.path.join(U, '19-AC-mains-uevent-minimal.uevent'))
write(P + '19-ac-minimal-no-type.umockdev', supply(b[0], AC_PATH))

# checkbox: IPU7 laptop (charge limit "Not charging", AC, two ucsi USB-C supplies) and ThinkPad T430s.
for fname, out in [('IPU7_DRIVER.udevadm.txt', 'checkbox-ipu7-not-charging-ucsi.umockdev'),
                   ('LENOVO_T430S.udevadm.txt', 'checkbox-t430s-unknown-on-ac.umockdev')]:
    recs = udevadm_supplies(os.path.join(SRC, 'checkbox-udevadm', fname))
    devs = []
    for r in recs:
        props = {k: v for k, v in r['props'].items() if k.startswith('POWER_SUPPLY_')}
        devs.append(supply(props, r['path']))
    write(P + out, *devs)

# prometheus node_exporter: AC offline, BAT0 discharging with charge thresholds.
files = ttar_files(os.path.join(SRC, 'prometheus/node_exporter-sys-power-thermal-hwmon-net.ttar'), 'sys/class/power_supply/')
devs = []
for name, devpath in [('AC', AC_PATH), ('BAT0', '/devices/LNXSYSTM:00/LNXSYBUS:00/PNP0C0A:00/power_supply/BAT0')]:
    attrs = {k.split('/', 1)[1]: v for k, v in files.items() if k.startswith(name + '/') and not k.endswith('/uevent')}
    props = dict(l.split('=', 1) for l in files[name + '/uevent'].split('\n') if '=' in l)
    devs.append(device(devpath, 'power_supply', attrs, props))
write(P + 'node-exporter-ac-offline-bat0-discharging.umockdev', *devs)
# The same tree's thermal zone too: a whole (assembled) laptop for `umockdev-run ... bgtask status`.
tz = ttar_files(os.path.join(SRC, 'prometheus/node_exporter-sys-power-thermal-hwmon-net.ttar'), 'sys/devices/virtual/thermal/thermal_zone0/')
devs.append(device('/devices/virtual/thermal/thermal_zone0', 'thermal', {k: v for k, v in tz.items()}))
write('laptop-node-exporter.umockdev', *devs)

# UPower's own recording of a USB headset battery (scope Device) is kept as UPower wrote it.
print('copy upower/usb-headset.device by hand: it is already a umockdev file')

# ---------------------------------------------------------------- thermal
def zone(n, ztype, temp, trips=(), extra=None):
    attrs = {'type': ztype}
    if temp is not None:
        attrs['temp'] = str(temp)
    for i, t in enumerate(trips):
        attrs[f'trip_point_{i}_type'] = t[0]
        attrs[f'trip_point_{i}_temp'] = str(t[1])
        if len(t) > 2:
            attrs[f'trip_point_{i}_hyst'] = str(t[2])
    attrs.update(extra or {})
    return device(f'/devices/virtual/thermal/thermal_zone{n}', 'thermal', attrs)


T = 'thermal/'
# thermald #231: trip tables as logged; temperatures are ours (the log has none).
write(T + 'thermald-231-skylake-trips.umockdev',
      zone(5, 'SEN1', 48000, [('critical', 126050, 2000), ('hot', 96050, 2000), ('passive', 85050, 2000), ('active', 85050, 2000)]),
      zone(8, 'pch_skylake', 52000, [('critical', 115000)]),
      zone(11, 'iwlwifi_1', 40000, [('passive', -32768000), ('passive', -32768000), ('passive', -32768000)]))
# thermald #250: the zone set of a Cannon Lake laptop; INT3400 (DPTF) has no temperature to read.
write(T + 'thermald-250-cannonlake-zones.umockdev',
      zone(0, 'acpitz', 27800, [('critical', 119000)]), zone(1, 'SEN1', 45000), zone(2, 'pch_cannonlake', 61000),
      zone(3, 'INT3400', None), zone(4, 'B0D4', 45000), zone(5, 'x86_pkg_temp', 45000), zone(6, 'iwlwifi_1', 49000))
# Raspberry Pi 4 with a fan overlay: one active trip, recorded at 74.01 °C.
write(T + 'rpi4-active-trip-fan.umockdev', zone(0, 'cpu-thermal', 74010, [('active', 70000, 10000)]))
# Lenovo Z500 (acpi -V): 54 °C, critical and hot both at 127 °C.
write(T + 'lenovo-z500-acpitz.umockdev', zone(0, 'acpitz', 54000, [('critical', 127000), ('hot', 127000)]))
# prometheus/procfs: bcm2835 with no trips, and an acpitz reading -44 °C.
write(T + 'procfs-bcm2835-and-negative-acpitz.umockdev',
      zone(0, 'bcm2835_thermal', 49925), zone(1, 'acpitz', -44000, extra={'passive': '0', 'mode': 'enabled'}))
# lm-sensors #300: desktop firmware with a critical trip at 20.8 °C while reading 16.8 °C.
write(T + 'lm-sensors-desktop-acpitz-absurd-crit.umockdev', zone(0, 'acpitz', 16800, [('critical', 20800)]))

# ---------------------------------------------------------------- network
def link(name, devpath, operstate, carrier, devtype=None, arphrd='1'):
    props = {'INTERFACE': name}
    if devtype:
        props['DEVTYPE'] = devtype
    attrs = {'operstate': operstate, 'type': arphrd}
    if carrier is not None:
        attrs['carrier'] = carrier
    return device(devpath, 'net', attrs, props)


def routes(name, v4):
    d = os.path.join(OUT, 'network', name + '.proc', 'net')
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, 'route'), 'w') as f:
        f.write('Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n')
        for iface, metric in v4:
            f.write(f'{iface}\t00000000\t0100A8C0\t0003\t0\t0\t{metric}\t00000000\t0\t0\t0\n')
    open(os.path.join(d, 'ipv6_route'), 'w').close()
    print('wrote routes', d)


N = 'network/'
# qmi_setup #2 (`ip link`): wwan UNKNOWN+LOWER_UP, onboard eth NO-CARRIER, wlan DORMANT, USB eth UP.
ip_link = [
    link('lo', '/devices/virtual/net/lo', 'unknown', '1', arphrd='772'),
    link('wwp0s20f0u2i1', '/devices/pci0000:00/0000:00:14.0/usb2/2-2/2-2:1.12/net/wwp0s20f0u2i1', 'unknown', '1', 'wwan'),
    link('enp0s31f6', '/devices/pci0000:00/0000:00:1f.6/net/enp0s31f6', 'down', '0'),
    link('wlp9s0', '/devices/pci0000:00/0000:00:1c.0/0000:09:00.0/net/wlp9s0', 'dormant', '1', 'wlan'),
    link('enp0s13f0u2u4', '/devices/pci0000:00/0000:00:0d.0/usb2/2-2/2-2.4/2-2.4:1.0/net/enp0s13f0u2u4', 'up', '1'),
]
write(N + 'qmi-four-links.umockdev', *ip_link)
routes('qmi-wwan-default', [('wwp0s20f0u2i1', 700)])
routes('qmi-usb-eth-and-wwan', [('wwp0s20f0u2i1', 700), ('enp0s13f0u2u4', 100)])
routes('qmi-dormant-wifi-only', [('wlp9s0', 600)])
# i3blocks #326: a USB modem whose operstate stays "unknown"; carrier 1 as `ip link` shows LOWER_UP for such links.
write(N + 'i3blocks-wwan-operstate-unknown.umockdev',
      link('wwp0s20f0u6i12', '/devices/pci0000:00/0000:00:14.0/usb1/1-6/1-6:1.12/net/wwp0s20f0u6i12', 'unknown', '1', 'wwan'))
routes('i3blocks-wwan-default', [('wwp0s20f0u6i12', 0)])
