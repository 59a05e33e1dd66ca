import Outbox
import VaultCrypto

/// A JSON number kept as its text, so it round-trips exactly as written: integers above 2^53 and
/// decimals with more digits than a Double holds are never rounded.
public struct JSONNumber: Sendable, Hashable, CustomStringConvertible {
  /// The number as written, valid under RFC 8259's `number` grammar (no NaN, no infinity, no `+`,
  /// no leading zeros). Two numbers are equal when their texts are: `1.0` and `1` differ.
  public let text: String

  /// Validates `text` against the JSON number grammar; nil when it is not a JSON number.
  ///
  /// - Parameter text: the number as written, nothing around it (no whitespace).
  public init?(_ text: String) {
    var bytes = Array(text.utf8)[...]
    guard Self.scan(&bytes), bytes.isEmpty else { return nil }
    self.text = text
  }

  /// A finite Double: whole numbers below 10^15 are written without a fraction (`3`, not `3.0`), as
  /// an integer-minded server expects; others in Swift's shortest round-trip form (`1.5`, `1e+300`).
  /// Nil for NaN and infinities, which JSON cannot express.
  ///
  /// - Parameter value: the number.
  public init?(_ value: Double) {
    guard value.isFinite else { return nil }
    let text = value.rounded() == value && abs(value) < 1e15 ? String(Int64(value)) : "\(value)"
    guard let number = JSONNumber(text) else { return nil }
    self = number
  }

  /// An integer of any width, exactly, in decimal.
  ///
  /// - Parameter value: the integer.
  public init(_ value: some BinaryInteger) { text = String(value) }

  /// The number as written: `text`.
  public var description: String { text }

  /// The nearest Double (may round; huge exponents become infinity).
  public var doubleValue: Double { Double(text) ?? .nan }

  /// Consumes one number at the front of `bytes`; false (with `bytes` unspecified) when there is none.
  static func scan(_ bytes: inout ArraySlice<UInt8>) -> Bool {
    func digits(_ bytes: inout ArraySlice<UInt8>) -> Int {
      var count = 0
      while let byte = bytes.first, byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") {
        bytes.removeFirst()
        count += 1
      }
      return count
    }
    if bytes.first == UInt8(ascii: "-") { bytes.removeFirst() }
    switch bytes.first {
    case UInt8(ascii: "0"): bytes.removeFirst()
    case .some(let byte) where byte >= UInt8(ascii: "1") && byte <= UInt8(ascii: "9"): _ = digits(&bytes)
    default: return false
    }
    if bytes.first == UInt8(ascii: ".") {
      bytes.removeFirst()
      guard digits(&bytes) > 0 else { return false }
    }
    if bytes.first == UInt8(ascii: "e") || bytes.first == UInt8(ascii: "E") {
      bytes.removeFirst()
      if bytes.first == UInt8(ascii: "+") || bytes.first == UInt8(ascii: "-") { bytes.removeFirst() }
      guard digits(&bytes) > 0 else { return false }
    }
    return true
  }
}

/// Why JSON text was refused, and where (a byte offset). Never carries the text itself: payloads
/// may be private.
public struct JSONParseError: CodedError, Equatable, CustomStringConvertible {
  /// What was wrong; the raw value is the phrase `description` uses.
  public enum Reason: String, Sendable {
    /// The input is longer than `JSONLimits.maxBytes`.
    case tooLarge = "too large"
    /// Arrays and objects nest deeper than `JSONLimits.maxDepth`.
    case tooDeep = "nested too deeply"
    /// The input ended inside a value (or was empty).
    case unexpectedEnd = "unexpected end"
    /// A byte that cannot start or continue a value here (a trailing comma, `NaN`, a `+`).
    case unexpectedByte = "unexpected character"
    /// A number outside RFC 8259's grammar (a leading zero, a `.` or exponent without digits).
    case invalidNumber = "invalid number"
    /// A backslash escape JSON does not define, or a malformed `\u` escape.
    case invalidEscape = "invalid escape"
    /// Bytes that are not UTF-8, or a `\u` escape that is a lone surrogate.
    case invalidUnicode = "invalid UTF-8 or lone surrogate"
    /// A control character (below U+0020) written inside a string without an escape.
    case controlCharacter = "unescaped control character in a string"
    /// An object names the same key twice (receivers disagree on which one wins).
    case duplicateKey = "duplicate key"
    /// More than whitespace after the one value.
    case trailingContent = "content after the value"
  }

  /// What was wrong.
  public let reason: Reason
  /// The byte offset (from 0) where the parser found it; for `.tooLarge`, the limit.
  public let offset: Int

  /// The reason and the offset (`duplicate key at byte 17`), never the text.
  public var description: String { "\(reason.rawValue) at byte \(offset)" }
  /// The same as `description`, for `localizedDescription`.
  public var errorDescription: String? { description }

