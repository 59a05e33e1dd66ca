// What memo reads from its environment and its process limits, worded as `vault` words it. This
// is memo's own code on purpose: an app built on vault decides these for itself, and only the
// default home (Vault.defaultHome(environment:)) is the library's.
import Foundation

enum MemoEnvironment {
  /// The error for an empty `--home`: it would resolve to the current directory.
  static let emptyHomeMessage =
    "--home must not be empty (an unset shell variable?): give the vault's directory, or leave --home out "
    + "for the default"

  /// The first of the variables the default home comes from whose bytes are not UTF-8, or nil:
  /// Foundation's environment replaces them with U+FFFD, and the home made from that is another
  /// directory (vault refuses these the same way).
  static func homeVariableNotUTF8() -> String? {
    ["VAULT_HOME", "XDG_DATA_HOME", "HOME"].first { name in
      getenv(name).map { String(validatingCString: $0) == nil } ?? false
    }
  }

  /// The seconds VAULT_SECRET_SERVICE_TIMEOUT may give, and the timeout when it is unset or empty.
  static let secretServiceTimeoutRange: ClosedRange<Double> = 0.1...3600
  static let defaultSecretServiceTimeout: Double = 5

  /// VAULT_SECRET_SERVICE_TIMEOUT in seconds; a usage error for anything but a finite number in
  /// range (inf, nan, 1e300 or "5s" would trap converting to milliseconds, or wait forever).
  static func secretServiceTimeout(_ environment: [String: String]) throws(UsageProblem) -> Double {
    let text = environment["VAULT_SECRET_SERVICE_TIMEOUT"] ?? ""
    guard !text.isEmpty else { return defaultSecretServiceTimeout }
    let range = secretServiceTimeoutRange
    // Plain decimals only, as vault reads it: Double() also takes "0x10" and "1e1".
    let plain =
      !text.isEmpty && text.last != "." && text.filter { $0 == "." }.count <= 1
      && text.allSatisfy { $0 == "." || ("0"..."9").contains($0) }
    guard plain, let value = Double(text), value.isFinite, range.contains(value) else {
      throw UsageProblem(
        message: "VAULT_SECRET_SERVICE_TIMEOUT must be a number of seconds from \(range.lowerBound) to "
          + "\(Int(range.upperBound)) (got '\(text)'); unset it for the default, "
          + "\(Int(defaultSecretServiceTimeout))")
    }
    return value
  }

  /// A note for storage errors when a file-size limit (`ulimit -f`) is in force, else "". With
  /// SIGXFSZ ignored (ProcessHardening) a write past the limit fails with EFBIG, which SQLite
  /// reports as a plain "disk I/O error"; the note names the likelier cause.
  static var fileSizeNote: String {
    var limit = rlimit()
    // RLIM_INFINITY is all ones (the macro does not import).
    guard getrlimit(Int32(RLIMIT_FSIZE.rawValue), &limit) == 0, limit.rlim_cur != rlim_t.max else { return "" }
    return "; the file-size limit is \(limit.rlim_cur) bytes (ulimit -f), and writing past it fails (File too large): "
      + "raise it (ulimit -f unlimited) and retry"
  }

  /// ISO 8601 in UTC with seconds, as `vault status --json` shows times.
  static func timestamp(_ date: Date) -> String {
    let formatter = ISO8601DateFormatter()
    formatter.formatOptions = [.withInternetDateTime]
    formatter.timeZone = TimeZone(identifier: "UTC")
    return formatter.string(from: date)
  }
}

/// A value that is not what it must be (exit 64); `message` says what it must be.
struct UsageProblem: Error {
  let message: String
}
