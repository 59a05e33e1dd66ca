/// How many columns a terminal gives a character, for fitting a progress line to its width.
///
/// Not glibc's `wcwidth`: vault runs in the "C" locale (it never calls setlocale), where
/// `wcwidth` is -1 for every character outside ASCII (measured here, glibc 2.36). The rule is
/// Unicode Standard Annex #11, East Asian Width (https://www.unicode.org/reports/tr11/): East Asian
/// Wide (W) and Fullwidth (F) characters take two columns, which since Unicode 9 includes every
/// character of default emoji presentation; combining marks (general categories Mn and Me) and
/// the Hangul vowels and final consonants that join a leading consonant take none; anything else
/// takes one. Where terminals differ (emoji sequences, flags, ambiguous-width characters) the count
/// errs wide: a line cut a little short is harmless, one that wraps leaves stale rows on the screen.
enum TerminalWidth {
  /// The columns `character` takes: its scalars' widths added up, and at least two for one shown
  /// as an emoji (U+FE0F, emoji presentation selector).
  ///
  /// - Parameter character: one grapheme cluster.
  /// - Returns: 0, 1, 2 or more.
  static func columns(of character: Character) -> Int {
    var width = 0
    for scalar in character.unicodeScalars { width += columns(of: scalar) }
    return character.unicodeScalars.contains("\u{FE0F}") ? max(width, 2) : width
  }

  /// The columns `scalar` takes on its own (see the type's rule).
  ///
  /// - Parameter scalar: one code point.
  /// - Returns: 0, 1 or 2.
  static func columns(of scalar: Unicode.Scalar) -> Int {
    let value = scalar.value
    if value < 0x300 { return 1 }  // ASCII and Latin: the common case, no lookup.
    switch scalar.properties.generalCategory {
    case .nonspacingMark, .enclosingMark: return 0
    default: break
    }
    // Hangul Jamo vowels and trailing consonants (and their Extended-B forms) join the leading
    // consonant before them into one two-column syllable.
    if (0x1160...0x11FF).contains(value) || (0xD7B0...0xD7FF).contains(value) { return 0 }
    if scalar.properties.isEmojiPresentation { return 2 }
    return wide.contains { $0.contains(value) } ? 2 : 1
  }

  /// The blocks of East Asian Wide and Fullwidth characters (UAX #11, EastAsianWidth.txt, W and
  /// F), as whole blocks: unassigned code points in them are counted wide too.
  private static let wide: [ClosedRange<UInt32>] = [
    0x1100...0x115F,  // Hangul Jamo leading consonants
    0x2329...0x232A,  // angle brackets
    0x2E80...0x303E,  // CJK radicals, Kangxi radicals, ideographic description, CJK symbols and punctuation
    0x3041...0x3247,  // Hiragana, Katakana, Bopomofo, Hangul compatibility Jamo, Kanbun, CJK strokes
    0x3250...0x4DBF,  // enclosed CJK, CJK compatibility, CJK extension A
    0x4E00...0xA4CF,  // CJK unified ideographs, Yi
    0xA960...0xA97F,  // Hangul Jamo extended A
    0xAC00...0xD7A3,  // Hangul syllables
    0xF900...0xFAFF,  // CJK compatibility ideographs
    0xFE10...0xFE19,  // vertical forms
    0xFE30...0xFE6F,  // CJK compatibility forms, small form variants
    0xFF00...0xFF60,  // fullwidth forms
    0xFFE0...0xFFE6,  // fullwidth signs
    0x16FE0...0x16FFF,  // ideographic symbols and punctuation
    0x17000...0x18DFF,  // Tangut, Khitan small script
    0x1AFF0...0x1B2FF,  // Kana extended and supplement, Nushu
    0x1F200...0x1F2FF,  // enclosed ideographic supplement
    0x20000...0x3FFFD,  // CJK extensions B and later (planes 2 and 3)
  ]
}