  /// `json.` and the reason in kebab case (`json.duplicate-key`); the offset is not part of it.
  public var code: String {
    switch reason {
    case .tooLarge: "json.too-large"
    case .tooDeep: "json.too-deep"
    case .unexpectedEnd: "json.unexpected-end"
    case .unexpectedByte: "json.unexpected-byte"
    case .invalidNumber: "json.invalid-number"
    case .invalidEscape: "json.invalid-escape"
    case .invalidUnicode: "json.invalid-unicode"
    case .controlCharacter: "json.control-character"
    case .duplicateKey: "json.duplicate-key"
    case .trailingContent: "json.trailing-content"
    }
  }
}

/// Limits for `JSONValue(parsing:limits:)`.
public struct JSONLimits: Sendable {
  /// The most bytes of input.
  public var maxBytes: Int
  /// The deepest nesting of arrays and objects (the top level is depth 1).
  public var maxDepth: Int

  /// Makes limits; the defaults are what `vault telemetry log --payload` uses.
  ///
  /// - Parameters:
  ///   - maxBytes: the most bytes of input (1 MiB by default).
  ///   - maxDepth: the deepest nesting (64 by default).
  public init(maxBytes: Int = 1 << 20, maxDepth: Int = 64) {
    self.maxBytes = maxBytes
    self.maxDepth = maxDepth
  }
}

extension JSONValue {
  /// Parses JSON text strictly by RFC 8259: one value, optional whitespace around it, numbers kept
  /// as written. Refused: duplicate keys in an object (receivers disagree on which one wins, so what
  /// is delivered would be ambiguous), lone surrogates and invalid UTF-8, unescaped control
  /// characters, anything past `limits`.
  ///
  /// - Parameters:
  ///   - bytes: the JSON text as UTF-8.
  ///   - limits: the most bytes and the deepest nesting accepted.
  /// - Throws: `JSONParseError` with the reason and the byte offset, never the text.
  public init(parsing bytes: [UInt8], limits: JSONLimits = JSONLimits()) throws(JSONParseError) {
    guard bytes.count <= limits.maxBytes else { throw JSONParseError(reason: .tooLarge, offset: limits.maxBytes) }
    var parser = JSONParser(bytes: bytes, maxDepth: limits.maxDepth)
    self = try parser.document()
  }

  /// Parses `text` (see `init(parsing:limits:)` for [UInt8]).
  ///
  /// - Parameters:
  ///   - text: the JSON text; its UTF-8 bytes are parsed.
  ///   - limits: the most bytes and the deepest nesting accepted.
  /// - Throws: `JSONParseError` with the reason and the byte offset, never the text.
  public init(parsing text: String, limits: JSONLimits = JSONLimits()) throws(JSONParseError) {
    try self.init(parsing: Array(text.utf8), limits: limits)
  }

  /// The value as compact JSON: object keys sorted by their UTF-8 bytes, numbers exactly as held,
  /// strings escaped only where JSON requires it (quote, backslash, control characters; `/` and
  /// non-ASCII go as they are).
  ///
  /// - Returns: the UTF-8 bytes of the JSON text.
  public func serialized() -> [UInt8] {
    var output: [UInt8] = []
    write(into: &output)
    return output
  }

  /// Whether the arrays and objects of `object` (level 1) nest deeper than `limit` levels, found
  /// without recursion, so that a value too deep to walk recursively is refused rather than walked.
  /// A payload with no array or object inside allocates nothing.
  static func nestsDeeper(_ object: [String: JSONValue], than limit: Int) -> Bool {
    guard limit >= 1 else { return true }
    // Only arrays and objects are held, each with its level.
    var pending: [(JSONValue, Int)] = []
    func hold(_ values: some Sequence<JSONValue>, at depth: Int) {
      for value in values {
        switch value {
        case .array, .object: pending.append((value, depth))
        default: continue
        }
      }
    }
    hold(object.values, at: 2)
    while let (value, depth) = pending.popLast() {
      guard depth <= limit else { return true }
      switch value {
      case .array(let values): hold(values, at: depth + 1)
      case .object(let members): hold(members.values, at: depth + 1)
      default: continue
      }
    }
    return false
  }

