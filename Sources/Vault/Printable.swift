import VaultKeys

/// Text made safe to show on a terminal: names, paths and fields read from files, the environment
/// or a server, and error descriptions that quote them (`vault` prints every message through it).
/// A name cannot move the cursor, retitle the window, set the clipboard, start a line of its own,
/// hide what it is, or spell an escape that passes for another name.
public enum Printable {
  /// C0 controls, DEL and C1 controls.
  ///
  /// - Parameter scalar: the character.
  /// - Returns: whether it is one of them.
  public static func isControl(_ scalar: Unicode.Scalar) -> Bool { TerminalScalar.isControl(scalar) }

  /// Characters a terminal draws as nothing, or that reorder what follows: zero-width spaces and
  /// joiners, the bidirectional marks, embeddings, overrides and isolates, the line and paragraph
  /// separators and the byte-order mark (Unicode's Bidi_Control and Default_Ignorable code points
  /// a name could use to look like another). An "invoice\u{202e}fdp.sqlite" must not show as
  /// "invoicepdf.sqlite".
  ///
  /// - Parameter scalar: the character.
  /// - Returns: whether it is one of them.
  public static func isInvisible(_ scalar: Unicode.Scalar) -> Bool { TerminalScalar.isInvisible(scalar) }

  /// Whether `scalar` is written as \u{hh} by `escaped` (the list lives in VaultKeys, which
  /// `ShellWord` shares: a word it quotes must pass through here unchanged).
  private static func needsEscape(_ scalar: Unicode.Scalar) -> Bool { TerminalScalar.needsEscape(scalar) }

  /// `text` with each control or invisible character written as \u{hh}: a name cannot start a new
  /// line, send a terminal escape or hide what it is. A backslash that begins "\u{" is written
  /// \u{5c}, so a name that spells an escape is not shown as the character it spells. Apply it
  /// once, where the text is written: escaping escaped text escapes its backslashes again.
  ///
  /// - Parameter text: one line to show (a name, a message that quotes one).
  /// - Returns: the text, escaped; `text` itself when nothing needed it.
  public static func escaped(_ text: String) -> String { escaping(text) { needsEscape($0) } }

  /// `text` escaped as `escaped` does but for newline and tab: a message of several lines keeps
  /// them, while a name inside it cannot move the cursor, retitle the window or set the clipboard.
  ///
  /// - Parameter text: text of several lines that the program composed.
  /// - Returns: the text, escaped.
  public static func keepingLines(_ text: String) -> String {
    escaping(text) { needsEscape($0) && $0 != "\n" && $0 != "\t" }
  }

  private static func escaping(_ text: String, _ escape: (Unicode.Scalar) -> Bool) -> String {
    let scalars = Array(text.unicodeScalars)
    func spellsEscape(_ index: Int) -> Bool {
      scalars[index] == "\\" && index + 2 < scalars.count && scalars[index + 1] == "u" && scalars[index + 2] == "{"
    }
    guard scalars.indices.contains(where: { escape(scalars[$0]) || spellsEscape($0) }) else { return text }
    var result = ""
    for index in scalars.indices {
      let scalar = scalars[index]
      if escape(scalar) || spellsEscape(index) {
        result += "\\u{\(String(scalar.value, radix: 16))}"
      } else {
        result.unicodeScalars.append(scalar)
      }
    }
    return result
  }

  /// JSON text with DEL and the C1 controls written as \u00hh: JSON allows them raw inside
  /// strings, and a terminal would take U+009B as the start of an escape sequence. The text stays
  /// valid JSON with the same values (these characters occur only inside strings).
  ///
  /// - Parameter text: JSON text, as an encoder wrote it.
  /// - Returns: the same JSON, safe to show.
  public static func json(_ text: String) -> String {
    guard text.unicodeScalars.contains(where: { (0x7F...0x9F).contains($0.value) }) else { return text }
    return text.unicodeScalars.map { scalar in
      (0x7F...0x9F).contains(scalar.value) ? "\\u00\(String(scalar.value, radix: 16))" : String(scalar)
    }.joined()
  }
}
