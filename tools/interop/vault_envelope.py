#!/usr/bin/env python3
"""An independent implementation of vault's envelope formats 1 and 2 and keyfile formats 1 and 2.

Written from SECURITY.md alone (sections "Envelopes" and "Keyfile"), with Python's `cryptography`
package, so the tests can prove that the documented format is the real one: envelopes sealed by
vault open here, and envelopes sealed here open in vault.

    vault_envelope.py open --keyfile PATH (--context CTX | --queue-context CONTAINER_ID QUEUE RECORD_ID)
        < envelope > plaintext
    vault_envelope.py seal --keyfile PATH (--context CTX | --queue-context CONTAINER_ID QUEUE RECORD_ID)
        [--version N] [--format 1|2] < plaintext > envelope
    vault_envelope.py selftest
    vault_envelope.py vectors > tools/interop/vectors/envelope-format2.json

`open` reads the format (1 or 2) from the envelope's header. `seal` writes format 2 unless told
otherwise, under the highest key version in the keyfile unless told otherwise.

Contexts: format 1 binds raw bytes (`--context` as given; for a queue record
`vault.queue.v1` NUL queue NUL record-id, no container id). Format 2 binds the structured
encoding E: domain `app` with one part (the `--context` bytes), or domain `queue` with three
parts (container id, queue name, record id).

Exit 0 on success, 1 when the envelope does not open, 2 on bad input.
"""
import argparse
import hashlib
import hmac
import json
import os
import re
import struct
import sys

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

MAGIC = b"VLT"
TAG = 16

# Format 1: magic 3, format 1, suite 1, keyring 8, version 4, nonce 12.
FORMAT1 = 1
SUITE1 = 1
HEADER1 = 29
AUTHENTICATED_HEADER1 = 17  # magic .. version

# Format 2: magic 3, format 1, suite 1, keyring 8, version 4, R 24, C 32.
FORMAT2 = 2
SUITE2 = 2
R_SIZE = 24
COMMIT_SIZE = 32
AUTHENTICATED_HEADER2 = 41  # magic .. R
HEADER2 = 73

SUITE_OF_FORMAT = {FORMAT1: SUITE1, FORMAT2: SUITE2}
MINIMUM_LENGTH = {FORMAT1: HEADER1 + TAG, FORMAT2: HEADER2 + TAG}  # 45, 89

NONCE_LABEL = b"vault-envelope-2-nonce"  # 22 bytes, no terminator
COMMIT_LABEL = b"vault-envelope-2-commit"  # 23 bytes
assert len(NONCE_LABEL) == 22 and len(COMMIT_LABEL) == 23

QUEUE_V1_PREFIX = b"vault.queue.v1"
DOMAIN_PATTERN = re.compile(rb"[a-z0-9.\-]{1,32}\Z")
CONTAINER_ID_PATTERN = re.compile(rb"[0-9a-f]{16}\Z")
RECORD_ID_PATTERN = re.compile(rb"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\Z")
MAX_VERSION = 0xFFFFFFFF


class EnvelopeError(Exception):
    """The envelope does not open (exit 1). `kind` names the failure; it never holds contents."""

    def __init__(self, kind):
        super().__init__(kind)
        self.kind = kind


class BadInput(Exception):
    """The caller's input is unusable (exit 2)."""


# --- keyfile -------------------------------------------------------------------------------------


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
        if version in keys:
            # SECURITY.md: "A file that lists one key version twice is refused".
            raise ValueError("keyfile lists one key version twice")
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


# --- contexts ------------------------------------------------------------------------------------


def encode_context(domain, parts):
    """E: 1-byte domain length, the domain, then each part as a 4-byte length and its bytes."""
    if isinstance(domain, str):
        domain = domain.encode("ascii")
    if not DOMAIN_PATTERN.match(domain):
        raise BadInput("context domain must be 1-32 characters of a-z 0-9 . -")
    if not parts:
        raise BadInput("a context has at least one part")
    out = bytearray([len(domain)]) + domain
    for part in parts:
        if len(part) > MAX_VERSION:
            raise BadInput("context part too long")
        out += struct.pack(">I", len(part)) + part
    return bytes(out)


def app_context2(context):
    return encode_context(b"app", [context])


