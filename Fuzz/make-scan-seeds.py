#!/usr/bin/env python3
"""Writes the seed corpus of the `scan` fuzz target (Fuzz/corpus/scan): small SQLite databases, a
WAL file, a rollback journal, and gzip / zlib / bzip2 / xz streams (raw and in base64) holding the
target's canary. Each seed starts with the byte that picks the file name (FuzzScan.swift:
0 data, 1 app.db, 2 app.db-wal, 3 app.db-journal). Run once; the output is checked in."""
import base64, bz2, gzip, lzma, os, shutil, sqlite3, struct, sys, tempfile, zlib

CANARY = b"fuzz-canary-7f3a"
out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "corpus", "scan")
os.makedirs(out, exist_ok=True)

def put(name, selector, data):
    with open(os.path.join(out, name), "wb") as f:
        f.write(bytes([selector]) + data)

work = tempfile.mkdtemp()
try:
    # A database of 512-byte pages with a row that spills onto an overflow page and a freed row.
    path = os.path.join(work, "app.db")
    db = sqlite3.connect(path)
    db.execute("PRAGMA page_size=512")
    db.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB)")
    db.execute("INSERT INTO t(v) VALUES(?)", (b"x" * 300 + CANARY + b"y" * 300,))
    db.execute("INSERT INTO t(v) VALUES(?)", (b"gone " + CANARY,))
    db.execute("INSERT INTO t(v) VALUES(?)", (zlib.compress(b"zipped " + CANARY),))
    db.commit()
    db.execute("DELETE FROM t WHERE id = 2")
    db.commit()
    db.close()
    put("database", 1, open(path, "rb").read())

    # A WAL with two committed frames: copied before the connection closes (closing checkpoints it).
    path = os.path.join(work, "wal.db")
    db = sqlite3.connect(path)
    db.execute("PRAGMA page_size=512")
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA wal_autocheckpoint=0")
    db.execute("CREATE TABLE t(v BLOB)")
    db.execute("INSERT INTO t VALUES(?)", (b"in the wal " + CANARY,))
    db.commit()
    put("wal", 2, open(path + "-wal", "rb").read())
    db.close()

    # A rollback journal by hand: header (magic, page count, nonce, initial size, sector and page
    # size) padded to one sector, then one page record (number, page, checksum).
    page = (b"old page " + CANARY).ljust(512, b"\0")
    header = bytes.fromhex("d9d505f920a163d7") + struct.pack(">IIIII", 1, 0x1234, 2, 512, 512)
    put("journal", 3, header.ljust(512, b"\0") + struct.pack(">I", 2) + page + struct.pack(">I", 0x1234))
finally:
    shutil.rmtree(work)

text = b"log line one\nsecret: " + CANARY + b"\n"
put("plain", 0, text)
put("gzip", 0, gzip.compress(text, mtime=0))
put("zlib", 0, b"header bytes " + zlib.compress(text) + b" trailer")
put("bzip2", 0, bz2.compress(text))
put("xz", 0, lzma.compress(text))
put("base64-gzip", 0, b"payload=" + base64.b64encode(gzip.compress(text, mtime=0)) + b"\n")
put("pem", 0, b"-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\n-----END PRIVATE KEY-----\n")
