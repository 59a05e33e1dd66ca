#!/usr/bin/env python3
"""The leak corpus of `vault scan`: one file (or SQLite file set) per class of leak the scanner
claims to find, written deterministically, with a manifest that says which finding must fire.

    tools/leak-corpus.py DIR [--seed N]                    writes DIR/… and DIR/manifest.json
    tools/leak-corpus.py --check DIR [--vault BINARY]      scans DIR, prints found/total per class

manifest.json: {"canaries": [...], "cases": [{"id", "class", "file", "detector", "encoding"?,
"region"?}], "clean": [{"id", "file", "detector"}]}. A case is found when the scan of DIR (with the
manifest's canaries) has a finding in its file with its detector, and its encoding and region when
given. A clean entry is a file on which that detector must not fire (near misses: a WAL header, a
digest, a short text). Heuristic cases hold no canary: they must be found without one.

Random bytes come from random.Random(seed) and SQLite is written by Python's sqlite3, so the
corpus is byte for byte the same on every run, except what SQLite randomises itself: the WAL's
salts (and its -shm index) and the rollback journal's nonce.
"""
import argparse
import base64
import bz2
import gzip
import hashlib
import io
import json
import lzma
import os
import random
import sqlite3
import struct
import subprocess
import sys
import tarfile
import urllib.parse
import zipfile
import zlib

CANARY = "leak-canary/Qx7 Zürich"
SENTENCE = "Dear Ana, the plumber comes on Tuesday so please leave the spare key with the neighbour downstairs"
FORM = "user=ana&card=4111111111111111&amount=90&note=rent"
JSON = '{"user":"ana","card":"4111111111111111","note":"rent for May"}'
HEURISTICS = [("json", JSON, "json-text"), ("key-value", FORM, "key-value-text"), ("sentence", SENTENCE, "natural-language")]


class Corpus:
    def __init__(self, root, seed):
        self.root = root
        self.random = random.Random(seed)
        self.cases = []
        self.clean = []

    def path(self, name):
        return os.path.join(self.root, name)

    def bytes(self, count):
        return self.random.randbytes(count)

    def case(self, klass, name, detector, encoding=None, region=None):
        entry = {"id": f"{klass}:{name}:{detector}:{encoding or '-'}", "class": klass, "file": name, "detector": detector}
        if encoding:
            entry["encoding"] = encoding
        if region:
            entry["region"] = region
        self.cases.append(entry)

    def must_not(self, name, detector, why):
        self.clean.append({"id": f"clean:{name}:{detector}", "file": name, "detector": detector, "why": why})

    def write(self, name, data):
        with open(self.path(name), "wb") as f:
            f.write(data)