def queue_parts2(container_id, queue, record_id):
    """The three parts of a format-2 queue context, checked as SECURITY.md describes them."""
    if not CONTAINER_ID_PATTERN.match(container_id):
        raise BadInput("container id must be 16 lowercase hex characters")
    if not 1 <= len(queue) <= 128 or b"\0" in queue:
        raise BadInput("queue name must be 1-128 bytes without NUL")
    try:
        queue.decode("utf-8")
    except UnicodeDecodeError:
        raise BadInput("queue name must be UTF-8") from None
    if not RECORD_ID_PATTERN.match(record_id):
        raise BadInput("record id must be a UUID in 36 lowercase characters")
    return [container_id, queue, record_id]


def queue_context2(container_id, queue, record_id):
    return encode_context(b"queue", queue_parts2(container_id, queue, record_id))


def queue_context1(queue, record_id):
    """Format 1's raw queue context: `vault.queue.v1` NUL queue NUL record id (no container id)."""
    return QUEUE_V1_PREFIX + b"\0" + queue + b"\0" + record_id


# --- XAES-256-GCM (c2sp.org/XAES-256-GCM) ---------------------------------------------------------


def _aes_block(key, block):
    encryptor = Cipher(algorithms.AES(key), modes.ECB()).encryptor()
    return encryptor.update(block) + encryptor.finalize()


def xaes_derive_key(key, nonce):
    """Kx from K and N[0..<12]: L = AES_K(0^128), K1 = dbl(L), Kx = AES_K(M1^K1) || AES_K(M2^K1)."""
    if len(key) != 32 or len(nonce) != 24:
        raise ValueError("XAES-256-GCM takes a 32-byte key and a 24-byte nonce")
    l_block = int.from_bytes(_aes_block(key, bytes(16)), "big")
    k1 = (l_block << 1) & ((1 << 128) - 1)
    if l_block >> 127:
        k1 ^= 0x87
    k1 = k1.to_bytes(16, "big")
    m1 = b"\x00\x01\x58\x00" + nonce[:12]
    m2 = b"\x00\x02\x58\x00" + nonce[:12]
    xor = lambda a, b: bytes(x ^ y for x, y in zip(a, b))  # noqa: E731
    encryptor = Cipher(algorithms.AES(key), modes.ECB()).encryptor()
    return encryptor.update(xor(m1, k1) + xor(m2, k1)) + encryptor.finalize()


def xaes_seal(key, nonce, plaintext, aad):
    return AESGCM(xaes_derive_key(key, nonce)).encrypt(nonce[12:], plaintext, aad or None)


def xaes_open(key, nonce, ciphertext, aad):
    return AESGCM(xaes_derive_key(key, nonce)).decrypt(nonce[12:], ciphertext, aad or None)


# --- format 2 ------------------------------------------------------------------------------------


def nonce2(random, encoded_context):
    return hashlib.sha256(NONCE_LABEL + random + encoded_context).digest()[:24]


def commitment2(key, nonce):
    return hashlib.sha256(COMMIT_LABEL + key + nonce).digest()


def seal2_detailed(plaintext, keyring, version, key, encoded_context, random=None):
    """Seals format 2; returns every intermediate value (for vectors) with the envelope."""
    if len(keyring) != 8 or len(key) != 32 or not 0 <= version <= MAX_VERSION:
        raise BadInput("keyring must be 8 bytes, key 32 bytes, version 0 ... 2^32-1")
    if random is None:
        random = os.urandom(R_SIZE)
    if len(random) != R_SIZE:
        raise BadInput("R must be 24 bytes")
    head = MAGIC + bytes([FORMAT2, SUITE2]) + keyring + struct.pack(">I", version) + random
    nonce = nonce2(random, encoded_context)
    commitment = commitment2(key, nonce)
    sealed = xaes_seal(key, nonce, plaintext, head + encoded_context)
    return {
        "nonce": nonce,
        "derived_key": xaes_derive_key(key, nonce),
        "commitment": commitment,
        "envelope": head + commitment + sealed,
    }


def seal2(plaintext, keyring, version, key, encoded_context, random=None):
    return seal2_detailed(plaintext, keyring, version, key, encoded_context, random)["envelope"]


def seal1(plaintext, keyring, version, key, context):
    header = MAGIC + bytes([FORMAT1, SUITE1]) + keyring + struct.pack(">I", version)
    nonce = os.urandom(12)
    return header + nonce + AESGCM(key).encrypt(nonce, plaintext, header + context)


