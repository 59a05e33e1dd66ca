import Foundation
import VaultCrypto

extension Scanner {
  /// Key material that makes up a whole file: a vault keyfile (exact: its checksum), 32 random-looking
  /// bytes (optionally with a newline), or a small text file with a line that is, apart from an
  /// optional `NAME=` / `NAME:` / `export NAME=` and quotes, 32 random-looking bytes in hex or base64
  /// (standard or URL-safe, padded or not): a key file or an `.env` file. Armoured (PEM) keys are
  /// found anywhere, chunk by chunk, by `KeyMaterial.armouredKeys`. `wholeFile` says the key is all
  /// the file holds (nothing else to search); a key line leaves the rest of its file to search.
  func keyMaterial(fd: Int32, size: Int, path: String) -> (finding: Finding, wholeFile: Bool)? {
    guard size >= 32, size <= 1 << 20 else { return nil }
    let bytes = RegionMap.read(fd, at: 0, count: min(size, 65536))
    if size == 32 || (size == 33 && bytes.last == 0x0a), bytes.count >= 32,
      KeyMaterial.looksRandom(bytes[0..<32]), !KeyMaterial.isSQLiteHeader(bytes)
    {
      let finding = Finding(
        file: path, offset: 0, region: "file", detector: "key-material", encoding: "raw-32-bytes",
        excerpt: "32 random-looking bytes (possible raw key, redacted)")
      return (finding, true)
    }
    // (Armour is the PEM detector's: a certificate's base64 lines are not keys.)
    let armoured = bytes.withUnsafeBytes { !Patterns.occurrences(of: Array("-----BEGIN ".utf8), in: $0).isEmpty }
    if size <= 65536, !armoured, ContentKind.isText(bytes[...]), let line = KeyMaterial.encodedKeyLine(bytes) {
      let finding = Finding(
        file: path, offset: line.offset, region: "file", detector: "key-material", encoding: line.encoding,
        excerpt: redactKey(bytes[line.offset..<line.end]))
      return (finding, line.wholeFile)
    }
    guard size >= 48 else { return nil }
    let whole = size <= bytes.count ? bytes : RegionMap.read(fd, at: 0, count: size)
    guard whole.count == size, whole.withUnsafeBytes({ KeyMaterial.isVaultKeyfile($0) }) else { return nil }
    let finding = Finding(
      file: path, offset: 0, region: "file", detector: "key-material", encoding: "vault-keyfile",
      excerpt: "a vault keyfile (redacted); keys belong outside the data directory")
    return (finding, true)
  }
}

/// How key material looks in the encodings people store it in.
///
/// Exact: a vault keyfile (format and checksum) and PEM armour (`-----BEGIN … KEY-----`, a base64
/// body of at least 48 bytes, the matching `-----END` line). Heuristic: 32 bytes that look random,
/// raw or as hex or base64, when they make up a whole file or a whole line of a small text file:
/// 32 bytes inside a larger binary file cannot be told from ciphertext, and are not judged.
enum KeyMaterial {
  /// Whether `bytes` are exactly a vault keyfile: `VKF`, format 1 or 2, and (both formats end so)
  /// the SHA-256 of everything before the last 32 bytes in those 32 bytes.
  static func isVaultKeyfile(_ bytes: UnsafeRawBufferPointer) -> Bool {
    guard bytes.count >= 48, bytes.starts(with: "VKF".utf8), bytes[3] == 1 || bytes[3] == 2,
      let digest = try? SHA256.hash(UnsafeRawBufferPointer(rebasing: bytes[..<(bytes.count - 32)]))
    else { return false }
    return digest.elementsEqual(bytes[(bytes.count - 32)...])
  }

  /// 32 bytes that look random: at least 24 distinct values (uniform random bytes have about 30;
  /// none of 200,000 draws here had fewer than 24) and at most 24 printable ASCII bytes (random
  /// bytes have 12 on average), so a short text (a linker script, `INPUT(libfoo.so.6)`) is no key.
  static func looksRandom(_ bytes: ArraySlice<UInt8>) -> Bool {
    guard bytes.count == 32 else { return false }
    let printable = bytes.filter { $0 >= 0x20 && $0 < 0x7f }.count
    return Set(bytes).count >= 24 && printable <= 24
  }

