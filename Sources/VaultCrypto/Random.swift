import COpenSSL

/// Cryptographically secure random bytes from OpenSSL's DRBG (seeded by the kernel).
public enum SecureRandom {
  /// Fills `buffer` with random bytes.
  /// - Throws: `CryptoError.randomUnavailable` if the generator fails; callers must not fall back.
  public static func fill(_ buffer: UnsafeMutableRawBufferPointer) throws {
    guard let base = buffer.baseAddress, buffer.count > 0 else { return }
    guard RAND_bytes(base.assumingMemoryBound(to: UInt8.self), Int32(buffer.count)) == 1 else {
      ERR_clear_error()
      throw CryptoError.randomUnavailable
    }
  }

  /// Returns `count` random bytes (for identifiers and nonces, not for keys: use `SymmetricKey.generate`).
  public static func bytes(_ count: Int) throws -> [UInt8] {
    var out = [UInt8](repeating: 0, count: count)
    try out.withUnsafeMutableBytes { (buffer) in try fill(buffer) }
    return out
  }
}
