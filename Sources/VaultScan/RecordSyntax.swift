import Foundation

/// The syntaxes programs write records in, recognised by their structure: JSON objects and arrays
/// (compact, pretty-printed, `"k" : v`), Python dict reprs, YAML `key: value` lines, CSV rows and
/// XML elements. `TextDetectors` decides where each of them is a finding.
enum RecordSyntax {
  /// An object (`{…}`) parsed from its opening brace, as far as it is well formed.
  struct Object {
    /// The quote its strings use: `"` (JSON) or `'` (a Python repr).
    let quote: UInt8
    let start: Int
    /// Where the well-formed part ends: after the closing brace, or where parsing stopped.
    let end: Int
    /// Members of the object itself (not of nested values) whose value parsed whole.
    let members: Int
    /// Every member's value is a string, a number or a literal (no nested object or array).
    let flat: Bool
    /// A line break sits between the braces (pretty-printed).
    let multiLine: Bool
    let closed: Bool
    /// The longest string value, in bytes.
    let longestString: Int
    /// Nothing but white space (and a UTF-8 byte order mark) sits before and after the object in
    /// a buffer that is the whole text: it is all the text there is.
    let alone: Bool
  }

  /// Where a reader of JSON text is: how deep in objects and arrays, and whether inside a string
  /// (just after a backslash there).
  struct Nesting {
    var depth = 0
    var inString = false
    var escaped = false
  }

  /// Follows a JSON line through `bytes[from..<to]` from `nesting`: the index after the byte that
  /// closes its outermost value, or of its line break (or any control byte but a tab), or nil
  /// when it is still open at `to` (`nesting` then says where it is there). A value cut short
  /// (a brace or a quote missing) ends at its line break, not at the next value's end.
  static func follow(_ bytes: UnsafeRawBufferPointer, from: Int, to: Int, nesting: inout Nesting) -> Int? {
    var at = from
    while at < to {
      let byte = bytes[at]
      at += 1
      if byte < 0x20, byte != 0x09 { return at - 1 }
      if nesting.inString {
        if nesting.escaped {
          nesting.escaped = false
        } else if byte == 0x5c {
          nesting.escaped = true
        } else if byte == 0x22 {
          nesting.inString = false
        }
        continue
      }
      switch byte {
      case 0x22: nesting.inString = true
      case 0x7b, 0x5b: nesting.depth += 1
      case 0x7d, 0x5d:
        nesting.depth -= 1
        if nesting.depth <= 0 { return at }
      default: break
      }
    }
    return nil
  }

  /// Whether the first byte of `head` (a file's first bytes) after a UTF-8 byte order mark and
  /// white space opens an object or an array, or `head` holds nothing else: whether the file may be
  /// one JSON document (an object `alone`, or an array of them).
  static func mayOpenJSONDocument(_ head: [UInt8]) -> Bool {
    var at = head.starts(with: [0xef, 0xbb, 0xbf]) ? 3 : 0
    while at < head.count, isWhitespace(head[at]) { at += 1 }
    return at == head.count || head[at] == 0x7b || head[at] == 0x5b
  }

  @inline(__always) static func isWhitespace(_ byte: UInt8) -> Bool {
    byte == 0x20 || byte == 0x0a || byte == 0x0d || byte == 0x09
  }

  /// Objects whose first key is quoted with one of `quotes` (`"` for JSON, `'` for a Python
  /// repr), each judged once: parsing resumes after an object, so the objects nested in one are
  /// not judged again on their own. `wholeText`: whether `bytes` is all of the text (a whole file,
  /// a decoded stream), so that an object with nothing else around it is `alone`; false for one
  /// chunk of a larger file, where what lies outside the chunk is not known.
  static func objects(
    _ bytes: UnsafeRawBufferPointer, quotes: [UInt8], braces: [Int]? = nil, wholeText: Bool = true
  ) -> [Object] {
    guard let base = bytes.baseAddress else { return [] }
    var found: [Object] = []
    var index = 0
    var nextBrace = 0
    // Nested values are matched bracket by bracket; an object that never closes would otherwise
    // be measured again from every brace inside it (quadratic in `{"a":[{"a":[…`). Past this
    // many bytes per buffer, nested values are not measured and end the object where they start.
    var budget = 4 * bytes.count + 65536
    while index < bytes.count {
      let start: Int
      if let braces {
        // (Only braces a quote follows, found once for all callers: `quotedBraces`.)
        while nextBrace < braces.count, braces[nextBrace] < index { nextBrace += 1 }
        guard nextBrace < braces.count else { break }
        start = braces[nextBrace]
      } else {
        guard let brace = memchr(base + index, 0x7b, bytes.count - index) else { break }
        start = base.distance(to: UnsafeRawPointer(brace))
      }
      index = start + 1
      var first = index
      while first < bytes.count, first - start <= 16, isWhitespace(bytes[first]) { first += 1 }
      guard first < bytes.count, quotes.contains(bytes[first]),
        let object = parseObject(bytes, at: start, quote: bytes[first], budget: &budget, wholeText: wholeText)
      else { continue }
      found.append(object)
      index = max(index, object.end)
    }
    return found
  }

