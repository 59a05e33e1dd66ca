#!/usr/bin/env bash
# Backup, restore and merge of a vault with a full 20 MB queue, beside `cp` of the same files, in
# one run; and the passphrase derivation's cost on its own (scrypt N=2^17 r=8 p=1 through OpenSSL).
#
#   tools/bench-backup.sh [RECORD_KIB]     (default 64: 64 KiB random records until the 20 MB cap)
#
# VAULT_BINARY=PATH uses that binary instead of building a release one.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
record_kib=${1:-64}

if [ -n "${VAULT_BINARY:-}" ]; then
  vault=$VAULT_BINARY
else
  tools/setup.sh >/dev/null
  swift build -c release --product vault 2>&1 | grep -v "prohibited flag" | tail -1
  vault="$(swift build -c release --show-bin-path)/vault"
fi
work=$(mktemp -d /tmp/vault-backup-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT
home=$work/home
"$vault" --home "$home" init --store keyfile --keyfile "$work/keys/v.keys" >/dev/null 2>&1

# Fill the default container to its 20 MB cap (the oldest records are dropped beyond it).
count=$(((21 * 1024 + record_kib - 1) / record_kib))
for _ in $(seq "$count"); do
  head -c $((record_kib * 1024)) /dev/urandom | "$vault" --home "$home" queue put --queue q >/dev/null
done
records=$("$vault" --home "$home" queue stats --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["total"])')
printf 'pass phrase for the benchmark\n' >"$work/passphrase"
mkdir -p "$work/bundles" "$work/copy" "$work/copy-back"
sync
files=("$home"/queue.sqlite*)
bytes=$(cat "${files[@]}" | wc -c)
cat "${files[@]}" >/dev/null  # warm the page cache for both alike

seconds() {  # wall time of a command, in seconds
  python3 - "$@" <<'PY'
import subprocess, sys, time
start = time.monotonic()
result = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
if result.returncode != 0:
    sys.stderr.write(result.stderr.decode()); sys.exit(result.returncode)
print(f"{time.monotonic() - start:.3f}")
PY
}

cp_time=$(seconds cp "${files[@]}" "$work/copy/")
cp_sync_time=$(seconds sh -c "cp $(printf "'%s' " "${files[@]}") '$work/copy-back/' && sync -f '$work/copy-back'")
backup_time=$(seconds "$vault" --home "$home" backup --to "$work/bundles" --passphrase-file "$work/passphrase")
bundle=$(ls "$work"/bundles/*.vaultbackup)
bundle_bytes=$(stat -c %s "$bundle")
verify_time=$(seconds "$vault" backup --verify "$bundle" --passphrase-file "$work/passphrase")
restore_time=$(seconds "$vault" restore "$bundle" --passphrase-file "$work/passphrase" --into "$work/restored" \
  --store keyfile --keyfile "$work/keys2/v.keys")
cp_bundle_time=$(seconds cp "$bundle" "$work/copy/bundle")
# Merging the bundle back into its own home and into the copy restored from it: each record of the
# bundle is opened and compared with the home's (all unchanged: the cost of the comparison).
merge_self_time=$(seconds "$vault" --home "$home" restore "$bundle" --passphrase-file "$work/passphrase")
merge_copy_time=$(seconds "$vault" --home "$work/restored" restore "$bundle" --passphrase-file "$work/passphrase")
scrypt_time=$(python3 -c '
import hashlib, time
start = time.monotonic()
hashlib.scrypt(b"pass phrase", salt=b"s" * 32, n=1 << 17, r=8, p=1, maxmem=200 * 1024 * 1024, dklen=32)
print(f"{time.monotonic() - start:.3f}")')

echo "vault: $vault"
printf 'queue: %s records of %s KiB, container files %.1f MB; bundle %.1f MB\n' "$records" "$record_kib" \
  "$(echo "$bytes / 1000000" | bc -l)" "$(echo "$bundle_bytes / 1000000" | bc -l)"
printf '%-58s %8s s\n' "cp of the container files" "$cp_time"
printf '%-58s %8s s\n' "cp of the container files + sync" "$cp_sync_time"
printf '%-58s %8s s\n' "vault backup (snapshot, write, fsync, full verify)" "$backup_time"
printf '%-58s %8s s\n' "vault backup --verify" "$verify_time"
printf '%-58s %8s s\n' "vault restore (full verify, then copy into a new home)" "$restore_time"
printf '%-58s %8s s\n' "cp of the bundle" "$cp_bundle_time"
printf '%-58s %8s s\n' "vault restore merging into its own home (all unchanged)" "$merge_self_time"
printf '%-58s %8s s\n' "vault restore merging into the copy restored from it" "$merge_copy_time"
printf '%-58s %8s s\n' "scrypt N=2^17 r=8 p=1 alone (OpenSSL, via Python hashlib)" "$scrypt_time"
