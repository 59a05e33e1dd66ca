// C boundary: HMAC-SHA256 through OpenSSL's one-shot HMAC().
internal import COpenSSL

/// HMAC with SHA-256 (RFC 2104, FIPS 198-1).
public enum HMACSHA256 {
  /// The length of every tag, in bytes: what a stored tag is checked against.
  public static let byteCount = 32

  /// The 32-byte tag of `message` under `key`.
  ///
  /// - Parameters:
  ///   - message: the bytes to authenticate; may be empty.
  ///   - key: the key; all 32 bytes are used.
  /// - Returns: the tag, `byteCount` bytes.
  /// - Throws: `CryptoError.library` when OpenSSL fails.
  public static func authenticationCode(_ message: UnsafeRawBufferPointer, key: SymmetricKey) throws -> [UInt8] {
    guard let md = sha256Digest else { throw CryptoError.library(call: "EVP_MD_fetch(SHA256)") }
    var out = [UInt8](repeating: 0, count: byteCount)
    var length: UInt32 = 0
    let produced = key.withUnsafeBytes { keyBytes in
      out.withUnsafeMutableBufferPointer { o in
        // An empty message still needs a valid pointer.
        withUnsafePointer(to: 0 as UInt8) { empty in
          HMAC(
            md, keyBytes.baseAddress, Int32(keyBytes.count), message.bytes ?? empty, message.count, o.baseAddress,
            &length)
        }
      }
    }
    guard produced != nil, length == UInt32(byteCount) else {
      ERR_clear_error()
      throw CryptoError.library(call: "HMAC")
    }
    return out
  }

  /// The 32-byte tag of `message`, held in a byte array, under `key`.
  ///
  /// - Parameters:
  ///   - message: the bytes to authenticate; may be empty.
  ///   - key: the key.
  /// - Returns: the tag, `byteCount` bytes.
  /// - Throws: `CryptoError.library` when OpenSSL fails.
  public static func authenticationCode(_ message: [UInt8], key: SymmetricKey) throws -> [UInt8] {
    try message.withUnsafeBytes { try authenticationCode($0, key: key) }
  }

  /// Whether `code` is the tag of `message` under `key`, compared in constant time.
  ///
  /// - Parameters:
  ///   - code: the tag to check, as stored or received.
  ///   - message: the bytes it should authenticate.
  ///   - key: the key it should have been made with.
  /// - Returns: true only when `code` is exactly the expected tag.
  /// - Throws: `CryptoError.library` when OpenSSL fails (not when the tag is wrong).
  public static func isValid(_ code: [UInt8], for message: [UInt8], key: SymmetricKey) throws -> Bool {
    let expected = try authenticationCode(message, key: key)
    return expected.withUnsafeBytes { a in code.withUnsafeBytes { b in constantTimeEquals(a, b) } }
  }
}
