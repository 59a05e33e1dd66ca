import Foundation

/// The text form of an envelope (`vault seal --armor`), owned here in both directions:
/// `-----BEGIN VAULT ENVELOPE-----`, the envelope in standard base64 (with padding) in lines of
/// 64 characters, `-----END VAULT ENVELOPE-----`, each line ending in a newline.
package enum Armor {
  static let begin = "-----BEGIN VAULT ENVELOPE-----"
  static let end = "-----END VAULT ENVELOPE-----"

  /// The largest envelope whose armour fits in what `open` reads (`StandardStreams.inputLimit`):
  /// whole lines of 48 bytes (65 characters each with its newline), after the two marker lines.
  static let maximumEnvelopeSize =
    (StandardStreams.inputLimit - begin.utf8.count - end.utf8.count - 3) / 65 * 48

  /// The armour of `envelope`.
  package static func encode(_ envelope: [UInt8]) -> [UInt8] {
    let body = Data(envelope).base64EncodedString(options: [.lineLength64Characters, .endLineWithLineFeed])
    return Array("\(begin)\n\(body)\n\(end)\n".utf8)
  }

  /// Whether `bytes` start, after any whitespace, with the BEGIN line (an envelope starts "VLT").
  package static func isArmored(_ bytes: [UInt8]) -> Bool {
    let start = bytes.firstIndex { !isWhitespace($0) } ?? bytes.endIndex
    return bytes[start...].starts(with: begin.utf8)
  }

  /// The envelope in armoured `bytes`, decoded strictly: the BEGIN line, lines of base64 (each
  /// at most 64 characters; a CR before the newline is allowed), the END line, then only
  /// whitespace.
  /// - Throws: `ArmorError` (exit 1).
  package static func decode(_ bytes: [UInt8]) throws(ArmorError) -> [UInt8] {
    let start = bytes.firstIndex { !isWhitespace($0) } ?? bytes.endIndex
    var lines = bytes[start...].split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false).makeIterator()
    func next() -> ArraySlice<UInt8>? {
      guard var line = lines.next() else { return nil }
      if line.last == UInt8(ascii: "\r") { line = line.dropLast() }
      return line
    }
    guard let first = next(), first.elementsEqual(begin.utf8) else { throw .malformed("no BEGIN line") }
    var body: [UInt8] = []
    var ended = false
    var number = 1
    while let line = next() {
      number += 1
      if line.elementsEqual(end.utf8) {
        ended = true
        break
      }
      guard line.count <= 64 else { throw .malformed("line \(number) is longer than 64 characters") }
      guard line.allSatisfy(isBase64) else { throw .malformed("line \(number) is not base64") }
      body += line
    }
    guard ended else { throw .malformed("no END line (the armour is truncated)") }
    while let rest = next() {
      guard rest.allSatisfy(isWhitespace) else { throw .malformed("text after the END line") }
    }
    guard !body.isEmpty, let envelope = Data(base64Encoded: Data(body)) else {
      throw .malformed("the base64 between BEGIN and END does not decode")
    }
    return Array(envelope)
  }

  private static func isWhitespace(_ byte: UInt8) -> Bool {
    byte == 0x20 || byte == 0x09 || byte == 0x0A || byte == 0x0D
  }

  private static func isBase64(_ byte: UInt8) -> Bool {
    switch byte {
    case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
      UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "+"), UInt8(ascii: "/"), UInt8(ascii: "="):
      true
    default: false
    }
  }
}

/// Armoured input that does not decode (exit 1; nothing is written), or a record too large to
/// armour (exit 2).
package enum ArmorError: Error, Equatable, CustomStringConvertible {
  case malformed(String)
  case tooLarge(limit: Int)

  package var description: String {
    switch self {
    case .malformed(let why): "the armoured envelope is damaged: \(why)"
    case .tooLarge(let limit):
      "an armoured record holds at most \(limit >> 20) MiB (its armour must fit in the 1 GiB that open reads); "
        + "seal it without --armor"
    }
  }
}
