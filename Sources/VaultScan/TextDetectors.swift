/// Detectors for plain-text files (the scanner runs them only on files that are mostly printable):
/// key=value records and long natural-language lines. Binary containers are covered by the canary,
/// JSON and envelope-column checks instead.
enum TextDetectors {
  struct Hit {
    let start: Int
    let end: Int
    let detector: String
  }

  /// Lines with two or more `key=value` pairs (`user=ana&card=4111`, `token=… scope=…`), and lines
  /// of at least eight words that are mostly letters (sentences someone typed).
  static func findings(_ bytes: UnsafeRawBufferPointer) -> [Hit] {
    var hits: [Hit] = []
    var lineStart = 0
    for index in 0...bytes.count {
      guard index == bytes.count || bytes[index] == 0x0a else { continue }
      if index - lineStart >= 16 {
        let line = UnsafeRawBufferPointer(rebasing: bytes[lineStart..<index])
        if keyValuePairs(line) >= 2 {
          hits.append(Hit(start: lineStart, end: index, detector: "key-value-text"))
        } else if isNaturalLanguage(line) {
          hits.append(Hit(start: lineStart, end: index, detector: "natural-language"))
        }
      }
      lineStart = index + 1
    }
    return hits
  }

  /// Counts `word=value` pairs: a run of letters, digits, '_' or '-' followed by '=' and a non-space.
  static func keyValuePairs(_ line: UnsafeRawBufferPointer) -> Int {
    var pairs = 0
    var keyLength = 0
    for (index, byte) in line.enumerated() {
      if isWordByte(byte) {
        keyLength += 1
      } else {
        if byte == 0x3d, keyLength >= 2, index + 1 < line.count, line[index + 1] > 0x20 { pairs += 1 }
        keyLength = 0
      }
    }
    return pairs
  }

  /// At least eight words of two or more letters, and at least 80% of the line letters or spaces.
  static func isNaturalLanguage(_ line: UnsafeRawBufferPointer) -> Bool {
    var letters = 0
    var spaces = 0
    var words = 0
    var wordLength = 0
    for byte in line {
      let isLetter = (byte >= 0x41 && byte <= 0x5a) || (byte >= 0x61 && byte <= 0x7a) || byte >= 0x80
      if isLetter {
        letters += 1
        wordLength += 1
      } else {
        if wordLength >= 2 { words += 1 }
        wordLength = 0
        if byte == 0x20 { spaces += 1 }
      }
    }
    if wordLength >= 2 { words += 1 }
    return words >= 8 && Double(letters + spaces) >= Double(line.count) * 0.8
  }

  static func isWordByte(_ byte: UInt8) -> Bool {
    (byte >= 0x30 && byte <= 0x39) || (byte >= 0x41 && byte <= 0x5a) || (byte >= 0x61 && byte <= 0x7a) || byte == 0x5f
      || byte == 0x2d
  }
}
