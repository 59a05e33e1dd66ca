/// A path or other word as a POSIX shell reads it back, for advice that shows a command to paste:
/// a path with a space, a quote, `$` or `;` in it would otherwise paste as another command.
/// Terminal escaping is not done here: the sinks that print the advice (`Printable`) do it once,
/// and a quoted word is made so that it passes through them unchanged.
package enum ShellWord {
  /// `word` unchanged when it holds only characters no shell treats specially
  /// (`A-Z a-z 0-9 _ . / : @ % + = , -`); in single quotes, each `'` in it written `'\''`, when it
  /// holds no character a terminal sink escapes and no backslash; else ANSI-C quoted (`$'…'`).
  ///
  /// A newline, an escape or a bidi override inside single quotes would be printed by `Printable`
  /// as the text `\u{a}`, and the pasted command would name another path (even a real one whose
  /// name holds that text). In `$'…'` each such character is written as an escape the shell turns
  /// back into it: a control below 0x80 as `\xHH`, another (C1, invisible, bidi) as `\uHHHH`, a
  /// backslash as `\x5c` (not `\\`, whose second backslash and a following `u{` would be escaped
  /// by `Printable`) and `'` as `\x27`. `$'…'` is read by bash, zsh, ksh and POSIX.1-2024 sh; `\u`
  /// needs bash 4.2 or later and a UTF-8 locale.
  ///
  /// - Parameter word: one argument of the command shown (a path, a name).
  /// - Returns: text that a shell reads as exactly `word`, one argument, and that `Printable.escaped`
  ///   leaves as it is.
  package static func quoted(_ word: String) -> String {
    let plain =
      !word.isEmpty
      && word.unicodeScalars.allSatisfy { scalar in
        switch scalar {
        case "A"..."Z", "a"..."z", "0"..."9", "_", ".", "/", ":", "@", "%", "+", "=", ",", "-": true
        default: false
        }
      }
    if plain { return word }
    guard word.unicodeScalars.contains(where: { $0 == "\\" || TerminalScalar.needsEscape($0) }) else {
      return "'" + word.split(separator: "'", omittingEmptySubsequences: false).joined(separator: #"'\''"#) + "'"
    }
    var result = "$'"
    for scalar in word.unicodeScalars {
      if scalar == "\\" || scalar == "'" || (scalar.isASCII && TerminalScalar.needsEscape(scalar)) {
        result += "\\x" + hex(scalar.value, digits: 2)
      } else if TerminalScalar.needsEscape(scalar) {
        result += "\\u" + hex(scalar.value, digits: 4)
      } else {
        result.unicodeScalars.append(scalar)
      }
    }
    return result + "'"
  }

  /// `value` in hexadecimal, zero-padded to `digits`: a shell escape reads at most that many, so a
  /// hex digit that follows in the word is not taken into it.
  private static func hex(_ value: UInt32, digits: Int) -> String {
    let text = String(value, radix: 16)
    return String(repeating: "0", count: max(0, digits - text.count)) + text
  }
}
