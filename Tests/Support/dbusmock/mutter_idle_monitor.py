'''GNOME Mutter's idle monitor (org.gnome.Mutter.IdleMonitor), as gnome-shell serves it on the session bus.

Idle time runs on CLOCK_MONOTONIC from the last input. Idle watches fire each time the idle time reaches
their interval; a user-active watch fires once, at the next input, and is then removed (as in Mutter).
Test controls on the mock interface: Input() (the person touches the machine) and SetIdletime(t ms).
'''
import time

import dbus
from gi.repository import GLib

from dbusmock import mockobject

BUS_NAME = 'org.gnome.Mutter.IdleMonitor'
MAIN_OBJ = '/org/gnome/Mutter/IdleMonitor/Core'
MAIN_IFACE = 'org.gnome.Mutter.IdleMonitor'
SYSTEM_BUS = False

state = {'last_input': time.monotonic(), 'next_id': 1, 'idle': {}, 'active': set(), 'timers': {}}


def idletime_ms():
    return int((time.monotonic() - state['last_input']) * 1000)


def fire(obj, watch_id):
    obj.EmitSignal(MAIN_IFACE, 'WatchFired', 'u', [dbus.UInt32(watch_id)])


def arm(obj, watch_id):
    '''A timer for an idle watch, at the instant the idle time reaches its interval.'''
    old = state['timers'].pop(watch_id, None)
    if old:
        GLib.source_remove(old)
    interval = state['idle'][watch_id]
    left = interval - idletime_ms()
    if left < 0:
        return

    def due():
        state['timers'].pop(watch_id, None)
        if watch_id in state['idle']:
            fire(obj, watch_id)
        return False
    state['timers'][watch_id] = GLib.timeout_add(max(0, left), due)


def load(mock, parameters):
    mock.AddMethods(MAIN_IFACE, [
        ('GetIdletime', '', 't', 'ret = dbus.UInt64(self.mutter_idletime())'),
        ('AddIdleWatch', 't', 'u', 'ret = dbus.UInt32(self.mutter_add_idle(args[0]))'),
        ('AddUserActiveWatch', '', 'u', 'ret = dbus.UInt32(self.mutter_add_active())'),
        ('RemoveWatch', 'u', '', 'self.mutter_remove(args[0])'),
    ])
    mock.mutter_idletime = idletime_ms

    def add_idle(interval):
        i = state['next_id']
        state['next_id'] += 1
        state['idle'][i] = int(interval)
        arm(mock, i)
        return i

    def add_active():
        i = state['next_id']
        state['next_id'] += 1
        state['active'].add(i)
        return i

    def remove(i):
        state['idle'].pop(i, None)
        state['active'].discard(i)
        t = state['timers'].pop(i, None)
        if t:
            GLib.source_remove(t)
    mock.mutter_add_idle = add_idle
    mock.mutter_add_active = add_active
    mock.mutter_remove = remove


@dbus.service.method(mockobject.MOCK_IFACE, in_signature='', out_signature='')
def Input(self):
    '''The person moved the mouse: user-active watches fire (once), idle watches start counting again.'''
    state['last_input'] = time.monotonic()
    for i in sorted(state['active']):
        fire(self, i)
    state['active'].clear()
    for i in list(state['idle']):
        arm(self, i)


@dbus.service.method(mockobject.MOCK_IFACE, in_signature='t', out_signature='')
def SetIdletime(self, ms):
    '''As if the last input was `ms` ago; idle watches whose interval has passed fire now.'''
    state['last_input'] = time.monotonic() - ms / 1000.0
    for i in list(state['idle']):
        if state['idle'][i] <= ms:
            t = state['timers'].pop(i, None)
            if t:
                GLib.source_remove(t)
            fire(self, i)
        else:
            arm(self, i)