  /// Every `{` whose first byte after white space (up to 16 bytes of it) is `"` or `'`: the only
  /// braces `objects` can start an object at, with either quote. One pass serves both the JSON
  /// and the Python-repr search of a chunk.
  static func quotedBraces(_ bytes: UnsafeRawBufferPointer, vectorised: Bool = PairFilter.available) -> [Int] {
    guard let base = bytes.baseAddress else { return [] }
    var found: [Int] = []
    var index = 0
    // With AVX2, braces a quote or white space follows, 32 positions at a time (random data: one
    // in 11,000, where memchr stops at every brace, one in 256); the rest (and every brace without
    // AVX2) by memchr. A brace another byte follows starts no object.
    if vectorised {
      index = quotedBrace.forEachMatch(in: bytes, from: 0) { start in
        if opensQuotedObject(bytes, at: start) { found.append(start) }
        return start + 1
      }
    }
    while index < bytes.count, let brace = memchr(base + index, 0x7b, bytes.count - index) {
      let start = base.distance(to: UnsafeRawPointer(brace))
      index = start + 1
      if opensQuotedObject(bytes, at: start) { found.append(start) }
    }
    return found
  }

  /// Whether the first byte after the brace at `start` and up to 16 bytes of white space is a quote.
  @inline(__always)
  private static func opensQuotedObject(_ bytes: UnsafeRawBufferPointer, at start: Int) -> Bool {
    var first = start + 1
    while first < bytes.count, first - start <= 16, isWhitespace(bytes[first]) { first += 1 }
    return first < bytes.count && (bytes[first] == 0x22 || bytes[first] == 0x27)
  }

  /// A brace, then a quote or white space: where `quotedBraces` looks further.
  private static let quotedBrace = SpacedPair(
    first: 0x7b, distance: 1, second: ByteClass { $0 == 0x22 || $0 == 0x27 || isWhitespace($0) })

  /// A bracket, then a double quote or white space: where `stringArrays` looks further.
  private static let stringBracket = SpacedPair(
    first: 0x5b, distance: 1, second: ByteClass { $0 == 0x22 || isWhitespace($0) })

  /// Parses the object opening at `start`.
  static func parseObject(
    _ bytes: UnsafeRawBufferPointer, at start: Int, quote: UInt8, budget: inout Int, wholeText: Bool = true
  ) -> Object? {
    var at = start + 1
    var members = 0
    var flat = true
    var multiLine = false
    var closed = false
    var longest = 0
    var lastGood = start + 1
    func skipSpace() {
      while at < bytes.count, isWhitespace(bytes[at]) {
        if bytes[at] == 0x0a { multiLine = true }
        at += 1
      }
    }
    loop: while true {
      skipSpace()
      guard at < bytes.count, bytes[at] == quote, let keyEnd = stringEnd(bytes, at: at, quote: quote),
        keyEnd - at > 2
      else { break }
      at = keyEnd
      skipSpace()
      guard at < bytes.count, bytes[at] == 0x3a else { break }
      at += 1
      skipSpace()
      guard at < bytes.count else { break }
      let byte = bytes[at]
      if byte == quote {
        guard let end = stringEnd(bytes, at: at, quote: quote) else { break }
        longest = max(longest, end - at - 2)
        at = end
      } else if byte == 0x7b || byte == 0x5b {
        guard let end = structureEnd(bytes, at: at, quote: quote, budget: &budget) else { break }
        flat = false
        at = end
      } else if let end = scalarEnd(bytes, at: at) {
        at = end
      } else {
        break
      }
      members += 1
      lastGood = at
      skipSpace()
      guard at < bytes.count else { break }
      switch bytes[at] {
      case 0x2c: at += 1
      case 0x7d:
        closed = true
        lastGood = at + 1
        break loop
      default: break loop
      }
    }
    guard members > 0 else { return nil }
    var before = start - 1
    while before >= 0, isWhitespace(bytes[before]) { before -= 1 }
    let bom = before == 2 && bytes[0] == 0xef && bytes[1] == 0xbb && bytes[2] == 0xbf
    var after = lastGood
    while after < bytes.count, isWhitespace(bytes[after]) { after += 1 }
    return Object(
      quote: quote, start: start, end: lastGood, members: members, flat: flat, multiLine: multiLine, closed: closed,
      longestString: longest, alone: wholeText && (before < 0 || bom) && after == bytes.count)
  }

