/// Errors from the crypto layer. They say what kind of thing failed and nothing about the data.
public enum CryptoError: Error, Equatable, Sendable, CustomStringConvertible {
  /// The tag did not verify: wrong key, wrong context, or modified bytes. Nothing is returned.
  case authenticationFailed
  /// A key, nonce or tag had the wrong length.
  case invalidLength(what: String, expected: Int, actual: Int)
  /// The random generator could not produce bytes; nothing may be sealed.
  case randomUnavailable
  /// OpenSSL reported an internal failure in the named call.
  case library(call: String)

  /// A short phrase naming the kind of failure (and, for a length, the sizes); never any data.
  public var description: String {
    switch self {
    case .authenticationFailed: "authentication failed"
    case .invalidLength(let what, let expected, let actual): "\(what) must be \(expected) bytes, got \(actual)"
    case .randomUnavailable: "the system random generator is unavailable"
    case .library(let call): "OpenSSL call \(call) failed"
    }
  }
}

extension CryptoError: CodedError {
  /// `crypto.` and the case, in kebab case: stable across releases.
  public var code: String {
    switch self {
    case .authenticationFailed: "crypto.authentication-failed"
    case .invalidLength: "crypto.invalid-length"
    case .randomUnavailable: "crypto.random-unavailable"
    case .library: "crypto.library"
    }
  }
}