  func write(into output: inout [UInt8]) {
    switch self {
    case .null: output.append(contentsOf: "null".utf8)
    case .bool(let value): output.append(contentsOf: (value ? "true" : "false").utf8)
    case .number(let value): output.append(contentsOf: value.text.utf8)
    case .string(let value): Self.write(string: value, into: &output)
    case .array(let values):
      output.append(UInt8(ascii: "["))
      for (index, value) in values.enumerated() {
        if index > 0 { output.append(UInt8(ascii: ",")) }
        value.write(into: &output)
      }
      output.append(UInt8(ascii: "]"))
    case .object(let members):
      output.append(UInt8(ascii: "{"))
      // The members sorted with their values: no lookup of each key again.
      let sorted = members.sorted { $0.key.utf8.lexicographicallyPrecedes($1.key.utf8) }
      for (index, member) in sorted.enumerated() {
        if index > 0 { output.append(UInt8(ascii: ",")) }
        Self.write(string: member.key, into: &output)
        output.append(UInt8(ascii: ":"))
        member.value.write(into: &output)
      }
      output.append(UInt8(ascii: "}"))
    }
  }

  static func write(string: String, into output: inout [UInt8]) {
    var string = string
    string.withUTF8 { write(utf8: $0, into: &output) }
  }

  /// Appends `bytes` as a JSON string. Runs of bytes that need no escape are copied whole: byte
  /// by byte, this was the most costly part of a telemetry event (callgrind).
  private static func write(utf8 bytes: UnsafeBufferPointer<UInt8>, into output: inout [UInt8]) {
    let hex: StaticString = "0123456789abcdef"
    output.append(UInt8(ascii: "\""))
    var runStart = 0
    for (index, byte) in bytes.enumerated()
    where byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") {
      output.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[runStart..<index]))
      runStart = index + 1
      output.append(UInt8(ascii: "\\"))
      switch byte {
      case UInt8(ascii: "\""), UInt8(ascii: "\\"): output.append(byte)
      case 0x0A: output.append(UInt8(ascii: "n"))
      case 0x0D: output.append(UInt8(ascii: "r"))
      case 0x09: output.append(UInt8(ascii: "t"))
      case 0x08: output.append(UInt8(ascii: "b"))
      case 0x0C: output.append(UInt8(ascii: "f"))
      default:
        output.append(contentsOf: "u00".utf8)
        output.append(hex.utf8Start[Int(byte >> 4)])
        output.append(hex.utf8Start[Int(byte & 0xF)])
      }
    }
    output.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[runStart...]))
    output.append(UInt8(ascii: "\""))
  }
}

/// A strict recursive-descent JSON parser over bytes (RFC 8259), keeping numbers as text.
struct JSONParser {
  let bytes: [UInt8]
  let maxDepth: Int
  var position = 0
  var depth = 0

  init(bytes: [UInt8], maxDepth: Int) {
    self.bytes = bytes
    self.maxDepth = maxDepth
  }

  mutating func document() throws(JSONParseError) -> JSONValue {
    let value = try self.value()
    skipWhitespace()
    guard position == bytes.count else { throw fail(.trailingContent) }
    return value
  }

  private func fail(_ reason: JSONParseError.Reason) -> JSONParseError {
    JSONParseError(reason: reason, offset: position)
  }

  private mutating func skipWhitespace() {
    while position < bytes.count, [0x20, 0x09, 0x0A, 0x0D].contains(bytes[position]) { position += 1 }
  }

  private mutating func expect(_ word: String) throws(JSONParseError) {
    for byte in word.utf8 {
      guard position < bytes.count else { throw fail(.unexpectedEnd) }
      guard bytes[position] == byte else { throw fail(.unexpectedByte) }
      position += 1
    }
  }

  private mutating func value() throws(JSONParseError) -> JSONValue {
    skipWhitespace()
    guard position < bytes.count else { throw fail(.unexpectedEnd) }
    switch bytes[position] {
    case UInt8(ascii: "{"): return try object()
    case UInt8(ascii: "["): return try array()
    case UInt8(ascii: "\""): return .string(try string())
    case UInt8(ascii: "t"):
      try expect("true")
      return .bool(true)
    case UInt8(ascii: "f"):
      try expect("false")
      return .bool(false)
    case UInt8(ascii: "n"):
      try expect("null")
      return .null
    case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return .number(try number())
    default: throw fail(.unexpectedByte)
    }
  }

  private mutating func enter() throws(JSONParseError) {
    depth += 1
    guard depth <= maxDepth else { throw fail(.tooDeep) }
    position += 1  // the opening bracket or brace
  }

  private mutating func object() throws(JSONParseError) -> JSONValue {
    try enter()
    defer { depth -= 1 }
    var members: [String: JSONValue] = [:]
    skipWhitespace()
    if position < bytes.count, bytes[position] == UInt8(ascii: "}") {
      position += 1
      return .object(members)
    }
    while true {
      skipWhitespace()
      guard position < bytes.count else { throw fail(.unexpectedEnd) }
      guard bytes[position] == UInt8(ascii: "\"") else { throw fail(.unexpectedByte) }
      let keyOffset = position
      let key = try string()
      skipWhitespace()
      try expect(":")
      let value = try self.value()
      guard members.updateValue(value, forKey: key) == nil else {
        throw JSONParseError(reason: .duplicateKey, offset: keyOffset)
      }
      skipWhitespace()
      guard position < bytes.count else { throw fail(.unexpectedEnd) }
      switch bytes[position] {
      case UInt8(ascii: ","): position += 1
      case UInt8(ascii: "}"):
        position += 1
        return .object(members)
      default: throw fail(.unexpectedByte)
      }
    }
  }