def plaintext_in_sqlite(corpus):
    records = [text for _, text, _ in HEURISTICS]

    # Live cells: another app's rows, in plaintext.
    c = sqlite3.connect(corpus.path("live.db"))
    c.execute("create table notes (id integer primary key, body text, meta blob)")
    for text in records:
        c.execute("insert into notes (body, meta) values (?, ?)", (text, corpus.bytes(40)))
    c.commit()
    c.close()
    for _, _, detector in HEURISTICS:
        corpus.case("sqlite-live-cell", "live.db", detector, region="live-cell")

    # Free blocks: deleted rows between live ones, secure_delete off.
    c = sqlite3.connect(corpus.path("freeblock.db"))
    c.execute("pragma secure_delete=OFF")
    c.execute("create table notes (id integer primary key, body blob)")
    for text in records:
        c.execute("insert into notes (body) values (?)", (corpus.bytes(60),))
        c.execute("insert into notes (body) values (?)", (b"\x00\x01" + text.encode() + b"\x00",))
    c.execute("insert into notes (body) values (?)", (corpus.bytes(60),))
    c.commit()
    c.execute("delete from notes where id % 2 = 0")
    c.commit()
    c.close()
    for _, _, detector in HEURISTICS:
        corpus.case("sqlite-free-block", "freeblock.db", detector, region="free-block")

    # Freelist pages: a table's pages after its rows were deleted (auto_vacuum off).
    c = sqlite3.connect(corpus.path("freelist.db"))
    c.execute("pragma secure_delete=OFF")
    c.execute("pragma page_size=4096")
    c.execute("create table keep (x)")
    c.execute("insert into keep values ('kept')")
    c.execute("create table notes (body blob)")
    for index in range(60):
        c.execute("insert into notes values (?)", (corpus.bytes(700) + b"\x00" + records[index % 3].encode() + b"\x00",))
    c.commit()
    c.execute("delete from notes")
    c.commit()
    c.close()
    for _, _, detector in HEURISTICS:
        corpus.case("sqlite-freelist-page", "freelist.db", detector, region="freelist-page")

    # Overflow pages: a record larger than a page; the text sits past the first page.
    c = sqlite3.connect(corpus.path("overflow.db"))
    c.execute("pragma page_size=4096")
    c.execute("create table notes (body blob)")
    blob = corpus.bytes(6000)
    for text in records:
        blob += b"\x00" + text.encode() + b"\x00" + corpus.bytes(300)
    c.execute("insert into notes values (?)", (blob,))
    c.commit()
    c.close()
    for _, _, detector in HEURISTICS:
        corpus.case("sqlite-overflow-page", "overflow.db", detector, region="overflow-page")

    # A committed WAL frame: the writer stopped before any checkpoint.
    script = (
        "import sqlite3,sys,os\n"
        "c=sqlite3.connect(sys.argv[1]); c.execute('pragma journal_mode=wal'); c.execute('pragma wal_autocheckpoint=0')\n"
        "c.execute('create table notes (body text)')\n"
        "for text in sys.argv[2:]: c.execute('insert into notes values (?)', (text,))\n"
        "c.commit(); os._exit(0)\n"
    )
    subprocess.run([sys.executable, "-c", script, corpus.path("wal.db")] + records, check=True)
    for _, _, detector in HEURISTICS:
        corpus.case("sqlite-wal-frame", "wal.db-wal", detector, region="wal-frame")

    # A rollback journal in persist mode: the pages it saved before an update stay behind.
    c = sqlite3.connect(corpus.path("journal.db"))
    c.execute("pragma journal_mode=persist")
    c.execute("create table notes (body text)")
    for text in records:
        c.execute("insert into notes values (?)", (text,))
    c.commit()
    c.execute("update notes set body = 'replaced'")
    c.commit()
    c.close()
    for _, _, detector in HEURISTICS:
        corpus.case("sqlite-journal", "journal.db-journal", detector, region="journal")


def plaintext_beside_the_data(corpus):
    # An app's log: machine records, and one line of each kind of plaintext between them.
    lines = []
    for index in range(300):
        lines.append(f"2026-11-30T10:{index // 60:02d}:{index % 60:02d}Z worker {index % 7} sent batch {index * 13} in {index % 89} ms")
        if index == 100:
            lines.append(f"2026-11-30T10:01:40Z queued note: {SENTENCE}")
        if index == 150:
            lines.append(f"2026-11-30T10:02:30Z request body {FORM}")
        if index == 200:
            lines.append(f"2026-11-30T10:03:20Z payload {JSON}")
    corpus.write("app.log", ("\n".join(lines) + "\n").encode())
    for _, _, detector in HEURISTICS:
        corpus.case("text-log", "app.log", detector, region="file")

    # A spill file of form posts (text, one request body per line).
    corpus.write("requests.spill", (FORM + "\n" + FORM.replace("ana", "bo") + "\n").encode())
    corpus.case("text-spill", "requests.spill", "key-value-text", region="file")

    # A core dump: an ELF header of type ET_CORE, then memory with records between binary data.
    header = b"\x7fELF\x02\x01\x01" + bytes(9) + struct.pack("<HHI", 4, 62, 1) + bytes(40)
    memory = corpus.bytes(20000)
    for _, text, _ in HEURISTICS:
        memory += b"\x00" + text.encode() + b"\x00" + corpus.bytes(5000)
    corpus.write("core.1234", header + memory)
    for _, _, detector in HEURISTICS:
        corpus.case("core-dump", "core.1234", detector, region="file")

    # A binary temp file of length-prefixed records (an unknown format).
    spill = b""
    for _, text, _ in HEURISTICS:
        spill += corpus.bytes(3000) + struct.pack("<I", len(text)) + text.encode()
    corpus.write("records.tmp", spill + corpus.bytes(3000))
    for _, _, detector in HEURISTICS:
        corpus.case("binary-spill", "records.tmp", detector, region="file")


