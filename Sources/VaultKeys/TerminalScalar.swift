/// Which characters a terminal must not be handed raw. `Printable` (in Vault) escapes them where
/// text is shown; `ShellWord` writes them as shell escapes, so a command it quotes passes through
/// `Printable` unchanged. One list for both: a character added to one and not the other would make
/// a quoted word that prints as another.
package enum TerminalScalar {
  /// C0 controls, DEL and C1 controls.
  ///
  /// - Parameter scalar: the character.
  /// - Returns: whether it is one of them.
  package static func isControl(_ scalar: Unicode.Scalar) -> Bool {
    scalar.value < 0x20 || (0x7F...0x9F).contains(scalar.value)
  }

  /// Characters a terminal draws as nothing, or that reorder what follows: zero-width spaces and
  /// joiners, the bidirectional marks, embeddings, overrides and isolates, the line and paragraph
  /// separators and the byte-order mark.
  ///
  /// - Parameter scalar: the character.
  /// - Returns: whether it is one of them.
  package static func isInvisible(_ scalar: Unicode.Scalar) -> Bool {
    switch scalar.value {
    case 0x200B...0x200F, 0x2028...0x202E, 0x2060...0x2069, 0xFEFF: true
    default: false
    }
  }

  /// Whether `Printable.escaped` writes `scalar` as \u{hh}: a control or invisible character.
  ///
  /// - Parameter scalar: the character.
  /// - Returns: whether it is escaped where text is shown.
  package static func needsEscape(_ scalar: Unicode.Scalar) -> Bool { isControl(scalar) || isInvisible(scalar) }
}
