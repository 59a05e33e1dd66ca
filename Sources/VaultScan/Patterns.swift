import Foundation

// glibc declares memmem only under _GNU_SOURCE, which Swift's Glibc module does not set.
@_silgen_name("memmem")
private func memmem(
  _ haystack: UnsafeRawPointer?, _ haystackLength: Int, _ needle: UnsafeRawPointer?, _ needleLength: Int
) -> UnsafeMutableRawPointer?

/// A byte pattern to look for, and how it was derived from a canary.
struct Pattern {
  let bytes: [UInt8]
  /// The encoding that produced it: utf8, utf16le, utf16be, base64, hex, json-escaped, url-encoded.
  let encoding: String
  /// Which canary (by index) it came from.
  let canary: Int
}

enum Patterns {
  /// Every form of `canary` worth searching for: UTF-8, UTF-16LE/BE, base64 (at each of the three
  /// alignments, keeping only characters that depend on the canary alone), hex (both cases),
  /// JSON-escaped and URL-encoded.
  static func variants(of canary: String, index: Int) -> [Pattern] {
    let utf8 = Array(canary.utf8)
    var patterns = [Pattern(bytes: utf8, encoding: "utf8", canary: index)]
    let utf16 = Array(canary.utf16)
    patterns.append(
      Pattern(bytes: utf16.flatMap { [UInt8($0 & 0xff), UInt8($0 >> 8)] }, encoding: "utf16le", canary: index))
    patterns.append(
      Pattern(bytes: utf16.flatMap { [UInt8($0 >> 8), UInt8($0 & 0xff)] }, encoding: "utf16be", canary: index))
    for shift in 0..<3 where utf8.count - shift >= 6 {
      // base64 of canary[shift...], cut to whole 3-byte groups: identical wherever the canary sits.
      let tail = Array(utf8[shift...])
      let whole = Array(tail.prefix(tail.count / 3 * 3))
      patterns.append(Pattern(bytes: Array(Data(whole).base64EncodedString().utf8), encoding: "base64", canary: index))
    }
    let hex = utf8.map { String(format: "%02x", $0) }.joined()
    patterns.append(Pattern(bytes: Array(hex.utf8), encoding: "hex", canary: index))
    patterns.append(Pattern(bytes: Array(hex.uppercased().utf8), encoding: "hex", canary: index))
    // JSON writers differ: '/' escaped or not, non-ASCII raw or as \u escapes in either case.
    var escapedForms = Set<String>()
    // Writers differ in four ways: "/" escaped or not; non-ASCII raw or as \u in either case;
    // control characters as \n, \t … (most) or all as \u; "<", ">", "&" as \u (Go's default).
    for escapeSlash in [false, true] {
      for nonASCII in [JSONNonASCII.raw, .lowercase, .uppercase] {
        for shortControls in [false, true] {
          for htmlSafe in [false, true] {
            escapedForms.insert(
              jsonEscaped(
                canary, escapeSlash: escapeSlash, nonASCII: nonASCII, shortControls: shortControls,
                htmlSafe: htmlSafe))
          }
        }
      }
    }
    escapedForms.remove(canary)
    for form in escapedForms.sorted() {
      patterns.append(Pattern(bytes: Array(form.utf8), encoding: "json-escaped", canary: index))
    }
    // URL-encoded, as request logs, caches and form bodies keep it: writers differ in the
    // punctuation they leave as it is, the case of their hex digits, non-ASCII encoded or not, and
    // a space as %20 or "+" (only where "+" itself is encoded: a form where both read "+" says
    // nothing new). A form with fewer than four letters and digits ("++++" for a canary of spaces)
    // would match in any base64 (second review) and is not searched.
    // Text in Latin-1 (ISO-8859-1) is encoded too, for a canary Latin-1 can hold, as a form post
    // from a page in that charset or Java's `URLEncoder.encode(s, "ISO-8859-1")` sends it: é as
    // %E9 (review).
    let scalars = canary.unicodeScalars
    let latin1 =
      scalars.contains(where: { $0.value >= 0x80 }) && scalars.allSatisfy({ $0.value <= 0xff })
      ? [(scalars.map { UInt8($0.value) }, latin1URLStyles)] : []
    var urlForms: Set<[UInt8]> = [javaScriptEscaped(canary)]
    for (text, styles) in [(utf8, urlStyles)] + latin1 {
      for style in styles {
        for uppercase in [true, false] {
          for spaceAsPlus in [false, true] where !spaceAsPlus || !style.unencoded.contains(UInt8(ascii: "+")) {
            urlForms.insert(
              urlEncoded(
                text, leaving: style.unencoded, encodingNonASCII: style.encodesNonASCII, uppercase: uppercase,
                spaceAsPlus: spaceAsPlus))
          }
        }
      }
    }
    urlForms.remove(utf8)
    for form in urlForms.sorted(by: { $0.lexicographicallyPrecedes($1) })
    where form.count(where: { isASCIIAlphanumeric($0) }) >= 4 {
      patterns.append(Pattern(bytes: form, encoding: "url-encoded", canary: index))
    }
    return patterns
  }

