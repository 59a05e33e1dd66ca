#!/usr/bin/env python3
"""Audits the documentation comments of public symbols, from Swift symbol graphs.

    tools/doc-audit.py [--markdown] [PATH ...]

PATH is a *.symbols.json file or a directory searched for them; the default is the symbol graphs
tools/docs.sh leaves in .build/docs-work/symbol-graphs (run it first). Only symbols declared in the
module's own sources are judged: members the compiler synthesizes (Equatable's `!=`, Codable's
`init(from:)` …) have no source location and are left out.

For each module it lists:
  - public symbols with no `///` comment, apart from
  - implementations of a protocol requirement with no comment of their own (`description`,
    `encode(to:)` …: their DocC page says only "Inherited from" the requirement), listed
    separately;
  - documented functions, methods, initializers and subscripts whose comment lacks
    `- Parameter(s)` for a parameter they take, `- Returns:` while they return a value, or
    `- Throws:` while they throw.

Exit status: 0 (it reports; it does not judge).
"""

import argparse
import json
import pathlib
import re
import signal
import sys
from collections import defaultdict

CALLABLE_KINDS = {
    "swift.func",
    "swift.func.op",
    "swift.method",
    "swift.type.method",
    "swift.init",
    "swift.subscript",
    "swift.type.subscript",
}
KIND_NAMES = {
    "swift.class": "class",
    "swift.struct": "struct",
    "swift.enum": "enum",
    "swift.protocol": "protocol",
    "swift.typealias": "typealias",
    "swift.enum.case": "case",
    "swift.property": "property",
    "swift.type.property": "static property",
    "swift.var": "variable",
    "swift.func": "function",
    "swift.func.op": "operator",
    "swift.method": "method",
    "swift.type.method": "static method",
    "swift.init": "init",
    "swift.subscript": "subscript",
    "swift.type.subscript": "static subscript",
    "swift.associatedtype": "associatedtype",
}

PARAMETER_ONE = re.compile(r"^\s*[-*+]\s*parameter\s+(\S+?)\s*:", re.IGNORECASE)
PARAMETERS = re.compile(r"^\s*[-*+]\s*parameters\s*:", re.IGNORECASE)
LIST_ITEM = re.compile(r"^(\s*)[-*+]\s*(\S+?)\s*:")
RETURNS = re.compile(r"^\s*[-*+]\s*returns\s*:", re.IGNORECASE)
THROWS = re.compile(r"^\s*[-*+]\s*throws\s*:", re.IGNORECASE)


def documented_parameters(lines):
    """Parameter names a doc comment documents, as DocC reads them."""
    names = set()
    in_list = None  # indentation of the `- Parameters:` item while inside its list
    for line in lines:
        if PARAMETERS.match(line):
            in_list = len(line) - len(line.lstrip())
            continue
        if in_list is not None:
            item = LIST_ITEM.match(line)
            indent = len(line) - len(line.lstrip())
            if line.strip() and indent <= in_list:
                in_list = None  # the list ended: back at (or left of) the `- Parameters:` item
            elif item and indent > in_list:
                names.add(item.group(2))
                continue
        one = PARAMETER_ONE.match(line)
        if one:
            names.add(one.group(1))
    return names


def returns_value(symbol):
    if symbol["kind"]["identifier"] == "swift.init":
        return False
    fragments = symbol.get("functionSignature", {}).get("returns", [])
    text = "".join(f["spelling"] for f in fragments).strip()
    return text not in ("", "()", "Void", "Never")


def throws(symbol):
    """Whether the callable itself throws: a `throws` at parenthesis depth 0, after its parameter
    list, not one inside a closure parameter's type (`_ body: () throws -> T`)."""
    depth = 0
    for fragment in symbol.get("declarationFragments", []):
        spelling = fragment["spelling"]
        if fragment["kind"] == "keyword" and spelling in ("throws", "rethrows") and depth == 0:
            return True
        depth += spelling.count("(") - spelling.count(")")
    return False


def load(paths):
    files = []
    for path in paths:
        p = pathlib.Path(path)
        files += sorted(p.rglob("*.symbols.json")) if p.is_dir() else [p]
    if not files:
        sys.exit(f"doc-audit: no *.symbols.json under {' '.join(paths)} (run tools/docs.sh first)")
    return files


