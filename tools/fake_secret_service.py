#!/usr/bin/python3
"""A Secret Service provider that misbehaves, on a D-Bus session bus of its own, for tests.

    fake_secret_service.py MODE -- COMMAND [ARGUMENT...]

Starts a private dbus-daemon (no service directories, so nothing is ever activated), a provider
that owns org.freedesktop.secrets and answers what libsecret asks when it connects (the service's
properties, a `plain` session), and runs COMMAND against that bus. At the first SearchItems the
provider does what MODE says:

    die            exits without answering: the bus answers the caller with
                   org.freedesktop.DBus.Error.NoReply, as for a keyring daemon that crashed
                   mid-call
    hang           never answers, as a stopped or deadlocked daemon
    hang-secrets   answers with one unlocked item, then never answers GetSecrets (the transfer
                   of its secret), as a daemon stopped between a search and its secrets

COMMAND's standard streams are this script's; it exits with COMMAND's status. Needs python3-gi
(Debian's /usr/bin/python3).
"""

import os
import signal
import subprocess
import sys
import tempfile
import time

from gi.repository import Gio, GLib

BUS_CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "private-bus.conf")

# The part of org.freedesktop.Secret.Service that a connection and a search use (the Secret
# Service API specification, https://specifications.freedesktop.org/secret-service/).
INTERFACE = """<node>
  <interface name="org.freedesktop.Secret.Service">
    <method name="OpenSession">
      <arg name="algorithm" type="s" direction="in"/>
      <arg name="input" type="v" direction="in"/>
      <arg name="output" type="v" direction="out"/>
      <arg name="result" type="o" direction="out"/>
    </method>
    <method name="SearchItems">
      <arg name="attributes" type="a{ss}" direction="in"/>
      <arg name="unlocked" type="ao" direction="out"/>
      <arg name="locked" type="ao" direction="out"/>
    </method>
    <method name="GetSecrets">
      <arg name="items" type="ao" direction="in"/>
      <arg name="session" type="o" direction="in"/>
      <arg name="secrets" type="a{o(oayays)}" direction="out"/>
    </method>
    <property name="Collections" type="ao" access="read"/>
  </interface>
</node>"""

ITEM = "/org/freedesktop/secrets/collection/login/1"
ITEM_INTERFACE = """<node>
  <interface name="org.freedesktop.Secret.Item">
    <property name="Locked" type="b" access="read"/>
    <property name="Attributes" type="a{ss}" access="read"/>
    <property name="Label" type="s" access="read"/>
    <property name="Created" type="t" access="read"/>
    <property name="Modified" type="t" access="read"/>
  </interface>
</node>"""
ITEM_PROPERTIES = {
    "Locked": GLib.Variant("b", False),
    "Attributes": GLib.Variant("a{ss}", {}),
    "Label": GLib.Variant("s", "fake"),
    "Created": GLib.Variant("t", 0),
    "Modified": GLib.Variant("t", 0),
}


def provide(mode):
    """Runs the provider until killed (or until `die` exits it)."""
    bus = Gio.bus_get_sync(Gio.BusType.SESSION, None)
    node = Gio.DBusNodeInfo.new_for_xml(INTERFACE)
    unanswered = []

    def call(connection, sender, path, interface, method, parameters, invocation):
        if method == "OpenSession":
            if parameters.unpack()[0] != "plain":
                invocation.return_dbus_error("org.freedesktop.DBus.Error.NotSupported", "plain only")
                return
            invocation.return_value(GLib.Variant("(vo)", (GLib.Variant("s", ""), "/org/freedesktop/secrets/session/1")))
        elif method == "SearchItems":
            if mode == "die":
                os._exit(0)
            if mode == "hang-secrets":
                invocation.return_value(GLib.Variant("(aoao)", ([ITEM], [])))
                return
            unanswered.append(invocation)  # kept, so it is never answered or freed
        elif method == "GetSecrets":
            unanswered.append(invocation)

    def read(connection, sender, path, interface, name):
        return GLib.Variant("ao", [])

    bus.register_object("/org/freedesktop/secrets", node.interfaces[0], call, read, None)
    bus.register_object(
        ITEM, Gio.DBusNodeInfo.new_for_xml(ITEM_INTERFACE).interfaces[0], None,
        lambda connection, sender, path, interface, name: ITEM_PROPERTIES[name], None)
    owned = bus.call_sync(
        "org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus", "RequestName",
        GLib.Variant("(su)", ("org.freedesktop.secrets", 4)), GLib.VariantType("(u)"),
        Gio.DBusCallFlags.NONE, -1, None)
    if owned.unpack()[0] != 1:
        os._exit(3)
    GLib.MainLoop().run()


def owned(address):
    bus = Gio.DBusConnection.new_for_address_sync(
        address, Gio.DBusConnectionFlags.AUTHENTICATION_CLIENT | Gio.DBusConnectionFlags.MESSAGE_BUS_CONNECTION,
        None, None)
    reply = bus.call_sync(
        "org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus", "NameHasOwner",
        GLib.Variant("(s)", ("org.freedesktop.secrets",)), GLib.VariantType("(b)"),
        Gio.DBusCallFlags.NONE, -1, None)
    bus.close_sync(None)
    return reply.unpack()[0]


def main():
    if len(sys.argv) < 4 or sys.argv[1] not in ("die", "hang", "hang-secrets") or sys.argv[2] != "--":
        sys.stderr.write("usage: fake_secret_service.py die|hang|hang-secrets -- COMMAND [ARGUMENT...]\n")
        return 64
    mode, command = sys.argv[1], sys.argv[3:]
    with tempfile.TemporaryDirectory(prefix="fake-secret-service.") as scratch:
        config = os.path.join(scratch, "bus.conf")
        with open(BUS_CONFIG) as template, open(config, "w") as file:
            file.write(template.read().replace("@ADDRESS@", "unix:dir=" + scratch))
        daemon = subprocess.Popen(
            ["dbus-daemon", "--config-file=" + config, "--nofork", "--print-address=1"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        provider = None
        try:
            address = daemon.stdout.readline().strip()
            if not address:
                sys.stderr.write("fake_secret_service.py: dbus-daemon did not start\n")
                return 2
            os.environ["DBUS_SESSION_BUS_ADDRESS"] = address
            provider = os.fork()
            if provider == 0:
                try:
                    provide(mode)
                finally:
                    os._exit(4)
            for _ in range(100):
                if owned(address):
                    break
                time.sleep(0.05)
            else:
                sys.stderr.write("fake_secret_service.py: the provider did not take its name\n")
                return 2
            return subprocess.run(command).returncode
        finally:
            if provider:
                try:
                    os.kill(provider, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                os.waitpid(provider, 0)
            daemon.kill()
            daemon.wait()


if __name__ == "__main__":
    sys.exit(main())
