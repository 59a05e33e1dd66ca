#!/usr/bin/env python3
"""An independent implementation of vault's envelope format 1 and keyfile formats 1 and 2.

Written from SECURITY.md alone, with Python's `cryptography` package, so the tests can prove that
the documented format is the real one: envelopes sealed by vault open here, and envelopes sealed
here open in vault.

    vault_envelope.py open --keyfile PATH --context CTX  < envelope  > plaintext
    vault_envelope.py seal --keyfile PATH --context CTX [--version N] < plaintext > envelope

Exit 0 on success, 1 when the envelope does not open, 2 on bad input.
"""
import argparse
import hashlib
import os
import struct
import sys

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

MAGIC = b"VLT"
FORMAT = 1
SUITE_AES256GCM = 1
HEADER = 29  # magic 3, format 1, suite 1, keyring 8, version 4, nonce 12
AUTHENTICATED_HEADER = 17  # magic .. version
TAG = 16


def read_keyfile(path):
    """Returns (keyring id bytes, {version: key bytes}); named records (format 2) are skipped."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 16 + 32 or data[0:3] != b"VKF":
        raise ValueError("not a vault keyfile")
    if data[3] not in (1, 2):
        raise ValueError(f"unknown keyfile format {data[3]}")
    body, checksum = data[:-32], data[-32:]
    if hashlib.sha256(body).digest() != checksum:
        raise ValueError("keyfile checksum mismatch")
    keyring = body[4:12]
    (count,) = struct.unpack(">I", body[12:16])
    offset = 16
    records = 0
    if data[3] == 2:
        if len(body) < 20:
            raise ValueError("keyfile too short")
        (records,) = struct.unpack(">I", body[16:20])
        offset = 20
    if len(body) < offset + count * 36:
        raise ValueError("keyfile entry count does not match its size")
    keys = {}
    for _ in range(count):
        (version,) = struct.unpack(">I", body[offset : offset + 4])
        keys[version] = body[offset + 4 : offset + 36]
        offset += 36
    for _ in range(records):
        if offset + 1 > len(body):
            raise ValueError("keyfile record truncated")
        name_length = body[offset]
        offset += 1 + name_length
        if offset + 4 > len(body):
            raise ValueError("keyfile record truncated")
        (value_length,) = struct.unpack(">I", body[offset : offset + 4])
        offset += 4 + value_length
    if offset != len(body):
        raise ValueError("keyfile size does not match its entries and records")
    return keyring, keys


def open_envelope(envelope, keyring, keys, context):
    if len(envelope) < 3 or envelope[0:3] != MAGIC:
        raise ValueError("not an envelope")
    if envelope[3] != FORMAT or envelope[4] != SUITE_AES256GCM:
        raise ValueError("unsupported format or suite")
    if len(envelope) < HEADER + TAG:
        raise ValueError("truncated")
    if envelope[5:13] != keyring:
        raise ValueError("wrong keyring")
    (version,) = struct.unpack(">I", envelope[13:17])
    if version not in keys:
        raise ValueError("unknown key version")
    nonce = envelope[17:29]
    aad = envelope[:AUTHENTICATED_HEADER] + context
    return AESGCM(keys[version]).decrypt(nonce, envelope[HEADER:], aad)


def seal_envelope(plaintext, keyring, version, key, context):
    header = MAGIC + bytes([FORMAT, SUITE_AES256GCM]) + keyring + struct.pack(">I", version)
    nonce = os.urandom(12)
    return header + nonce + AESGCM(key).encrypt(nonce, plaintext, header + context)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["open", "seal"])
    parser.add_argument("--keyfile", required=True)
    parser.add_argument("--context", required=True)
    parser.add_argument("--version", type=int)
    args = parser.parse_args()
    try:
        keyring, keys = read_keyfile(args.keyfile)
    except (OSError, ValueError) as error:
        print(f"Error: {error}", file=sys.stderr)
        return 2
    data = sys.stdin.buffer.read()
    context = args.context.encode()
    if args.action == "open":
        try:
            sys.stdout.buffer.write(open_envelope(data, keyring, keys, context))
        except (ValueError, InvalidTag) as error:
            print(f"Error: {type(error).__name__}: {error}", file=sys.stderr)
            return 1
    else:
        version = args.version if args.version is not None else max(keys)
        sys.stdout.buffer.write(seal_envelope(data, keyring, version, keys[version], context))
    return 0


if __name__ == "__main__":
    sys.exit(main())
