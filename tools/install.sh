#!/usr/bin/env bash
# Installs vault for the current user: `vault` and `memo` (release build), the documentation, the
# manual page, completions for bash, zsh and fish, and the systemd user units (key rotation when
# due, telemetry delivery, daily backup), pointed at the installed binary.
#
#   tools/install.sh [--prefix DIR] [--binaries DIR] [--units-dir DIR]
#
#   --prefix DIR     where bin/ and share/ go (default ~/.local; completions go where bash-completion,
#                    zsh (add DIR/share/zsh/site-functions to fpath) and fish look under it)
#   --binaries DIR   install `vault` and `memo` from DIR instead of building them (tests use this)
#   --units-dir DIR  where the user units go (default ${XDG_CONFIG_HOME:-~/.config}/systemd/user)
#
# Nothing is enabled: the script prints the systemctl commands that do it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
prefix="$HOME/.local"
binaries=""
units="${XDG_CONFIG_HOME:-$HOME/.config}/systemd/user"
while [ $# -gt 0 ]; do
  case "$1" in
    --prefix) prefix=$2; shift 2 ;;
    --binaries) binaries=$2; shift 2 ;;
    --units-dir) units=$2; shift 2 ;;
    -h | --help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "install.sh: unknown argument '$1' (see --help)" >&2; exit 64 ;;
  esac
done
case "$prefix" in /*) ;; *) prefix="$(pwd)/$prefix" ;; esac

if [ -z "$binaries" ]; then
  (cd "$root" && tools/setup.sh >/dev/null && swift build -c release --product vault >/dev/null &&
    swift build -c release --product memo >/dev/null)
  binaries=$(cd "$root" && swift build -c release --show-bin-path)
fi
for program in vault memo; do
  [ -x "$binaries/$program" ] || { echo "install.sh: no $program in $binaries" >&2; exit 1; }
done

share="$prefix/share"
install -d -m 755 "$prefix/bin" "$share/doc/vault" "$share/man/man1" "$share/bash-completion/completions" \
  "$share/zsh/site-functions" "$share/fish/vendor_completions.d" "$units"
install -m 755 "$binaries/vault" "$binaries/memo" "$prefix/bin/"
install -m 644 "$root/README.md" "$root/SECURITY.md" "$root/docs/INTEGRATING.md" "$share/doc/vault/"
# The manual page and completions come from the installed binary's own declarations.
generate() { # generate FILE ARGUMENTS...: write the output of `vault ARGUMENTS` to FILE, whole or not at all
  local file=$1
  shift
  "$prefix/bin/vault" "$@" >"$file.tmp"
  chmod 644 "$file.tmp"
  mv "$file.tmp" "$file"
}
generate "$share/man/man1/vault.1" help --man
generate "$share/bash-completion/completions/vault" completion bash
generate "$share/zsh/site-functions/_vault" completion zsh
generate "$share/fish/vendor_completions.d/vault.fish" completion fish
# The units name the binary and the documentation by absolute path: point them at this prefix.
for unit in vault-rotate.service vault-rotate.timer vault-telemetry-flush.service vault-telemetry-flush.timer \
  vault-backup.service vault-backup.timer; do
  sed -e "s|/usr/local/bin/vault|$prefix/bin/vault|g" \
    -e "s|file://%h/.local/share/doc/vault/|file://$prefix/share/doc/vault/|g" \
    "$root/tools/systemd/$unit" >"$units/$unit.tmp"
  chmod 644 "$units/$unit.tmp"
  mv "$units/$unit.tmp" "$units/$unit"
done

echo "Installed vault and memo in $prefix/bin, the documentation in $share/doc/vault, the manual"
echo "page in $share/man/man1, completions under $share (bash-completion, zsh/site-functions, fish),"
echo "and the user units in $units. To run them:"
echo "  systemctl --user daemon-reload"
echo "  systemctl --user enable --now vault-rotate.timer"
echo "  systemctl --user enable --now vault-telemetry-flush.timer   # after writing ~/.config/vault/telemetry.env"
echo "  systemctl --user enable --now vault-backup.timer            # after writing ~/.config/vault/backup.env"
