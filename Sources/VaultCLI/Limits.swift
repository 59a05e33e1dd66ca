import Foundation
import Vault

/// The command line's limits and the checks made before a command runs (issue 8, item 13): every
/// number from the environment or an option is parsed strictly, resources are checked once, and
/// a failed write to standard output turns success into failure.
extension VaultCommandLine {
  /// The largest record `seal` takes and `open` gives back: 1 GiB. Both hold a record and its
  /// envelope in memory at once, so this bounds what one command needs (about 2 GiB); larger
  /// input is refused before it is read (from a file) or as soon as it passes the limit (a pipe).
  public static let maximumRecordSize = 1 << 30

  /// Checks made after parsing, before `command` runs: nil to go on, else the exit code.
  func prepare(_ command: String) -> Int32? {
    guard command != "help", command != "version" else { return nil }
    do {
      _ = try CommandLineEnvironment.secretServiceTimeout(terminal.environment)
    } catch {
      return usage(UsageError(message: error.message, command: nil))
    }
    if terminal.checksProcessResources {
      if let name = CommandLineEnvironment.pathVariableNotUTF8() {
        return usage(UsageError(message: CommandLineEnvironment.notUTF8Message(name), command: nil))
      }
      do {
        try ProcessResources.ensure()
      } catch {
        return fail(error)
      }
    }
    return nil
  }

  /// The exit code once the command is done: a write to standard output that failed (full disk,
  /// closed pipe, closed descriptor) is reported, and makes a success a failure. After a success,
  /// what the command did (`Terminal.done`) is said with it: exit 1 alone made a script retry a
  /// `queue put`, and store the record twice.
  func finish(_ code: Int32) -> Int32 {
    guard let failure = terminal.outputFailure() else { return code }
    let done = code == ExitCode.success.rawValue ? terminal.done.map { "; " + $0 } ?? "" : ""
    terminal.error(failure.description + done)
    return code == ExitCode.success.rawValue ? ExitCode.failure.rawValue : code
  }
}
