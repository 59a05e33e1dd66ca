#!/usr/bin/env python3
"""Checks that every ```swift block in README.md, docs/INTEGRATING.md and the DocC catalogs
(Sources/*/*.docc/*.md) is cut, unchanged, from a Swift file under Examples/ (which the test
command builds; the catalogs' blocks are in Examples/Contract/Sources/DocCSnippets), so no
documented code can rot.

    tools/check-doc-snippets.py            exit 0 when every block is found, 1 with the ones that are not

A block matches when its lines (trailing spaces ignored) appear as consecutive lines of one file.
"""
import pathlib
import re
import sys

root = pathlib.Path(__file__).resolve().parent.parent
documents = [root / "README.md", root / "docs" / "INTEGRATING.md"] + sorted((root / "Sources").glob("*/*.docc/*.md"))
sources = [
    [line.rstrip() for line in path.read_text().splitlines()]
    for path in (root / "Examples").rglob("*.swift")
    if ".build" not in path.parts
]


def found(block):
    lines = [line.rstrip() for line in block.splitlines()]
    for source in sources:
        for start in range(len(source) - len(lines) + 1):
            if source[start : start + len(lines)] == lines:
                return True
    return False


missing = []
count = 0
for document in documents:
    text = document.read_text()
    for match in re.finditer(r"^```swift\n(.*?)^```", text, re.S | re.M):
        count += 1
        if not found(match.group(1)):
            line = text.count("\n", 0, match.start()) + 1
            missing.append(f"{document.relative_to(root)}:{line}")
if missing:
    print("check-doc-snippets: these swift blocks are not in any file under Examples/:", *missing, sep="\n  ")
    sys.exit(1)
print(f"check-doc-snippets: all {count} swift blocks are compiled code from Examples/")
