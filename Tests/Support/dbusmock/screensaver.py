'''org.freedesktop.ScreenSaver as KDE serves it on the session bus: GetActive, GetSessionIdleTime (seconds since
the last input) and ActiveChanged(b). Test controls on the mock interface: SetActive(b), SetIdleSeconds(u).
'''
import time

import dbus

from dbusmock import mockobject

BUS_NAME = 'org.freedesktop.ScreenSaver'
MAIN_OBJ = '/ScreenSaver'
MAIN_IFACE = 'org.freedesktop.ScreenSaver'
SYSTEM_BUS = False

state = {'active': False, 'last_input': time.monotonic()}


def load(mock, parameters):
    mock.AddMethods(MAIN_IFACE, [
        ('GetActive', '', 'b', 'ret = self.saver_active()'),
        ('GetSessionIdleTime', '', 'u', 'ret = dbus.UInt32(self.saver_idle())'),
        ('SetActive', 'b', 'b', 'ret = False'),
        ('Inhibit', 'ss', 'u', 'ret = dbus.UInt32(1)'),
        ('UnInhibit', 'u', '', ''),
    ])
    mock.saver_active = lambda: state['active']
    mock.saver_idle = lambda: int(time.monotonic() - state['last_input'])


@dbus.service.method(mockobject.MOCK_IFACE, in_signature='b', out_signature='')
def SetLocked(self, active):
    state['active'] = bool(active)
    self.EmitSignal(MAIN_IFACE, 'ActiveChanged', 'b', [dbus.Boolean(active)])


@dbus.service.method(mockobject.MOCK_IFACE, in_signature='u', out_signature='')
def SetIdleSeconds(self, seconds):
    state['last_input'] = time.monotonic() - seconds