  /// A SQLite WAL header (magic 0x377f0682 or 0x377f0683, 32 bytes when the WAL holds no frame),
  /// a rollback journal header or a database header: structure, not a key.
  static func isSQLiteHeader(_ bytes: [UInt8]) -> Bool {
    guard bytes.count >= 8 else { return false }
    if bytes[0] == 0x37, bytes[1] == 0x7f, bytes[2] == 0x06, bytes[3] == 0x82 || bytes[3] == 0x83 { return true }
    if bytes[0..<8].elementsEqual([0xd9, 0xd5, 0x05, 0xf9, 0x20, 0xa1, 0x63, 0xd7]) { return true }
    return bytes.starts(with: Array("SQLite format 3".utf8))
  }

  /// The encoded 32-byte key in `text` (see `Scanner.keyMaterial`), with where its line starts and
  /// ends, its encoding (hex, base64 or base64url) and whether it is all the file holds: the whole
  /// file is the key (and white space),
  /// or a line assigns it to a name (`NAME=…`, `export NAME="…"`, `name: …`). A bare line of hex in
  /// a larger file is a test vector or a digest as often as a key, and is not judged.
  static func encodedKeyLine(_ text: [UInt8]) -> (offset: Int, end: Int, encoding: String, wholeFile: Bool)? {
    let first = text.firstIndex { $0 > 0x20 } ?? text.count
    let last = (text.lastIndex { $0 > 0x20 } ?? -1) + 1
    if first < last, last - first <= 66,
      let encoding = keyToken(String(decoding: text[first..<last], as: UTF8.self), named: false)
    {
      return (first, last, encoding, true)
    }
    var start = 0
    while start < text.count {
      let end = text[start...].firstIndex(of: 0x0a) ?? text.count
      // A key line is short: a name, 43 to 64 characters of key and some quoting.
      if end - start >= 43, end - start <= 256,
        let encoding = keyToken(String(decoding: text[start..<end], as: UTF8.self), named: true)
      {
        return (start, end, encoding, false)
      }
      start = end + 1
    }
    return nil
  }

  /// Names that say the value is a digest (a checksum of something public), not a key.
  private static let digestNames = ["sha1", "sha2", "sha256", "sha384", "sha512", "md5", "hash", "digest", "checksum"]
  /// Words of a name (split at `_`, `-`, `.`) that say the value authenticates something (vault's
  /// own manifest ends in `"mac": "<64 hex>"`): the output of a key, not one.
  private static let authenticatorNames: Set = ["mac", "hmac", "tag", "signature", "sig"]