def canaries(corpus):
    text = CANARY
    raw = text.encode()
    forms = {
        "utf8": raw,
        "utf16le": text.encode("utf-16-le"),
        "utf16be": text.encode("utf-16-be"),
        "base64": base64.b64encode(b"xy" + raw + b"z"),
        "hex": raw.hex().encode(),
        "json-escaped": json.dumps({"note": text}).encode(),
        "url-encoded": b"POST /notes body=" + urllib.parse.quote_plus(text).encode(),
    }
    for encoding, data in forms.items():
        corpus.write(f"canary-{encoding}.bin", corpus.bytes(500) + data + corpus.bytes(500))
        corpus.case("canary", f"canary-{encoding}.bin", "canary", encoding=encoding)
        corpus.write(f"canary-{encoding}.gz.bin", corpus.bytes(300) + gzip.compress(data, mtime=0) + corpus.bytes(300))
        corpus.case("canary-gzip", f"canary-{encoding}.gz.bin", "canary", encoding="inflated+" + encoding)
        corpus.write(f"canary-{encoding}.zlib.bin", corpus.bytes(300) + zlib.compress(b"record: " + data) + corpus.bytes(300))
        corpus.case("canary-zlib", f"canary-{encoding}.zlib.bin", "canary", encoding="inflated+" + encoding)


def pem(label, body):
    encoded = base64.b64encode(body).decode()
    lines = [encoded[i : i + 64] for i in range(0, len(encoded), 64)]
    return f"-----BEGIN {label}-----\n" + "\n".join(lines) + f"\n-----END {label}-----\n"