# --- open (both formats) ---------------------------------------------------------------------------


def open_envelope(envelope, keyring, keys, context_for):
    """Opens format 1 or 2. `context_for(format)` returns the context bytes for that format:
    raw bytes for format 1, the encoded context E for format 2 (it may raise BadInput).

    Checks, in SECURITY.md's order: magic, format, suite, minimum length, keyring, version known,
    then (format 2) the key commitment in constant time before decrypting, then the GCM tag."""
    if len(envelope) < 3 or envelope[0:3] != MAGIC:
        raise EnvelopeError("not an envelope")
    if len(envelope) < 4:
        raise EnvelopeError("truncated")
    fmt = envelope[3]
    if fmt not in SUITE_OF_FORMAT:
        raise EnvelopeError("unsupported format")
    if len(envelope) < 5:
        raise EnvelopeError("truncated")
    if envelope[4] != SUITE_OF_FORMAT[fmt]:
        raise EnvelopeError("unsupported suite")
    if len(envelope) < MINIMUM_LENGTH[fmt]:
        raise EnvelopeError("truncated")
    context = context_for(fmt)
    if envelope[5:13] != keyring:
        raise EnvelopeError("wrong keyring")
    (version,) = struct.unpack(">I", envelope[13:17])
    if version not in keys:
        raise EnvelopeError("unknown key version")
    # Retired versions and a version's suite live in vault's manifest, which this tool does not
    # read: a keyfile holds neither, so "retired key version" and "suite mismatch" cannot arise.
    key = keys[version]
    if fmt == FORMAT1:
        nonce = envelope[17:29]
        aad = envelope[:AUTHENTICATED_HEADER1] + context
        try:
            return AESGCM(key).decrypt(nonce, envelope[HEADER1:], aad)
        except InvalidTag:
            raise EnvelopeError("authentication failed") from None
    random = envelope[17:41]
    nonce = nonce2(random, context)
    if not hmac.compare_digest(commitment2(key, nonce), envelope[41:73]):
        raise EnvelopeError("key commitment mismatch")
    aad = envelope[:AUTHENTICATED_HEADER2] + context
    try:
        return xaes_open(key, nonce, envelope[HEADER2:], aad)
    except InvalidTag:
        raise EnvelopeError("authentication failed") from None


def fixed_context(encoded_context):
    """A context_for that only accepts format 2, for vectors."""

    def context_for(fmt):
        if fmt != FORMAT2:
            raise EnvelopeError("unsupported format")
        return encoded_context

    return context_for


# --- vectors -------------------------------------------------------------------------------------

UUID_A = b"0f8e4c2a-9b1d-4e3f-8a7b-6c5d4e3f2a1b"


def vector_inputs():
    """Fixed, obviously-test inputs; the output of `vectors` is reproducible from these."""
    key = bytes(range(32))
    key2 = bytes(range(0x20, 0x40))
    keyring = bytes.fromhex("0011223344556677")
    r_seq = bytes(range(0x40, 0x58))
    r_same = bytes([0xA5] * 24)
    return [
        dict(name="app-empty-plaintext", key=key, keyring=keyring, version=1,
             random=r_seq, domain="app", parts=[b"test-context"], plaintext=b""),
        dict(name="app-one-byte", key=key, keyring=keyring, version=2,
             random=bytes(range(0x58, 0x70)), domain="app", parts=[b"test-context"],
             plaintext=b"\x2a"),
        dict(name="app-1000-bytes", key=key2, keyring=keyring, version=3,
             random=bytes(range(0x70, 0x88)), domain="app", parts=[b"bulk"],
             plaintext=bytes(i % 251 for i in range(1000))),
        dict(name="app-non-utf8-context", key=key, keyring=keyring, version=1,
             random=bytes(range(0x88, 0xA0)), domain="app", parts=[bytes.fromhex("fffe0080")],
             plaintext=b"non-UTF-8 context bytes"),
        dict(name="app-long-context", key=key, keyring=keyring, version=7,
             random=bytes(range(0xA0, 0xB8)), domain="app",
             parts=[b"a context longer than one SHA-256 block: " + b"0123456789" * 15],
             plaintext=b"several hash blocks"),
        dict(name="queue-context", key=key2, keyring=keyring, version=5,
             random=bytes(range(0xB8, 0xD0)), domain="queue",
             parts=[b"0123456789abcdef", b"outbox", UUID_A],
             plaintext=b'{"to":"https://example.invalid/hook","body":"hello"}'),
        dict(name="large-version", key=key, keyring=keyring, version=4294967294,
             random=bytes(range(0xD0, 0xE8)), domain="app", parts=[b"test-context"],
             plaintext=b"version 2^32 - 2"),
        dict(name="same-random-context-a", key=key, keyring=keyring, version=1,
             random=r_same, domain="app", parts=[b"context-a"], plaintext=b"same R, context A"),
        dict(name="same-random-context-b", key=key, keyring=keyring, version=1,
             random=r_same, domain="app", parts=[b"context-b"], plaintext=b"same R, context B"),
    ]


