// C boundary: SHA-256 and HKDF-SHA256 through OpenSSL EVP.
internal import COpenSSL

/// SHA-256 (FIPS 180-4).
public enum SHA256 {
  /// The length of every digest, in bytes.
  public static let byteCount = 32

  /// The SHA-256 digest of `data`.
  ///
  /// - Parameter data: the bytes to hash; may be empty.
  /// - Returns: the digest, `byteCount` bytes.
  /// - Throws: `CryptoError.library` when OpenSSL fails.
  public static func hash(_ data: UnsafeRawBufferPointer) throws -> [UInt8] {
    guard let md = sha256Digest else { throw CryptoError.library(call: "EVP_MD_fetch(SHA256)") }
    var out = [UInt8](repeating: 0, count: byteCount)
    var length: UInt32 = 0
    try out.withUnsafeMutableBufferPointer { (o) in
      try check(EVP_Digest(data.baseAddress, data.count, o.baseAddress, &length, md, nil), "EVP_Digest")
    }
    return out
  }

  /// The SHA-256 digest of `data`, held in a byte array.
  ///
  /// - Parameter data: the bytes to hash; may be empty.
  /// - Returns: the digest, `byteCount` bytes.
  /// - Throws: `CryptoError.library` when OpenSSL fails.
  public static func hash(_ data: [UInt8]) throws -> [UInt8] {
    try data.withUnsafeBytes { (buffer) in try hash(buffer) }
  }

  /// Hashes `a ‖ b ‖ c` into `output` (32 bytes) without copying them together. Digest contexts
  /// are pooled: one per call would cost more than hashing a short input.
  ///
  /// - Parameters:
  ///   - a: the first part; any part may be empty.
  ///   - b: the second part.
  ///   - c: the third part.
  ///   - output: where the digest is written; must be exactly `byteCount` bytes.
  /// - Throws: `CryptoError.invalidLength` when `output` is not 32 bytes; `CryptoError.library`
  ///   when OpenSSL fails.
  public static func hash(
    _ a: UnsafeRawBufferPointer, _ b: UnsafeRawBufferPointer, _ c: UnsafeRawBufferPointer,
    into output: UnsafeMutableRawBufferPointer
  ) throws {
    let context = try digestContexts.withLock { $0.popLast() } ?? DigestContext()
    defer { digestContexts.withLock { if $0.count < 8 { $0.append(context) } } }
    try hash(a, b, c, into: output, using: context)
  }

  /// `hash(_:_:_:into:)` with a digest context the caller owns (an `XAESKey.Workspace`'s), so a
  /// caller that already borrowed one does not go to the shared pool.
  static func hash(
    _ a: UnsafeRawBufferPointer, _ b: UnsafeRawBufferPointer, _ c: UnsafeRawBufferPointer,
    into output: UnsafeMutableRawBufferPointer, using context: DigestContext
  ) throws {
    guard let md = sha256Digest else { throw CryptoError.library(call: "EVP_MD_fetch(SHA256)") }
    guard output.count == byteCount else {
      throw CryptoError.invalidLength(what: "digest output", expected: byteCount, actual: output.count)
    }
    try check(EVP_DigestInit_ex(context.pointer, md, nil), "EVP_DigestInit_ex")
    // Three calls, not a loop over `[a, b, c]`: that array was a heap allocation per hash.
    try update(context, a)
    try update(context, b)
    try update(context, c)
    var length: UInt32 = 0
    try check(
      EVP_DigestFinal_ex(context.pointer, output.baseAddress!.assumingMemoryBound(to: UInt8.self), &length),
      "EVP_DigestFinal_ex")
  }

  private static func update(_ context: DigestContext, _ part: UnsafeRawBufferPointer) throws {
    guard part.count > 0 else { return }
    try check(EVP_DigestUpdate(context.pointer, part.baseAddress, part.count), "EVP_DigestUpdate")
  }

  private static let digestContexts = LockedValue<[DigestContext]>([])
}

/// An owned `EVP_MD_CTX`, freed on deinit; used by one thread at a time.
final class DigestContext: @unchecked Sendable {
  let pointer: OpaquePointer

  init() throws {
    guard let pointer = EVP_MD_CTX_new() else { throw CryptoError.library(call: "EVP_MD_CTX_new") }
    self.pointer = pointer
  }

  deinit { EVP_MD_CTX_free(pointer) }
}

/// HKDF with SHA-256 (RFC 5869), extract-then-expand.
package enum HKDF {
  /// Derives `length` bytes (at most 255 × 32) into zeroizing storage.
  package static func deriveKey(
    inputKeyMaterial ikm: UnsafeRawBufferPointer, salt: [UInt8], info: [UInt8], length: Int
  ) throws -> SecureBytes {
    guard length > 0, length <= 255 * SHA256.byteCount else {
      throw CryptoError.invalidLength(what: "HKDF output", expected: 32, actual: length)
    }
    // OpenSSL takes these lengths as `int`; larger inputs are refused rather than trapping.
    for (what, count) in [("HKDF salt", salt.count), ("HKDF key", ikm.count), ("HKDF info", info.count)]
    where count > Int(Int32.max) {
      throw CryptoError.invalidLength(what: what, expected: Int(Int32.max), actual: count)
    }
    guard let ctx = EVP_PKEY_CTX_new_id(EVP_PKEY_HKDF, nil) else {
      throw CryptoError.library(call: "EVP_PKEY_CTX_new_id")
    }
    defer { EVP_PKEY_CTX_free(ctx) }
    try check(EVP_PKEY_derive_init(ctx), "EVP_PKEY_derive_init")
    try check(EVP_PKEY_CTX_set_hkdf_md(ctx, EVP_sha256()), "EVP_PKEY_CTX_set_hkdf_md")
    try salt.withUnsafeBufferPointer { (s) in
      // An empty salt means "HashLen zero bytes" (RFC 5869 §2.2); OpenSSL does the same when unset.
      if s.count > 0 {
        try check(EVP_PKEY_CTX_set1_hkdf_salt(ctx, s.baseAddress, Int32(s.count)), "EVP_PKEY_CTX_set1_hkdf_salt")
      }
    }
    try check(EVP_PKEY_CTX_set1_hkdf_key(ctx, ikm.bytes, Int32(ikm.count)), "EVP_PKEY_CTX_set1_hkdf_key")
    try info.withUnsafeBufferPointer { (i) in
      if i.count > 0 {
        try check(EVP_PKEY_CTX_add1_hkdf_info(ctx, i.baseAddress, Int32(i.count)), "EVP_PKEY_CTX_add1_hkdf_info")
      }
    }
    return try SecureBytes(count: length) { (out) in
      var outLength = length
      try check(
        EVP_PKEY_derive(ctx, out.baseAddress!.assumingMemoryBound(to: UInt8.self), &outLength), "EVP_PKEY_derive")
    }
  }
}
