#!/usr/bin/env bash
# Builds the API documentation of the library modules an app uses (Vault, VaultQueue, Outbox,
# Telemetry, VaultScan) with the toolchain's own `docc`: no swift-docc-plugin, no network.
#
#   tools/docs.sh [OUT]          OUT defaults to .build/docs
#
# 1. `swift build` (debug) of the targets that pull in those modules;
# 2. `swift-symbolgraph-extract` per module, public symbols only, into .build/docs-work/symbol-graphs;
# 3. `docc convert` per module with its catalog (Sources/<Module>/<Module>.docc), in dependency
#    order, each later module given the earlier archives (`--dependency`) so a catalog can link
#    across modules (``/VaultQueue/QueueContainer``);
# 4. `docc merge` into one static site (static hosting, base path /) written to OUT.
#
# Any docc warning is an error (`--warnings-as-errors`): a broken symbol link in a catalog or in a
# doc comment fails the script, and so does a doc comment that documents some parameters of a
# function but not all, or that documents a return value or parameter it does not have (docc's
# parameter/return validation; `--no-check-parameters` turns it off). tools/doc-audit.py reports
# the symbols that have no comment at all (DOC-AUDIT.md).
set -euo pipefail

check_parameters=1
out=""
for arg in "$@"; do
  case "$arg" in
    --check-parameters) check_parameters=1 ;;
    --no-check-parameters) check_parameters=0 ;;
    -h | --help)
      sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'
      exit 0
      ;;
    -*)
      echo "docs: unknown option $arg" >&2
      exit 64
      ;;
    *)
      [ -z "$out" ] || {
        echo "docs: one output directory only" >&2
        exit 64
      }
      out="$arg"
      ;;
  esac
done

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
out=${out:-.build/docs}
case "$out" in /*) ;; *) out="$root/$out" ;; esac

# Dependency order: each module's archive is a --dependency of the ones after it.
modules=(Vault VaultQueue Outbox Telemetry VaultScan VaultBackup)
# Building these three targets builds all six modules (and the C modules under them).
build_targets=(Telemetry VaultScan VaultBackup)

command -v swift >/dev/null || {
  echo "docs: no Swift toolchain on PATH" >&2
  exit 2
}
toolchain_bin=$(dirname "$(readlink -f "$(command -v swift)")")
docc=$(command -v docc || true)
[ -n "$docc" ] || docc="$toolchain_bin/docc"
extract=$(command -v swift-symbolgraph-extract || true)
[ -n "$extract" ] || extract="$toolchain_bin/swift-symbolgraph-extract"
for tool in "$docc" "$extract"; do
  [ -x "$tool" ] || {
    echo "docs: $(basename "$tool") not found on PATH or in $toolchain_bin" >&2
    exit 2
  }
done

started=$SECONDS
work="$root/.build/docs-work"
rm -rf "$work"
mkdir -p "$work/symbol-graphs" "$work/archives"

echo "docs: building ${build_targets[*]} (debug)" >&2
for target in "${build_targets[@]}"; do
  swift build --target "$target" >"$work/build-$target.log" 2>&1 || {
    cat "$work/build-$target.log" >&2
    echo "docs: swift build --target $target failed" >&2
    exit 1
  }
done
bin=$(swift build --show-bin-path)

# What the compiler needs to load the modules again: the built Swift modules, the system-library
# module maps under Sources/C*, the ones SwiftPM made for the C targets (CCurl, CLibSecret), and
# the header paths of the pkg-config packages Package.swift names.
triple=$(swiftc -print-target-info | python3 -c 'import json, sys; print(json.load(sys.stdin)["target"]["triple"])')
search=(-I "$bin/Modules")
for map in Sources/*/module.modulemap; do
  search+=(-Xcc "-fmodule-map-file=$root/$map")
done
for map in "$bin"/C*.build/module.modulemap; do
  [ -f "$map" ] && search+=(-Xcc "-fmodule-map-file=$map")
done
mapfile -t pkgconfig < <(sed -n 's/.*pkgConfig: "\([^"]*\)".*/\1/p' Package.swift)
if [ ${#pkgconfig[@]} -gt 0 ]; then
  for flag in $(pkg-config --cflags-only-I "${pkgconfig[@]}"); do
    search+=(-Xcc "$flag")
  done
fi

dependencies=()
for module in "${modules[@]}"; do
  graphs="$work/symbol-graphs/$module"
  mkdir -p "$graphs"
  "$extract" -module-name "$module" -target "$triple" "${search[@]}" \
    -minimum-access-level public -output-dir "$graphs" >"$work/extract-$module.log" 2>&1 || {
    cat "$work/extract-$module.log" >&2
    echo "docs: swift-symbolgraph-extract failed for $module" >&2
    exit 1
  }

  catalog="Sources/$module/$module.docc"
  [ -d "$catalog" ] || {
    echo "docs: $catalog is missing" >&2
    exit 1
  }
  convert=("$docc" convert "$catalog"
    --additional-symbol-graph-dir "$graphs"
    --fallback-display-name "$module"
    --fallback-bundle-identifier "vault.$module"
    --output-path "$work/archives/$module.doccarchive"
    --transform-for-static-hosting
    --enable-experimental-external-link-support
    --warnings-as-errors)
  [ "$check_parameters" -eq 1 ] || convert+=(--disable-parameters-and-returns-validation)
  for dependency in "${dependencies[@]}"; do
    convert+=(--dependency "$dependency")
  done
  echo "docs: docc convert $module" >&2
  if ! "${convert[@]}" >"$work/convert-$module.log" 2>&1; then
    cat "$work/convert-$module.log" >&2
    echo "docs: docc reported errors or warnings for $module (warnings count as errors)" >&2
    exit 1
  fi
  # Belt and braces: a docc that let a warning through without failing still fails here.
  if grep -qE '^(warning|error):' "$work/convert-$module.log"; then
    cat "$work/convert-$module.log" >&2
    echo "docs: docc reported warnings for $module" >&2
    exit 1
  fi
  dependencies+=("$work/archives/$module.doccarchive")
done

archives=()
for module in "${modules[@]}"; do archives+=("$work/archives/$module.doccarchive"); done
"$docc" merge "${archives[@]}" --synthesized-landing-page-name vault \
  --synthesized-landing-page-kind Package --output-path "$work/vault.doccarchive" >"$work/merge.log" 2>&1 || {
  cat "$work/merge.log" >&2
  echo "docs: docc merge failed" >&2
  exit 1
}

# Replace OUT only if it is empty or a site this script wrote before (never an unrelated directory).
if [ -e "$out" ]; then
  if [ -n "$(ls -A "$out")" ] && [ ! -f "$out/.vault-docs" ]; then
    echo "docs: $out exists and was not written by tools/docs.sh; choose another OUT" >&2
    exit 1
  fi
  rm -rf "$out"
fi
mkdir -p "$(dirname "$out")"
mv "$work/vault.doccarchive" "$out"
# docc's app has no page at "/": send the site root to the combined landing page.
cat >"$out/index.html" <<'HTML'
<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>vault documentation</title>
<meta http-equiv="refresh" content="0; url=documentation/"></head>
<body><a href="documentation/">vault documentation</a></body></html>
HTML
touch "$out/.vault-docs"

echo "docs: built in $((SECONDS - started)) s: $out" >&2
echo "docs: to read it, serve the folder and open the index:" >&2
echo "  python3 -m http.server --bind 127.0.0.1 --directory '$out' 8000" >&2
echo "  http://127.0.0.1:8000/documentation/   (one module: /documentation/vaultqueue/)" >&2
