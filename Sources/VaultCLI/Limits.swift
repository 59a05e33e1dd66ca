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

  static let secretServiceTimeoutRange: ClosedRange<Double> = 0.1...3600

  /// Seconds from `text`: a finite number in `range`, or `fallback` when absent or empty. Nil
  /// for anything else (inf, nan, 1e300, "5s"), which the caller reports as a usage error:
  /// converting such values later traps (Int32(inf)) or waits forever.
  static func seconds(_ text: String?, in range: ClosedRange<Double>, fallback: Double) -> Double? {
    guard let text, !text.isEmpty else { return fallback }
    guard let value = Double(text), value.isFinite, range.contains(value) else { return nil }
    return value
  }

  /// Checks made after parsing, before `command` runs: nil to go on, else the exit code.
  func prepare(_ command: String) -> Int32? {
    guard command != "help" else { return nil }
    let timeout = terminal.environment["VAULT_SECRET_SERVICE_TIMEOUT"]
    if Self.seconds(timeout, in: Self.secretServiceTimeoutRange, fallback: 5) == nil {
      let range = Self.secretServiceTimeoutRange
      return usage(
        UsageError(
          message: "VAULT_SECRET_SERVICE_TIMEOUT must be a number of seconds from \(range.lowerBound) to "
            + "\(Int(range.upperBound)) (got '\(timeout ?? "")'); unset it for the default, 5",
          command: nil))
    }
    if terminal.checksProcessResources {
      do {
        try ProcessResources.ensure()
      } catch {
        return fail(error)
      }
    }
    return nil
  }

  /// The exit code once the command is done: a write to standard output that failed (full disk,
  /// closed pipe, closed descriptor) is reported, and makes a success a failure.
  func finish(_ code: Int32) -> Int32 {
    guard let failure = terminal.outputFailure() else { return code }
    terminal.note("Error: \(failure)")
    return code == ExitCode.success.rawValue ? ExitCode.failure.rawValue : code
  }
}