def audit(files):
    """Per module: (undocumented, requirement implementations without docs, incomplete callables)."""
    modules = {}
    for file in files:
        graph = json.loads(file.read_text())
        module = graph["module"]["name"]
        undocumented, implementations, incomplete = modules.setdefault(module, ([], [], []))
        implementing = {r["source"] for r in graph["relationships"] if "sourceOrigin" in r}
        for symbol in graph["symbols"]:
            precise = symbol["identifier"]["precise"]
            if "::SYNTHESIZED::" in precise or "location" not in symbol:
                continue
            if symbol.get("accessLevel") not in ("public", "open"):
                continue
            kind = symbol["kind"]["identifier"]
            path = "/".join(symbol["pathComponents"])
            where = symbol["location"]["uri"].split("/Sources/", 1)[-1]
            line = symbol["location"]["position"]["line"] + 1
            entry = (path, KIND_NAMES.get(kind, kind), f"{where}:{line}")
            doc = symbol.get("docComment")
            if doc is None or doc.get("module", module) != module:
                (implementations if precise in implementing else undocumented).append(entry)
                continue
            if kind not in CALLABLE_KINDS:
                continue
            lines = [l["text"] for l in doc["lines"]]
            missing = []
            documented = documented_parameters(lines)
            for parameter in symbol.get("functionSignature", {}).get("parameters", []):
                names = {parameter["name"], parameter.get("internalName", parameter["name"])}
                if not names & documented:
                    missing.append(f"parameter `{parameter.get('internalName', parameter['name'])}`")
            if returns_value(symbol) and not any(RETURNS.match(l) for l in lines):
                missing.append("`- Returns:`")
            if throws(symbol) and not any(THROWS.match(l) for l in lines):
                missing.append("`- Throws:`")
            if missing:
                incomplete.append(entry + (", ".join(missing),))
    return modules


def main():
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `| head` ends the output quietly
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", default=[".build/docs-work/symbol-graphs"])
    parser.add_argument("--markdown", action="store_true", help="print Markdown (for DOC-AUDIT.md)")
    parser.add_argument("--check", action="store_true",
                        help="print only the totals, and exit 1 when any public symbol is undocumented or incomplete")
    args = parser.parse_args()
    modules = audit(load(args.paths))
    order = ["Vault", "VaultQueue", "Outbox", "Telemetry", "VaultScan"]
    names = sorted(modules, key=lambda m: (order.index(m) if m in order else len(order), m))
    md = args.markdown
    if args.check:
        missing = sum(len(u) + len(i) + len(c) for u, i, c in modules.values())
        print(f"doc-audit: {missing} public symbols of {', '.join(names)} lack documentation"
              + (" (run tools/doc-audit.py for the list)" if missing else ""))
        sys.exit(1 if missing else 0)

    if md:
        print("| Module | Undocumented | Protocol implementations without their own comment |"
              " Documented callables missing Parameters/Returns/Throws |")
        print("|---|---:|---:|---:|")
    for module in names:
        u, i, c = modules[module]
        if md:
            print(f"| {module} | {len(u)} | {len(i)} | {len(c)} |")
        else:
            print(f"{module}: {len(u)} undocumented, {len(i)} protocol implementations without "
                  f"their own comment, {len(c)} documented callables incomplete")
    for module in names:
        u, i, c = modules[module]
        print(f"\n## {module}\n" if md else f"\n=== {module}")
        sections = [
            (f"Undocumented public symbols ({len(u)})", [f"`{p}` ({k}, {w})" for p, k, w in sorted(u)]),
            (f"Protocol implementations without their own comment ({len(i)})",
             [f"`{p}` ({k}, {w})" for p, k, w in sorted(i)]),
            (f"Documented callables missing sections ({len(c)})",
             [f"`{p}` ({k}, {w}): {m}" for p, k, w, m in sorted(c)]),
        ]
        for title, items in sections:
            print(f"\n### {title}\n" if md else f"--- {title}")
            for item in items:
                print(f"- {item}" if md else f"  {item.replace('`', '')}")
            if not items:
                print("- none" if md else "  none")


if __name__ == "__main__":
    main()