  static func isASCIIAlphanumeric(_ byte: UInt8) -> Bool {
    (0x30...0x39).contains(byte) || (0x41...0x5a).contains(byte) || (0x61...0x7a).contains(byte)
  }

  /// How URL encoders write text: the ASCII punctuation they leave as it is (letters and digits
  /// always are) and whether they leave non-ASCII as it is, one per kind of writer, from their
  /// specifications and documentation:
  /// - RFC 3986 §2.3 "unreserved" (Go's `url.QueryEscape`, PHP's `rawurlencode`, Python's
  ///   `quote_plus`), and the same with non-ASCII left (an IRI, RFC 3987);
  /// - the same and `/` (Python's `urllib.parse.quote`, whose `safe` is "/" by default);
  /// - ECMAScript's `encodeURIComponent` and `encodeURI` (ECMA-262, "URI Handling Functions");
  /// - the WHATWG URL standard: its application/x-www-form-urlencoded set (browsers' form posts;
  ///   Java's `URLEncoder` leaves the same), and what its serializer leaves in a path and in a
  ///   special scheme's query (`new URL`, `fetch`: `[`, `|`, `%` and more as they are);
  /// - PHP's `urlencode`;
  /// - Go's `url.PathEscape` (a path segment keeps `$&+:=@`) and `URL.String` for a path (also
  ///   `,` and `;`, not `(` `)`);
  /// - Java's `java.net.URI` multi-argument constructors for a path (RFC 2396's punctuation
  ///   kept, non-ASCII left as it is).
  static let urlStyles: [(unencoded: Set<UInt8>, encodesNonASCII: Bool)] = [
    ("-._~", true), ("-._~", false), ("-._~/", true), ("-._~!*'()", true), ("-._~!*'();/?:@&=+$,#", true),
    ("-._*", true), ("!$%&'()*+,-./:;=@[\\]^_|~", true), ("!$%&()*+,-./:;=?@[\\]^_`{|}~", true), ("-._", true),
    ("-._~$&+:=@", true), ("-._~$&+,/:;=@", true), ("-._~!*'(),;:$&+=/@", false),
  ].map { (Set($0.0.utf8), $0.1) }

  /// The writers of Latin-1 text: form posts (WHATWG's set, Java's `URLEncoder`) and RFC 3986's
  /// unreserved set.
  static let latin1URLStyles: [(unencoded: Set<UInt8>, encodesNonASCII: Bool)] = [
    (Set("-._*".utf8), true), (Set("-._~".utf8), true),
  ]

  /// ECMAScript's legacy `escape` (ECMA-262 Annex B): letters, digits and `@*_+-./` as they are,
  /// other code units below 256 as %XX (Latin-1, uppercase), the rest as %uXXXX.
  static func javaScriptEscaped(_ text: String) -> [UInt8] {
    var out: [UInt8] = []
    for unit in text.utf16 {
      if unit < 0x80, isASCIIAlphanumeric(UInt8(unit)) || "@*_+-./".utf8.contains(UInt8(unit)) {
        out.append(UInt8(unit))
      } else if unit < 0x100 {
        out += Array(String(format: "%%%02X", unit).utf8)
      } else {
        out += Array(String(format: "%%u%04X", unit).utf8)
      }
    }
    return out
  }