  /// After the closing quote of the string opening at `at`; nil when a control byte or the end
  /// comes first (or after 4 KiB: a record's field is shorter).
  static func stringEnd(_ bytes: UnsafeRawBufferPointer, at: Int, quote: UInt8) -> Int? {
    var index = at + 1
    let limit = min(bytes.count, at + 4096)
    while index < limit {
      let byte = bytes[index]
      if byte == quote { return index + 1 }
      if byte < 0x20 || byte == 0x7f { return nil }
      index += byte == 0x5c ? 2 : 1
    }
    return nil
  }

  /// After a number or a literal (`true`, `null`, Python's `None`…).
  private static func scalarEnd(_ bytes: UnsafeRawBufferPointer, at: Int) -> Int? {
    var end = at
    let byte = bytes[at]
    if byte == 0x2d || (byte >= 0x30 && byte <= 0x39) {
      end += 1
      while end < bytes.count,
        (bytes[end] >= 0x30 && bytes[end] <= 0x39) || bytes[end] == 0x2e || bytes[end] == 0x65 || bytes[end] == 0x45
          || bytes[end] == 0x2b || bytes[end] == 0x2d
      {
        end += 1
      }
      return end
    }
    while end < bytes.count, end - at < 6, (bytes[end] | 0x20) >= 0x61, (bytes[end] | 0x20) <= 0x7a { end += 1 }
    let word = String(decoding: UnsafeRawBufferPointer(rebasing: bytes[at..<end]), as: UTF8.self)
    return ["true", "false", "null", "True", "False", "None"].contains(word) ? end : nil
  }

  /// After the object or array opening at `at`, brackets matched outside strings; nil when it
  /// does not close within 64 KiB, holds a control byte, or the budget is spent.
  private static func structureEnd(
    _ bytes: UnsafeRawBufferPointer, at: Int, quote: UInt8, budget: inout Int
  ) -> Int? {
    guard budget > 0 else { return nil }
    var depth = 0
    var index = at
    let limit = min(bytes.count, at + 65536)
    defer { budget -= index - at }
    while index < limit {
      let byte = bytes[index]
      if byte == quote {
        guard let end = stringEnd(bytes, at: index, quote: quote) else { return nil }
        index = end
        continue
      }
      if byte < 0x20 && !isWhitespace(byte) || byte == 0x7f { return nil }
      if byte == 0x7b || byte == 0x5b { depth += 1 }
      if byte == 0x7d || byte == 0x5d {
        depth -= 1
        if depth == 0 { return index + 1 }
      }
      index += 1
    }
    return nil
  }

  /// Closed arrays of two or more strings (`["ana","4111…"]`), with where they start and end.
  static func stringArrays(
    _ bytes: UnsafeRawBufferPointer, vectorised: Bool = PairFilter.available
  ) -> [(start: Int, end: Int)] {
    guard let base = bytes.baseAddress else { return [] }
    var found: [(Int, Int)] = []
    var index = 0
    /// Judges the bracket at `start`; returns where to look on from.
    func judge(_ start: Int) -> Int {
      var at = start + 1
      var strings = 0
      var closed = false
      while true {
        while at < bytes.count, isWhitespace(bytes[at]) { at += 1 }
        guard at < bytes.count, bytes[at] == 0x22, let end = stringEnd(bytes, at: at, quote: 0x22) else { break }
        strings += 1
        at = end
        while at < bytes.count, isWhitespace(bytes[at]) { at += 1 }
        guard at < bytes.count else { break }
        if bytes[at] == 0x2c {
          at += 1
        } else {
          closed = bytes[at] == 0x5d
          break
        }
      }
      guard closed, strings >= 2, at + 1 - start >= 24 else { return start + 1 }
      found.append((start, at + 1))
      return at + 1
    }
    // With AVX2, brackets a double quote or white space follows, 32 positions at a time; the rest
    // (and every bracket without AVX2) by memchr. A bracket another byte follows holds no string.
    if vectorised {
      index = stringBracket.forEachMatch(in: bytes, from: 0, judge)
    }
    while index < bytes.count, let bracket = memchr(base + index, 0x5b, bytes.count - index) {
      index = judge(base.distance(to: UnsafeRawPointer(bracket)))
    }
    return found
  }