  /// The encoding of the key `line` holds, if any; `named`: only as the value of `NAME=` or `NAME:`.
  private static func keyToken(_ line: String, named: Bool) -> String? {
    var value = Substring(line.trimmingCharacters(in: .whitespacesAndNewlines))
    if named, value.hasPrefix("export ") { value = value.dropFirst(7).drop { $0 == " " } }
    if named {
      // A JSON (or Python, JavaScript) member `"name": "value",` is a name and its value too.
      if let quote = value.first, quote == "\"" || quote == "'", let close = value.dropFirst().firstIndex(of: quote) {
        let rest = value[value.index(after: close)...].drop { $0 == " " }
        guard rest.first == ":" else { return nil }
        let name = value[value.index(after: value.startIndex)..<close]
        value = name + rest
        if value.last == "," { value = value.dropLast() }
      }
      guard let separator = value.firstIndex(where: { $0 == "=" || $0 == ":" }) else { return nil }
      // Shell and .env syntax put nothing between the name and '=', YAML nothing before ':';
      // `xs = "…"` is source code (a test vector, a curve point) as often as a secret.
      let name = value[..<separator]
      let isName =
        !name.isEmpty && name.first.map { $0.isLetter || $0 == "_" } == true
        && name.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "_" || $0 == "." || $0 == "-") }
      guard isName else { return nil }
      let lowered = name.lowercased()
      if digestNames.contains(where: { lowered.contains($0) }) { return nil }
      let words = lowered.split { $0 == "_" || $0 == "-" || $0 == "." }
      if words.contains(where: { authenticatorNames.contains(String($0)) }) { return nil }
      value = value[value.index(after: separator)...].drop { $0 == " " }
    }
    if let quote = value.first, quote == "\"" || quote == "'", value.count >= 2, value.last == quote {
      value = value.dropFirst().dropLast()
    }
    let token = Array(value.utf8)
    if token.count == 64, let key = hexDecoded(token), looksRandom(key[...]) { return "hex" }
    guard token.count == 43 || token.count == 44 else { return nil }
    let hasUpper = token.contains { $0 >= 0x41 && $0 <= 0x5a }
    let hasLower = token.contains { $0 >= 0x61 && $0 <= 0x7a }
    let hasOther = token.contains { !($0 >= 0x41 && $0 <= 0x5a) && !($0 >= 0x61 && $0 <= 0x7a) && $0 != 0x3d }
    guard hasUpper, hasLower, hasOther else { return nil }
    let urlSafe = token.contains { $0 == 0x2d || $0 == 0x5f }
    var standard = String(decoding: token, as: UTF8.self)
    if urlSafe {
      standard = standard.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
    }
    if standard.count == 43 { standard += "=" }
    guard let key = Data(base64Encoded: standard), key.count == 32, looksRandom(Array(key)[...]) else { return nil }
    return urlSafe ? "base64url" : "base64"
  }

  private static func hexDecoded(_ token: [UInt8]) -> [UInt8]? {
    func nibble(_ byte: UInt8) -> UInt8? {
      switch byte {
      case 0x30...0x39: byte - 0x30
      case 0x41...0x46: byte - 0x41 + 10
      case 0x61...0x66: byte - 0x61 + 10
      default: nil
      }
    }
    var out: [UInt8] = []
    for index in stride(from: 0, to: token.count - 1, by: 2) {
      guard let high = nibble(token[index]), let low = nibble(token[index + 1]) else { return nil }
      out.append(high << 4 | low)
    }
    return out
  }

  private static func isBase64(_ byte: UInt8) -> Bool {
    (byte >= 0x41 && byte <= 0x5a) || (byte >= 0x61 && byte <= 0x7a) || (byte >= 0x30 && byte <= 0x39) || byte == 0x2b
      || byte == 0x2f || byte == 0x3d
  }

  /// Every offset of `-----BEGIN ` in `bytes`, in order (the offsets memmem gives, for a fraction
  /// of its cost, which was about an instruction a byte on any data): memchr (vectorised) to the
  /// next `-`, at `q`. Every occurrence that starts from `q` to `q + 4` has a `-` at `q + 4` (its
  /// five dashes cover it), so without one the search goes on from `q + 5`; with one, `q` is
  /// compared in full and the search goes on from `q + 1`. (A `-` turns up once in 256 random
  /// bytes; in a log, a date's two dashes cost one memchr.)
  static func beginLines(_ bytes: UnsafeRawBufferPointer, vectorised: Bool = PairFilter.available) -> [Int] {
    guard bytes.count >= beginLine.count, let base = bytes.baseAddress else { return [] }
    var found: [Int] = []
    let last = bytes.count - beginLine.count
    var position = 0
    beginLine.withUnsafeBytes { begin in
      // With AVX2, positions of a `-` with a `B` five bytes on, 32 at a time (random data: one in
      // 65,536; a line of dashes: none), each compared in full; the rest (and every position
      // without AVX2) by memchr.
      if vectorised {
        position = beginPair.forEachMatch(in: bytes, from: 0) { candidate in
          if candidate <= last, memcmp(base + candidate, begin.baseAddress!, begin.count) == 0 {
            found.append(candidate)
          }
          return candidate + 1
        }
      }
      while position <= last, let hit = memchr(base + position, 0x2d, last - position + 1) {
        let offset = base.distance(to: UnsafeRawPointer(hit))
        // (offset + 4 is inside `bytes`: offset <= last.)
        guard base.load(fromByteOffset: offset + 4, as: UInt8.self) == 0x2d else {
          position = offset + 5
          continue
        }
        if memcmp(base + offset, begin.baseAddress!, begin.count) == 0 { found.append(offset) }
        position = offset + 1
      }
    }
    return found
  }

  private static let beginLine = Array("-----BEGIN ".utf8)
  private static let beginPair = SpacedPair(first: 0x2d, distance: 5, second: ByteClass { $0 == 0x42 })

  /// PEM-armoured keys anywhere in `bytes`: `-----BEGIN <label>-----` where the label names a key
  /// and not a public one (`PRIVATE KEY`, `RSA PRIVATE KEY`, `OPENSSH PRIVATE KEY`, `PGP PRIVATE KEY
  /// BLOCK`, `ENCRYPTED PRIVATE KEY`, any `… KEY`), then at least 64 base64 characters (48 bytes),
  /// then `-----END <label>-----`. Header lines (`Proc-Type:`, `Version:`) may open the body; any
  /// other line ends the block unmatched. A block the buffer cuts off inside its base64 lines or its
  /// END line counts: the chunk ended inside it.
  static func armouredKeys(_ bytes: UnsafeRawBufferPointer) -> [(start: Int, end: Int)] {
    let begin = beginLine
    var found: [(Int, Int)] = []
    var resumeAt = 0
    for start in beginLines(bytes) where start >= resumeAt {
      var at = start + begin.count
      var label: [UInt8] = []
      while at < bytes.count, label.count <= 64,
        (bytes[at] >= 0x41 && bytes[at] <= 0x5a) || bytes[at] == 0x20
          || (bytes[at] >= 0x30 && bytes[at] <= 0x39)
      {
        label.append(bytes[at])
        at += 1
      }
      let name = String(decoding: label, as: UTF8.self)
      guard name.split(separator: " ").contains("KEY"), !name.contains("PUBLIC"),
        at + 5 <= bytes.count, bytes[at..<(at + 5)].elementsEqual(Array("-----".utf8))
      else { continue }
      at += 5
      let end = Array(("-----END " + name + "-----").utf8)
      // As the lines are compared: without the spaces every line is read without.
      let endLine = end.filter { $0 != 0x20 }
      var base64 = 0
      var closed = false
      var cut = false
      // Line by line: optional `Name: value` headers, then lines of base64 only, then the end line.
      while !closed {
        var lineEnd = at
        while lineEnd < bytes.count, bytes[lineEnd] != 0x0a { lineEnd += 1 }
        let line = bytes[at..<lineEnd].filter { $0 != 0x0d && $0 != 0x20 && $0 != 0x09 }
        if line.starts(with: endLine) {
          closed = true
          at += end.count
        } else if line.allSatisfy(isBase64) {
          base64 += line.count
        } else if lineEnd >= bytes.count, endLine.starts(with: line) {
          // The buffer ends inside the END line: the chunk cut the block (the next chunk starts
          // after its BEGIN line and cannot report it).
          cut = true
          break
        } else if !(base64 == 0 && line.contains(0x3a) && line.allSatisfy { $0 > 0x20 && $0 < 0x7f }) {
          break
        }
        if lineEnd >= bytes.count {
          cut = !closed
          break
        }
        if !closed { at = lineEnd + 1 }
      }
      at = min(at, bytes.count)
      if base64 >= 64, closed || cut { found.append((start, at)) }
      // Whatever this attempt read is not read again: a BEGIN inside a header line it passed over
      // is no block's start (a real BEGIN line has no colon, so the attempt stops before it), and
      // rescanning would make a file of such lines quadratic (a 768 KB file took over a minute).
      resumeAt = max(resumeAt, at)
    }
    return found
  }
}