def key_material(corpus):
    key = corpus.bytes(32)
    corpus.write("raw.key", key)
    corpus.case("key-raw", "raw.key", "key-material", encoding="raw-32-bytes")
    corpus.write("raw-newline.key", corpus.bytes(32) + b"\n")
    corpus.case("key-raw", "raw-newline.key", "key-material", encoding="raw-32-bytes")
    corpus.write("key.b64", base64.b64encode(corpus.bytes(32)) + b"\n")
    corpus.case("key-base64", "key.b64", "key-material", encoding="base64")
    corpus.write("key-unpadded.b64", base64.b64encode(corpus.bytes(32)).rstrip(b"="))
    corpus.case("key-base64", "key-unpadded.b64", "key-material", encoding="base64")
    urlsafe = base64.urlsafe_b64encode(corpus.bytes(32))
    while b"-" not in urlsafe and b"_" not in urlsafe:  # make the URL-safe alphabet show
        urlsafe = base64.urlsafe_b64encode(corpus.bytes(32))
    corpus.write("key-url.txt", urlsafe.rstrip(b"=") + b"\n")
    corpus.case("key-base64url", "key-url.txt", "key-material", encoding="base64url")
    corpus.write("key.hex", corpus.bytes(32).hex().encode() + b"\n")
    corpus.case("key-hex", "key.hex", "key-material", encoding="hex")
    corpus.write("KEY.HEX", corpus.bytes(32).hex().upper().encode())
    corpus.case("key-hex", "KEY.HEX", "key-material", encoding="hex")
    env = (
        "# settings for the sync worker\nLOG_LEVEL=info\nENDPOINT=https://sync.example.org/v1\n"
        f"VAULT_KEY={base64.b64encode(corpus.bytes(32)).decode()}\nRETRIES=5\n"
    )
    corpus.write("app.env", env.encode())
    corpus.case("key-env-line", "app.env", "key-material", encoding="base64")
    yaml = f"sync:\n  endpoint: https://sync.example.org\n  secret: \"{corpus.bytes(32).hex()}\"\n"
    corpus.write("config.yaml", yaml.encode())
    corpus.case("key-env-line", "config.yaml", "key-material", encoding="hex")
    # PEM armour: alone, and inside a larger file (a log that printed a key, a core dump).
    corpus.write("private.pem", pem("PRIVATE KEY", corpus.bytes(1190)).encode())
    corpus.case("key-pem", "private.pem", "key-material", encoding="pem")
    log = "".join(f"2026-11-30T11:00:{i:02d}Z started worker {i}\n" for i in range(40))
    log += pem("OPENSSH PRIVATE KEY", corpus.bytes(400)) + "2026-11-30T11:01:00Z ready\n"
    corpus.write("debug.log", log.encode())
    corpus.case("key-pem", "debug.log", "key-material", encoding="pem")
    corpus.write("dump.bin", corpus.bytes(7000) + pem("EC PRIVATE KEY", corpus.bytes(121)).encode() + corpus.bytes(7000))
    corpus.case("key-pem", "dump.bin", "key-material", encoding="pem")
    # A vault keyfile (format 2 framing: "VKF", version, body, SHA-256 of what precedes it).
    body = b"VKF\x02" + corpus.bytes(120)
    corpus.write("v.keys", body + hashlib.sha256(body).digest())
    corpus.case("key-vault-keyfile", "v.keys", "key-material", encoding="vault-keyfile")

    # Near misses that must stay quiet.
    c = sqlite3.connect(corpus.path("idle.db"))
    c.execute("pragma journal_mode=wal")
    c.execute("create table t (x)")
    c.commit()
    c.execute("pragma wal_checkpoint(TRUNCATE)")
    c.close()
    wal_header = struct.pack(">IIIIII", 0x377F0682, 3007000, 4096, 0, *struct.unpack(">II", corpus.bytes(8)))
    wal_header += corpus.bytes(8)  # checksums: random-looking, as real ones are
    corpus.write("live.db-wal", wal_header)
    corpus.must_not("live.db-wal", "key-material", "a WAL header alone (32 bytes) is no key")
    corpus.write("linker.so", b"INPUT(libexample.so.6 -lother)\n\n")
    corpus.must_not("linker.so", "key-material", "a 32-byte text file is no key")
    digest = hashlib.sha256(b"release tarball").hexdigest()
    corpus.write("release.sha256", f"SHA256={digest}\n".encode())
    corpus.must_not("release.sha256", "key-material", "a named digest is no key")
    cert = pem("CERTIFICATE", corpus.bytes(900))
    corpus.write("server.crt", cert.encode())
    corpus.must_not("server.crt", "key-material", "a certificate is public")