  /// Whether `line` is a YAML (or mail-header) field: a name of letters, digits, `_`, `.`, `-`
  /// (starting with a letter or `_`, optionally indented), `: ` and a value.
  static func isColonField(_ line: ArraySlice<UInt8>) -> Bool {
    var index = line.startIndex
    while index < line.endIndex, line[index] == 0x20 { index += 1 }
    let nameStart = index
    guard index < line.endIndex, isLetter(line[index]) || line[index] == 0x5f else { return false }
    while index < line.endIndex, index - nameStart <= 40,
      isLetter(line[index]) || isDigit(line[index]) || line[index] == 0x5f || line[index] == 0x2e
        || line[index] == 0x2d
    {
      index += 1
    }
    guard index + 2 < line.endIndex, line[index] == 0x3a, line[index + 1] == 0x20 else { return false }
    return line[(index + 2)...].contains { $0 > 0x20 }
  }

  /// Whether `line` is a CSV row: five or more non-empty fields split by `,`, `;`, `|` or a tab,
  /// with no space after a separator (prose lists put one there), one field of letters and one of
  /// three or more digits.
  static func isDelimitedRow(_ line: ArraySlice<UInt8>) -> Bool {
    // Field by field, without splitting: a long line (a JSON document in one run) usually fails
    // within its first fields.
    // Five fields need four separators: one pass counts them, and a separator the line holds fewer
    // times is not tried (most lines hold none of them).
    var separatorCounts = (0, 0, 0, 0)
    for byte in line {
      switch byte {
      case 0x2c: separatorCounts.0 += 1
      case 0x3b: separatorCounts.1 += 1
      case 0x7c: separatorCounts.2 += 1
      case 0x09: separatorCounts.3 += 1
      default: break
      }
    }
    let candidates: [(separator: UInt8, count: Int)] = [
      (0x2c, separatorCounts.0), (0x3b, separatorCounts.1), (0x7c, separatorCounts.2), (0x09, separatorCounts.3),
    ]
    separators: for (separator, count) in candidates where count >= 4 {
      var fields = 0
      var lettered = false
      var numeric = false
      var start = line.startIndex
      while true {
        // A field longer than 64 bytes fails the row, so its separator is looked for in the next 65
        // bytes only (a long line no longer costs a pass to its end per separator): not found there
        // with more of the line after them, the field is longer than 64.
        let near = line[start..<min(line.endIndex, start + 65)]
        guard let end = near.firstIndex(of: separator) ?? (near.endIndex == line.endIndex ? line.endIndex : nil) else {
          continue separators
        }
        let field = line[start..<end]
        guard !field.isEmpty, field.count <= 64, fields == 0 || field.first != 0x20 else { continue separators }
        fields += 1
        if !lettered { lettered = field.lazy.filter(isLetter).count >= 2 }
        if !numeric { numeric = field.count >= 3 && field.allSatisfy(isDigit) }
        guard end < line.endIndex else { break }
        start = end + 1
      }
      if fields >= 5 && lettered && numeric { return true }
    }
    return false
  }

  /// Whether `run` holds two or more XML leaf elements with text (`<card>4111</card>`). Names with
  /// a namespace prefix (`<exif:PixelXDimension>`) are the metadata images and PDFs carry (XMP),
  /// not records, and do not count.
  static func hasXMLFields(_ run: UnsafeRawBufferPointer) -> Bool {
    var fields = 0
    var index = 0
    while index < run.count {
      guard run[index] == 0x3c else {
        index += 1
        continue
      }
      var nameEnd = index + 1
      while nameEnd < run.count, nameEnd - index <= 40,
        isLetter(run[nameEnd]) || isDigit(run[nameEnd]) || run[nameEnd] == 0x5f || run[nameEnd] == 0x2d
      {
        nameEnd += 1
      }
      guard nameEnd > index + 1, nameEnd < run.count, run[nameEnd] == 0x3e else {
        index += 1
        continue
      }
      let name = Array(run[(index + 1)..<nameEnd])
      var textEnd = nameEnd + 1
      while textEnd < run.count, run[textEnd] != 0x3c { textEnd += 1 }
      let closing = [0x3c, 0x2f] + name + [0x3e]
      if textEnd > nameEnd + 1, textEnd + closing.count <= run.count,
        run[textEnd..<(textEnd + closing.count)].elementsEqual(closing)
      {
        fields += 1
        if fields >= 2 { return true }
        index = textEnd + closing.count
      } else {
        index = textEnd
      }
    }
    return false
  }

  @inline(__always) static func isLetter(_ byte: UInt8) -> Bool { (byte | 0x20) >= 0x61 && (byte | 0x20) <= 0x7a }
  @inline(__always) static func isDigit(_ byte: UInt8) -> Bool { byte >= 0x30 && byte <= 0x39 }
}
