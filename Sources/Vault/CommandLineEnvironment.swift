import Foundation

/// What `vault` takes from its environment besides the home (`Vault.defaultHome(environment:)`,
/// which is public). Package access: VAULT_SECRET_SERVICE_TIMEOUT and the wording of these usage
/// errors belong to the command line; an app chooses its own timeout.
package enum CommandLineEnvironment {
  /// The error for an empty `--home`: it would resolve to the current directory, and `init`
  /// would turn that into a vault (`--home "$DIR"` with DIR unset gives one).
  package static let emptyHomeMessage =
    "--home must not be empty (an unset shell variable?): give the vault's directory, or leave --home out "
    + "for the default"

  /// The first of the variables the default home and keyfile come from whose bytes are not
  /// UTF-8, or nil. Foundation's environment replaces such bytes with U+FFFD, and the path made
  /// from it names another directory: `init` made a vault there and reported success. Read from
  /// the process's own environment (getenv).
  package static func pathVariableNotUTF8() -> String? {
    for name in ["VAULT_HOME", "XDG_DATA_HOME", "XDG_CONFIG_HOME", "HOME"] {
      guard let value = getenv(name) else { continue }
      if String(validatingCString: value) == nil { return name }
    }
    return nil
  }

  /// The usage error for a variable `pathVariableNotUTF8` found.
  package static func notUTF8Message(_ name: String) -> String {
    "$\(name) is not valid UTF-8, so the directory it names cannot be used as it is (a vault would be made "
      + "beside it, or looked for there); set it to the right path"
  }

  /// A value as an error repeats it: at most 20 characters, control characters as "?" (the
  /// message is printed escaped as well; this keeps it short and readable).
  static func shown(_ text: String) -> String {
    let cut = String(
      String.UnicodeScalarView(text.unicodeScalars.prefix(20).map { Printable.isControl($0) ? "?" : $0 }))
    return text.unicodeScalars.count > 20 ? cut + "…" : cut
  }

  /// The seconds VAULT_SECRET_SERVICE_TIMEOUT may give.
  package static let secretServiceTimeoutRange: ClosedRange<Double> = 0.1...3600
  /// The Secret Service timeout when VAULT_SECRET_SERVICE_TIMEOUT is unset or empty.
  package static let defaultSecretServiceTimeout: Double = 5

  /// VAULT_SECRET_SERVICE_TIMEOUT in seconds.
  /// - Throws: `InvalidValue` (a usage error, exit 64) for anything but a number in
  ///   `secretServiceTimeoutRange`: inf, nan, 1e300 or "5s" would trap converting to milliseconds
  ///   or wait forever.
  package static func secretServiceTimeout(_ environment: [String: String]) throws(InvalidValue) -> Double {
    let text = environment["VAULT_SECRET_SERVICE_TIMEOUT"]
    let range = secretServiceTimeoutRange
    guard let value = seconds(text, in: range, fallback: defaultSecretServiceTimeout) else {
      throw InvalidValue(
        message: "VAULT_SECRET_SERVICE_TIMEOUT must be a number of seconds from \(range.lowerBound) to "
          + "\(Int(range.upperBound)) (got '\(shown(text ?? ""))'); unset it for the default, "
          + "\(Int(defaultSecretServiceTimeout))")
    }
    return value
  }

  /// Seconds from `text`: a finite number in `range`, or `fallback` when absent or empty. Nil for
  /// anything else (inf, nan, 1e300, 0x10, "5s", " 5"), which the caller reports as a usage error.
  package static func seconds(_ text: String?, in range: ClosedRange<Double>, fallback: Double) -> Double? {
    guard let text, !text.isEmpty else { return fallback }
    // Plain decimals only: Double() also reads hexadecimal and exponents, which no operator means.
    guard isPlainDecimal(text), let value = Double(text), value.isFinite, range.contains(value) else { return nil }
    return value
  }

  /// A value from the environment that is not what it must be; `message` says what it must be.
  package struct InvalidValue: Error, Equatable, CustomStringConvertible {
    package let message: String
    package var description: String { message }
  }

  /// Whether `text` is digits with at most one decimal point among or before them ("5", "0.5",
  /// ".5"): what an operator types for a number. Double() alone also reads "0x10", "1e3", "nan".
  package static func isPlainDecimal(_ text: String) -> Bool {
    var digits = 0
    var points = 0
    for byte in text.utf8 {
      if byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") {
        digits += 1
      } else if byte == UInt8(ascii: ".") {
        points += 1
      } else {
        return false
      }
    }
    return digits > 0 && points <= 1 && text.utf8.last != UInt8(ascii: ".")
  }
}