def compressed(corpus):
    """Canaries and records inside every compressed form the scanner decodes, and near misses: a
    compressed document is judged as the document (prose there is not a record)."""
    raw = CANARY.encode()
    note = b"note: " + raw + b" " + SENTENCE.encode() + b"\n"
    wrap = lambda data: corpus.bytes(300) + data + corpus.bytes(300)
    small = zlib.compressobj(6, zlib.DEFLATED, 9)
    forms = {
        "xz": wrap(lzma.compress(note)),
        "bzip2": wrap(bz2.compress(note)),
        "zlib-window-9": wrap(small.compress(note) + small.flush()),
        "gzip-member-3": wrap(b"".join(gzip.compress(p, mtime=0) for p in (b"first\n" * 50, b"second\n" * 50, note))),
    }
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("notes/today.txt", note * 3)
    forms["zip-deflate"] = buffer.getvalue()
    inner = gzip.compress(note, mtime=0)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as t:
        info = tarfile.TarInfo("logs/app.log.1.gz")
        info.size = len(inner)
        t.addfile(info, io.BytesIO(inner))
    forms["gz-in-tar-gz"] = buffer.getvalue()
    forms["base64-gzip-in-log"] = b"2026-12-01T10:00:00Z DEBUG body=" + base64.b64encode(gzip.compress(note, mtime=0)) + b"\n"
    encoded = base64.b64encode(b"A" * 53 + note * 2)
    forms["mime-wrapped-base64"] = b"Content-Transfer-Encoding: base64\r\n\r\n" + b"\r\n".join(
        encoded[i:i + 76] for i in range(0, len(encoded), 76)) + b"\r\n"
    for name, data in forms.items():
        corpus.write(f"compressed-{name}.bin", data)
        corpus.case("canary-decoded", f"compressed-{name}.bin", "canary", encoding="inflated+utf8")
    # A record compressed into a blob of a binary file is judged as a record there.
    corpus.write("compressed-json-blob.bin", wrap(zlib.compress(JSON.encode())))
    corpus.case("record-decoded", "compressed-json-blob.bin", "json-text", region="compressed-stream")
    corpus.write("compressed-sentence-blob.bin", wrap(gzip.compress(SENTENCE.encode(), mtime=0)))
    corpus.case("record-decoded", "compressed-sentence-blob.bin", "natural-language", region="compressed-stream")
    # Near miss: a gzipped document is a document.
    document = (b"The library reads the configuration at start-up and keeps it for the life of the process. " * 30)
    corpus.write("manual.txt.gz", gzip.compress(document, mtime=0))
    corpus.must_not("manual.txt.gz", "natural-language", "a compressed document is judged as the document")


def generate(root, seed):
    os.makedirs(root, exist_ok=True)
    if os.listdir(root):
        sys.exit(f"leak-corpus: {root} is not empty")
    corpus = Corpus(root, seed)
    plaintext_in_sqlite(corpus)
    plaintext_beside_the_data(corpus)
    canaries(corpus)
    compressed(corpus)
    key_material(corpus)
    manifest = {"seed": seed, "canaries": [CANARY], "cases": corpus.cases, "clean": corpus.clean}
    with open(os.path.join(root, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    print(f"leak-corpus: {len(corpus.cases)} cases, {len(corpus.clean)} near misses in {root}")


def check(root, vault):
    manifest = json.load(open(os.path.join(root, "manifest.json")))
    canary_file = os.path.join(root, "manifest.json.canaries")
    with open(canary_file, "w") as f:
        f.write("\n".join(manifest["canaries"]) + "\n")
    result = subprocess.run([vault, "scan", "--json", "--canary-file", canary_file, root], capture_output=True)
    os.remove(canary_file)
    report = json.loads(result.stdout)
    findings = report["findings"]

    def hits(entry):
        path = os.path.join(root, entry["file"])
        return [
            f for f in findings
            if f["file"] == path and f["detector"] == entry["detector"]
            and ("encoding" not in entry or f.get("encoding") == entry["encoding"])
            and ("region" not in entry or f["region"] == entry["region"])
        ]

    classes = {}
    missed = []
    for entry in manifest["cases"]:
        found = bool(hits(entry))
        total, count = classes.get(entry["class"], (0, 0))
        classes[entry["class"]] = (total + 1, count + found)
        if not found:
            missed.append(entry["id"])
    for name, (total, count) in classes.items():
        print(f"  {name:<22} {count}/{total}")
    all_found = sum(c for _, c in classes.values())
    all_total = sum(t for t, _ in classes.values())
    false_alarms = [entry["id"] for entry in manifest["clean"] if hits(entry)]
    print(f"  {'all':<22} {all_found}/{all_total}; near misses flagged: {len(false_alarms)}/{len(manifest['clean'])}")
    for name in missed:
        print(f"  missed: {name}")
    for name in false_alarms:
        print(f"  false alarm: {name}")
    return 0 if not missed and not false_alarms else 1


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("dir")
    parser.add_argument("--seed", type=int, default=10)
    parser.add_argument("--check", action="store_true", help="scan DIR and print found/total per class")
    parser.add_argument("--vault", default=".build/release/vault")
    arguments = parser.parse_args()
    if arguments.check:
        sys.exit(check(arguments.dir, arguments.vault))
    generate(arguments.dir, arguments.seed)


if __name__ == "__main__":
    main()