def compute_vector(inputs):
    encoded = encode_context(inputs["domain"], inputs["parts"])
    out = seal2_detailed(inputs["plaintext"], inputs["keyring"], inputs["version"],
                         inputs["key"], encoded, inputs["random"])
    out["encoded_context"] = encoded
    return out


def build_vectors():
    vectors = []
    for inputs in vector_inputs():
        out = compute_vector(inputs)
        vectors.append({
            "name": inputs["name"],
            "key": inputs["key"].hex(),
            "keyring": inputs["keyring"].hex(),
            "version": inputs["version"],
            "random": inputs["random"].hex(),
            "domain": inputs["domain"],
            "parts": [part.hex() for part in inputs["parts"]],
            "encoded_context": out["encoded_context"].hex(),
            "plaintext": inputs["plaintext"].hex(),
            "nonce": out["nonce"].hex(),
            "derived_key": out["derived_key"].hex(),
            "commitment": out["commitment"].hex(),
            "envelope": out["envelope"].hex(),
        })
    return {
        "description": "vault envelope format 2 (suite 2: XAES-256-GCM on a context-bound 192-bit "
                       "nonce, with a SHA-256 key commitment). From the inputs (key, keyring, "
                       "version, random = R, domain, parts, plaintext) compute encoded_context = E, "
                       "nonce = N, derived_key = Kx (XAES-256-GCM's per-record key from K and "
                       "N[0..<12]), commitment = C and the envelope; then open the envelope with "
                       "the same context. Generated by tools/interop/vault_envelope.py vectors.",
        "spec": "SECURITY.md, Envelopes / Format 2",
        "vectors": vectors,
    }


# --- selftest ------------------------------------------------------------------------------------

C2SP_VECTORS = [
    (b"\x01" * 32, b"ABCDEFGHIJKLMNOPQRSTUVWX", b"XAES-256-GCM", b"",
     "ce546ef63c9cc60765923609b33a9a1974e96e52daf2fcf7075e2271"),
    (b"\x03" * 32, b"ABCDEFGHIJKLMNOPQRSTUVWX", b"XAES-256-GCM", b"c2sp.org/XAES-256-GCM",
     "986ec1832593df5443a179437fd083bf3fdb41abd740a21f71eb769d"),
]

VECTOR_KEYS = {"name", "key", "keyring", "version", "random", "domain", "parts",
               "encoded_context", "plaintext", "nonce", "derived_key", "commitment", "envelope"}


def expected_failure(offset, plaintext_length):
    """The failure a flipped bit at `offset` of a format-2 envelope must produce."""
    if offset < 3:
        return {"not an envelope"}
    if offset == 3:
        return {"unsupported format"}  # 2 -> another value; 2 ^ 1 = 3, 2 ^ 2 = 0, ...; 1 -> suite
    if offset == 4:
        return {"unsupported suite"}
    if offset < 13:
        return {"wrong keyring"}
    if offset < 17:
        return {"unknown key version"}
    if offset < 73:
        return {"key commitment mismatch"}  # R changes N; C itself
    return {"authentication failed"}


