/// A path or other word as a POSIX shell reads it back, for advice that shows a command to paste:
/// a path with a space, a quote, `$` or `;` in it would otherwise paste as another command.
/// Terminal escaping is not done here: the sinks that print the advice (`Printable`) do it once.
package enum ShellWord {
  /// `word` unchanged when it holds only characters no shell treats specially
  /// (`A-Z a-z 0-9 _ . / : @ % + = , -`), else in single quotes, each `'` in it written `'\''`.
  ///
  /// - Parameter word: one argument of the command shown (a path, a name).
  /// - Returns: text that a POSIX shell reads as exactly `word`, one argument.
  package static func quoted(_ word: String) -> String {
    let plain =
      !word.isEmpty
      && word.unicodeScalars.allSatisfy { scalar in
        switch scalar {
        case "A"..."Z", "a"..."z", "0"..."9", "_", ".", "/", ":", "@", "%", "+", "=", ",", "-": true
        default: false
        }
      }
    return plain
      ? word : "'" + word.split(separator: "'", omittingEmptySubsequences: false).joined(separator: #"'\''"#) + "'"
  }
}