  /// `bytes` percent-encoded: ASCII letters, digits and the `unencoded` punctuation as they are,
  /// the bytes of non-ASCII characters as they are unless `encodingNonASCII`, a space as "+" when
  /// `spaceAsPlus`, every other byte as "%XX" in the given case.
  static func urlEncoded(
    _ bytes: [UInt8], leaving unencoded: Set<UInt8>, encodingNonASCII: Bool = true, uppercase: Bool,
    spaceAsPlus: Bool
  ) -> [UInt8] {
    let digits = Array((uppercase ? "0123456789ABCDEF" : "0123456789abcdef").utf8)
    var out: [UInt8] = []
    for byte in bytes {
      if isASCIIAlphanumeric(byte) || unencoded.contains(byte) || (byte >= 0x80 && !encodingNonASCII) {
        out.append(byte)
      } else if byte == 0x20, spaceAsPlus {
        out.append(UInt8(ascii: "+"))
      } else {
        out += [UInt8(ascii: "%"), digits[Int(byte >> 4)], digits[Int(byte & 0xf)]]
      }
    }
    return out
  }

  enum JSONNonASCII { case raw, lowercase, uppercase }

  static func jsonEscaped(
    _ text: String, escapeSlash: Bool = true, nonASCII: JSONNonASCII = .lowercase, shortControls: Bool = false,
    htmlSafe: Bool = false
  ) -> String {
    // RFC 8259 §7: the two-character escapes for these five controls, \uXXXX for any character.
    let short: [Unicode.Scalar: String] = ["\u{8}": "\\b", "\u{c}": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"]
    var out = ""
    for scalar in text.unicodeScalars {
      switch scalar {
      case "\"": out += "\\\""
      case "\\": out += "\\\\"
      case "/" where escapeSlash: out += "\\/"
      case _ where shortControls && short[scalar] != nil: out += short[scalar, default: ""]
      case _ where htmlSafe && (scalar == "<" || scalar == ">" || scalar == "&"):
        out += String(format: nonASCII == .uppercase ? "\\u%04X" : "\\u%04x", scalar.value)
      case _ where scalar.value < 0x20 || (scalar.value > 0x7e && nonASCII != .raw):
        for unit in String(scalar).utf16 { out += String(format: nonASCII == .uppercase ? "\\u%04X" : "\\u%04x", unit) }
      default: out.unicodeScalars.append(scalar)
      }
    }
    return out
  }

  /// Finds every occurrence of `needle` in `haystack`, as offsets. Short needles (up to 4 bytes)
  /// use memchr on the first byte, which is vectorised; longer ones use memmem, as do short ones
  /// whose first byte is common (`longNeedle`).
  static func occurrences(of needle: [UInt8], in haystack: UnsafeRawBufferPointer, longNeedle: Bool = false) -> [Int] {
    guard !needle.isEmpty, haystack.count >= needle.count, let base = haystack.baseAddress else { return [] }
    var found: [Int] = []
    if needle.count <= 4, !longNeedle {
      var position = 0
      let last = haystack.count - needle.count
      while position <= last {
        guard let hit = memchr(base + position, Int32(needle[0]), last - position + 1) else { break }
        let offset = base.distance(to: UnsafeRawPointer(hit))
        var matches = true
        for index in 1..<needle.count where haystack[offset + index] != needle[index] {
          matches = false
          break
        }
        if matches { found.append(offset) }
        position = offset + 1
      }
      return found
    }
    var offset = 0
    needle.withUnsafeBytes { needleBytes in
      while offset <= haystack.count - needle.count {
        guard let hit = memmem(base + offset, haystack.count - offset, needleBytes.baseAddress, needle.count) else {
          break
        }
        let position = base.distance(to: UnsafeRawPointer(hit))
        found.append(position)
        offset = position + 1
      }
    }
    return found
  }
}

/// A redacted excerpt of key material: its length only. Even two characters of a base64 key are
/// 12 of its bits in a log (outside operator review).
func redactKey<Bytes: Collection<UInt8>>(_ bytes: Bytes) -> String { "(\(bytes.count) bytes, redacted)" }

/// A redacted excerpt: the first two characters of what matched, its length, and nothing else.
func redact<Bytes: Collection<UInt8>>(_ bytes: Bytes) -> String {
  let printable = bytes.prefix(2).map { $0 >= 0x20 && $0 < 0x7f ? String(UnicodeScalar($0)) : "." }.joined()
  return "\(printable)… (\(bytes.count) bytes, redacted)"
}