def selftest(vectors_path):
    checks = 0
    failures = []

    def check(condition, what):
        nonlocal checks
        checks += 1
        if not condition:
            failures.append(what)

    for key, nonce, plaintext, aad, expected in C2SP_VECTORS:
        sealed = xaes_seal(key, nonce, plaintext, aad)
        check(sealed.hex() == expected, f"C2SP XAES-256-GCM vector (aad={aad!r}) seal")
        check(xaes_open(key, nonce, sealed, aad) == plaintext,
              f"C2SP XAES-256-GCM vector (aad={aad!r}) open")

    with open(vectors_path, encoding="utf-8") as f:
        document = json.load(f)
    vectors = document["vectors"]
    check(len(vectors) > 0, "vectors file holds vectors")
    for vector in vectors:
        name = vector.get("name", "?")
        check(set(vector) == VECTOR_KEYS, f"{name}: keys of the vector object")
        inputs = dict(
            key=bytes.fromhex(vector["key"]), keyring=bytes.fromhex(vector["keyring"]),
            version=vector["version"], random=bytes.fromhex(vector["random"]),
            domain=vector["domain"], parts=[bytes.fromhex(p) for p in vector["parts"]],
            plaintext=bytes.fromhex(vector["plaintext"]))
        out = compute_vector(inputs)
        for field in ("encoded_context", "nonce", "derived_key", "commitment", "envelope"):
            check(out[field].hex() == vector[field], f"{name}: {field}")
        envelope = bytes.fromhex(vector["envelope"])
        plaintext = inputs["plaintext"]
        check(len(envelope) == len(plaintext) + 89, f"{name}: envelope length")
        try:
            check(xaes_open(inputs["key"], out["nonce"], envelope[73:],
                            envelope[:41] + out["encoded_context"]) == plaintext,
                  f"{name}: XAES-256-GCM open of ciphertext and tag")
        except InvalidTag:
            check(False, f"{name}: XAES-256-GCM open of ciphertext and tag failed")
        keys = {inputs["version"]: inputs["key"]}
        context = fixed_context(bytes.fromhex(vector["encoded_context"]))
        try:
            opened = open_envelope(envelope, inputs["keyring"], keys, context)
            check(opened == plaintext, f"{name}: open returns the plaintext")
        except EnvelopeError as error:
            check(False, f"{name}: open failed ({error.kind})")
        # Every single-bit change must fail, with the failure its position implies.
        wrong = 0
        for offset in range(len(envelope)):
            for bit in range(8):
                modified = bytearray(envelope)
                modified[offset] ^= 1 << bit
                expected = expected_failure(offset, len(plaintext))
                if offset == 3 and modified[3] == FORMAT1:
                    expected = {"unsupported suite"}  # format 1 with suite 2
                try:
                    open_envelope(bytes(modified), inputs["keyring"], keys, context)
                    wrong += 1
                except EnvelopeError as error:
                    if error.kind not in expected:
                        wrong += 1
        check(wrong == 0, f"{name}: {wrong} single-bit changes opened or failed wrongly")
        # Truncations fail.
        for length in (0, 2, 3, 4, 5, 88, len(envelope) - 1):
            if length < len(envelope):
                try:
                    open_envelope(envelope[:length], inputs["keyring"], keys, context)
                    check(False, f"{name}: truncated to {length} opened")
                except EnvelopeError as error:
                    check(error.kind in {"truncated", "not an envelope", "authentication failed"},
                          f"{name}: truncated to {length} failed as {error.kind}")
        # Other contexts: a changed last part, an extra part, another domain.
        parts = inputs["parts"]
        others = [
            (inputs["domain"], parts[:-1] + [parts[-1][:-1] + bytes([parts[-1][-1] ^ 1])]
             if parts[-1] else parts[:-1] + [b"x"]),
            (inputs["domain"], parts + [b""]),
            ("other" if inputs["domain"] != "other" else "app", parts),
        ]
        for domain, other_parts in others:
            try:
                open_envelope(envelope, inputs["keyring"], keys,
                              fixed_context(encode_context(domain, other_parts)))
                check(False, f"{name}: opened under another context")
            except EnvelopeError as error:
                check(error.kind == "key commitment mismatch",
                      f"{name}: another context failed as {error.kind}")
        # Another key under the same version fails at the commitment.
        other_key = bytes(b ^ 0x80 for b in inputs["key"])
        try:
            open_envelope(envelope, inputs["keyring"], {inputs["version"]: other_key}, context)
            check(False, f"{name}: opened under another key")
        except EnvelopeError as error:
            check(error.kind == "key commitment mismatch",
                  f"{name}: another key failed as {error.kind}")

    # The two same-R vectors must have different nonces.
    by_random = {}
    for vector in vectors:
        by_random.setdefault(vector["random"], []).append(vector)
    for group in by_random.values():
        if len(group) > 1:
            check(len({v["nonce"] for v in group}) == len(group),
                  "vectors with one R and different contexts have different nonces")

    # Round trips through both formats, with random R and nonces.
    key, keyring = os.urandom(32), os.urandom(8)
    for fmt in (FORMAT1, FORMAT2):
        raw, encoded = b"round-trip", app_context2(b"round-trip")
        context_for = lambda f: raw if f == FORMAT1 else encoded  # noqa: E731
        sealed = (seal1(b"data", keyring, 9, key, raw) if fmt == FORMAT1
                  else seal2(b"data", keyring, 9, key, encoded))
        check(open_envelope(sealed, keyring, {9: key}, context_for) == b"data",
              f"format {fmt} round trip")
        check(len(sealed) == 4 + MINIMUM_LENGTH[fmt], f"format {fmt} length")

    for failure in failures:
        print(f"FAIL: {failure}", file=sys.stderr)
    print(f"selftest: {checks - len(failures)} of {checks} checks passed "
          f"({len(C2SP_VECTORS)} C2SP vectors, {len(vectors)} envelope vectors)")
    return 0 if not failures else 1


