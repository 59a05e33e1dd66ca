#!/usr/bin/env bash
# Runs a command with a private, unlocked Secret Service: call it inside `dbus-run-session`.
#
#   dbus-run-session -- tools/with-secret-service.sh swift test
#
# gnome-keyring-daemon is started headless (no DISPLAY) with a throwaway XDG_RUNTIME_DIR and
# XDG_DATA_HOME, and its login collection is created and unlocked with a throwaway password.
# The password is exported as VAULT_TEST_KEYRING_PASSWORD so tests that lock the collection can
# unlock it again (by replacing the daemon with the same password).
set -euo pipefail

if [ -z "${DBUS_SESSION_BUS_ADDRESS:-}" ]; then
  echo "with-secret-service.sh: no D-Bus session; run it under dbus-run-session" >&2
  exit 2
fi

scratch=$(mktemp -d /tmp/vault-keyring.XXXXXX)
export XDG_RUNTIME_DIR="$scratch/runtime" XDG_DATA_HOME="$scratch/data"
mkdir -p "$XDG_RUNTIME_DIR" "$XDG_DATA_HOME"
chmod 700 "$XDG_RUNTIME_DIR"
unset DISPLAY WAYLAND_DISPLAY
password="test-$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')"
export VAULT_TEST_KEYRING_PASSWORD="$password"

printf '%s' "$password" | gnome-keyring-daemon --daemonize --unlock --components=secrets >/dev/null
# Wait until the daemon owns the bus name and the login collection is unlocked. The name is asked
# for with NameHasOwner first: a call addressed to org.freedesktop.secrets before the daemon owns
# it would make D-Bus activate a second gnome-keyring, locked, and the wait would fail (seen on a
# loaded machine). Up to 30 s.
for _ in $(seq 1 300); do
  if gdbus call --session --dest org.freedesktop.DBus --object-path /org/freedesktop/DBus \
    --method org.freedesktop.DBus.NameHasOwner org.freedesktop.secrets 2>/dev/null | grep -q true &&
    gdbus introspect --session --dest org.freedesktop.secrets \
      --object-path /org/freedesktop/secrets/collection/login --only-properties 2>/dev/null |
    grep -q 'Locked = false'; then
    ready=1
    break
  fi
  sleep 0.1
done
if [ -z "${ready:-}" ]; then
  echo "with-secret-service.sh: gnome-keyring did not come up unlocked" >&2
  exit 2
fi
export VAULT_SECRET_SERVICE_READY=1

status=0
"$@" || status=$?
# Stop only this run's daemon (the one whose XDG_RUNTIME_DIR is ours): other runs on the same
# machine, as the same user, keep theirs.
for pid in $(pgrep -u "$(id -u)" -f "gnome-keyring-daemon" 2>/dev/null); do
  if tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "XDG_RUNTIME_DIR=$XDG_RUNTIME_DIR"; then
    kill "$pid" 2>/dev/null || true
  fi
done
rm -rf "$scratch"
exit "$status"
