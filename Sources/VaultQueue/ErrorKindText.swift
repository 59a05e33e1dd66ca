import Foundation

/// What is left of an error kind when it is stored: kinds are kept, listed, put in events and
/// logged in the clear, so only a name survives, never a message that could carry content.
package enum ErrorKindText {
  /// The longest kind kept.
  package static let maximumLength = 64

  /// `kind` cut before its first character outside ASCII letters, digits, `-`, `.` and `_`, and
  /// to `maximumLength` bytes: `http-503` stays, `invalid: <a field's value>` becomes `invalid`;
  /// `unnamed` when nothing is left.
  ///
  /// - Parameter kind: the kind a transport or a caller gave.
  /// - Returns: the name kept.
  package static func sanitized(_ kind: String) -> String {
    let name = kind.utf8.prefix { byte in
      switch byte {
      case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
        UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"):
        true
      default: false
      }
    }.prefix(maximumLength)
    return name.isEmpty ? "unnamed" : String(decoding: name, as: UTF8.self)
  }
}