  private mutating func array() throws(JSONParseError) -> JSONValue {
    try enter()
    defer { depth -= 1 }
    var values: [JSONValue] = []
    skipWhitespace()
    if position < bytes.count, bytes[position] == UInt8(ascii: "]") {
      position += 1
      return .array(values)
    }
    while true {
      values.append(try value())
      skipWhitespace()
      guard position < bytes.count else { throw fail(.unexpectedEnd) }
      switch bytes[position] {
      case UInt8(ascii: ","): position += 1
      case UInt8(ascii: "]"):
        position += 1
        return .array(values)
      default: throw fail(.unexpectedByte)
      }
    }
  }

  private mutating func number() throws(JSONParseError) -> JSONNumber {
    var rest = bytes[position...]
    guard JSONNumber.scan(&rest) else { throw JSONParseError(reason: .invalidNumber, offset: position) }
    let text = String(decoding: bytes[position..<rest.startIndex], as: UTF8.self)
    // A number must end at a delimiter: "01" or "1x" is not two tokens.
    if let next = rest.first,
      !(next == UInt8(ascii: ",") || next == UInt8(ascii: "]") || next == UInt8(ascii: "}")
        || [0x20, 0x09, 0x0A, 0x0D].contains(next))
    {
      throw JSONParseError(reason: .invalidNumber, offset: position)
    }
    position = rest.startIndex
    return JSONNumber(unchecked: text)
  }

  private mutating func string() throws(JSONParseError) -> String {
    let start = position
    position += 1  // the opening quote
    var buffer: [UInt8] = []
    while true {
      guard position < bytes.count else { throw fail(.unexpectedEnd) }
      let byte = bytes[position]
      switch byte {
      case UInt8(ascii: "\""):
        position += 1
        guard let text = String(validating: buffer, as: UTF8.self) else {
          throw JSONParseError(reason: .invalidUnicode, offset: start)
        }
        return text
      case UInt8(ascii: "\\"):
        position += 1
        guard position < bytes.count else { throw fail(.unexpectedEnd) }
        let escape = bytes[position]
        position += 1
        switch escape {
        case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): buffer.append(escape)
        case UInt8(ascii: "b"): buffer.append(0x08)
        case UInt8(ascii: "f"): buffer.append(0x0C)
        case UInt8(ascii: "n"): buffer.append(0x0A)
        case UInt8(ascii: "r"): buffer.append(0x0D)
        case UInt8(ascii: "t"): buffer.append(0x09)
        case UInt8(ascii: "u"): buffer += Array(String(try unicodeEscape()).utf8)
        default:
          position -= 1
          throw fail(.invalidEscape)
        }
      case 0..<0x20: throw fail(.controlCharacter)
      default:
        buffer.append(byte)
        position += 1
      }
    }
  }

  /// After `\u`: four hex digits, and for a high surrogate the `\uXXXX` low surrogate that must follow.
  private mutating func unicodeEscape() throws(JSONParseError) -> Character {
    let high = try hex4()
    var scalar: UInt32 = high
    if (0xD800..<0xDC00).contains(high) {
      guard position + 1 < bytes.count, bytes[position] == UInt8(ascii: "\\"), bytes[position + 1] == UInt8(ascii: "u")
      else { throw fail(.invalidUnicode) }
      position += 2
      let low = try hex4()
      guard (0xDC00..<0xE000).contains(low) else { throw fail(.invalidUnicode) }
      scalar = 0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00)
    }
    guard let value = Unicode.Scalar(scalar) else { throw fail(.invalidUnicode) }  // a lone low surrogate
    return Character(value)
  }

  private mutating func hex4() throws(JSONParseError) -> UInt32 {
    guard position + 4 <= bytes.count else { throw fail(.unexpectedEnd) }
    var value: UInt32 = 0
    for _ in 0..<4 {
      let byte = bytes[position]
      let digit: UInt8
      switch byte {
      case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
      case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
      case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
      default: throw fail(.invalidEscape)
      }
      value = value << 4 | UInt32(digit)
      position += 1
    }
    return value
  }
}

extension JSONNumber {
  /// For text the parser has already matched against the grammar.
  fileprivate init(unchecked text: String) { self.text = text }
}