# --- command line --------------------------------------------------------------------------------


def default_vectors_path():
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "vectors",
                        "envelope-format2.json")


def context_builder(args):
    """Returns context_for(format) -> bytes from --context or --queue-context."""
    if args.context is not None:
        raw = os.fsencode(args.context)
        return lambda fmt: raw if fmt == FORMAT1 else app_context2(raw)
    container_id, queue, record_id = (os.fsencode(value) for value in args.queue_context)
    return lambda fmt: (queue_context1(queue, record_id) if fmt == FORMAT1
                        else queue_context2(container_id, queue, record_id))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["open", "seal", "selftest", "vectors"])
    parser.add_argument("--keyfile")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--context")
    group.add_argument("--queue-context", nargs=3,
                       metavar=("CONTAINER_ID", "QUEUE", "RECORD_ID"))
    parser.add_argument("--version", type=int)
    parser.add_argument("--format", type=int, choices=[1, 2], default=2)
    parser.add_argument("--vectors", default=default_vectors_path(),
                        help="vectors file for selftest")
    args = parser.parse_args()

    if args.action == "selftest":
        try:
            return selftest(args.vectors)
        except (OSError, ValueError, KeyError, TypeError, BadInput) as error:
            print(f"Error: vectors file: {type(error).__name__}: {error}", file=sys.stderr)
            return 2
    if args.action == "vectors":
        sys.stdout.write(json.dumps(build_vectors(), indent=2) + "\n")
        return 0

    if args.keyfile is None:
        print("Error: --keyfile is required", file=sys.stderr)
        return 2
    if args.context is None and args.queue_context is None:
        print("Error: --context or --queue-context is required", file=sys.stderr)
        return 2
    try:
        keyring, keys = read_keyfile(args.keyfile)
    except (OSError, ValueError) as error:
        print(f"Error: {error}", file=sys.stderr)
        return 2
    context_for = context_builder(args)
    data = sys.stdin.buffer.read()

    if args.action == "open":
        try:
            plaintext = open_envelope(data, keyring, keys, context_for)
        except BadInput as error:
            print(f"Error: {error}", file=sys.stderr)
            return 2
        except EnvelopeError as error:
            print(f"Error: {error.kind}", file=sys.stderr)
            return 1
        sys.stdout.buffer.write(plaintext)
        return 0

    if not keys:
        print("Error: the keyfile holds no key", file=sys.stderr)
        return 2
    version = args.version if args.version is not None else max(keys)
    if version not in keys:
        print(f"Error: key version {version} is not in the keyfile", file=sys.stderr)
        return 2
    if args.context is not None and args.context == "":
        print("Error: an empty context is refused when sealing", file=sys.stderr)
        return 2
    try:
        context = context_for(args.format)
        if args.format == FORMAT1:
            sealed = seal1(data, keyring, version, keys[version], context)
        else:
            sealed = seal2(data, keyring, version, keys[version], context)
    except BadInput as error:
        print(f"Error: {error}", file=sys.stderr)
        return 2
    sys.stdout.buffer.write(sealed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
