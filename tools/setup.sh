#!/usr/bin/env bash
# Installs what vault needs to build, test and run its demo, when it is missing:
# Debian's C libraries and headers, gnome-keyring and D-Bus for a real Secret Service,
# Python's `cryptography` for the independent envelope implementation, and zsh, fish and
# groff to check the generated completions and manual page, strace for the tests that kill
# a command at each of its system calls of a kind, and python3-gi for a misbehaving Secret
# Service provider (tools/fake_secret_service.py).
# Safe to run again; it installs nothing that is already there.
set -euo pipefail

packages=(
  libssl-dev libsqlite3-dev zlib1g-dev liblzma-dev libbz2-dev libzstd-dev libcurl4-openssl-dev pkg-config libsecret-1-dev
  gnome-keyring dbus libglib2.0-bin libsecret-tools openssl procps python3 python3-gi strace
  zsh fish groff-base
)
missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}" >&2
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -q >/dev/null
  $sudo apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
fi

# Python `cryptography` for tools/interop: use the system's if it has it, else a venv under .build.
root=$(cd "$(dirname "$0")/.." && pwd)
if ! python3 -c 'import cryptography' 2>/dev/null; then
  venv="$root/.build/pyvenv"
  if [ ! -x "$venv/bin/python3" ] || ! "$venv/bin/python3" -c 'import cryptography' 2>/dev/null; then
    echo "setup: installing Python cryptography into $venv" >&2
    python3 -m venv "$venv" 2>/dev/null || {
      [ "$(id -u)" -eq 0 ] && apt-get install -y -q python3-venv >/dev/null
      python3 -m venv "$venv"
    }
    "$venv/bin/pip" install -q cryptography
  fi
fi

if ! command -v swift >/dev/null; then
  echo "setup: no Swift toolchain on PATH (Swift 6.2 or later is required)" >&2
  exit 2
fi
