// C boundary: AES-256-GCM through OpenSSL EVP.
internal import COpenSSL

/// AES-256-GCM with a 96-bit nonce and a 128-bit tag, bound to one key.
///
/// Thread-safe: any number of threads may seal and open at once. Each call borrows an
/// `EVP_CIPHER_CTX` that already holds the key schedule from a small pool, so a call costs one
/// IV reset rather than a context allocation and key expansion.
package final class AESGCMKey: Sendable {
  package static let nonceByteCount = 12
  package static let tagByteCount = 16

  private let key: SymmetricKey
  private let sealers = LockedValue<[CipherContext]>([])
  private let openers = LockedValue<[CipherContext]>([])
  private static let poolLimit = 8

  package init(_ key: SymmetricKey) { self.key = key }

  /// Encrypts `plaintext` into `output`, which must be exactly `plaintext.count + 16` bytes:
  /// the ciphertext followed by the tag. `aad` and `moreAAD` are authenticated in that order.
  package func seal(
    _ plaintext: UnsafeRawBufferPointer, nonce: UnsafeRawBufferPointer,
    authenticating aad: UnsafeRawBufferPointer, _ moreAAD: UnsafeRawBufferPointer = .init(start: nil, count: 0),
    into output: UnsafeMutableRawBufferPointer
  ) throws {
    try Self.require(nonce.count, Self.nonceByteCount, "nonce")
    let context = try borrow(sealers, encrypt: true)
    defer { giveBack(context, to: sealers) }
    try GCM.seal(context.pointer, key: nil, plaintext, nonce: nonce, aad, moreAAD, into: output)
  }

  /// Decrypts `ciphertextAndTag` (ciphertext followed by the 16-byte tag) into `output`, which must
  /// be exactly 16 bytes shorter. On any failure `output` is zeroed and nothing is returned.
  /// - Throws: `CryptoError.authenticationFailed` if the tag does not verify.
  package func open(
    _ ciphertextAndTag: UnsafeRawBufferPointer, nonce: UnsafeRawBufferPointer,
    authenticating aad: UnsafeRawBufferPointer, _ moreAAD: UnsafeRawBufferPointer = .init(start: nil, count: 0),
    into output: UnsafeMutableRawBufferPointer
  ) throws {
    try Self.require(nonce.count, Self.nonceByteCount, "nonce")
    let context = try borrow(openers, encrypt: false)
    defer { giveBack(context, to: openers) }
    try GCM.open(context.pointer, key: nil, ciphertextAndTag, nonce: nonce, aad, moreAAD, into: output)
  }

  private func borrow(_ pool: LockedValue<[CipherContext]>, encrypt: Bool) throws -> CipherContext {
    if let pooled = pool.withLock({ $0.popLast() }) { return pooled }
    guard let cipher = aes256GCMCipher else { throw CryptoError.library(call: "EVP_CIPHER_fetch(AES-256-GCM)") }
    let context = try CipherContext()
    try key.withUnsafeBytes { (keyBytes) in
      try check(
        EVP_CipherInit_ex(context.pointer, cipher, nil, keyBytes.bytes, nil, encrypt ? 1 : 0), "EVP_CipherInit_ex")
    }
    return context
  }

  private func giveBack(_ context: CipherContext, to pool: LockedValue<[CipherContext]>) {
    pool.withLock { contexts in
      if contexts.count < Self.poolLimit { contexts.append(context) }
    }
  }

  static func require(_ actual: Int, _ expected: Int, _ what: String) throws {
    guard actual == expected else { throw CryptoError.invalidLength(what: what, expected: expected, actual: actual) }
  }
}

/// The GCM steps shared by `AESGCMKey` (a context keyed once) and `XAESKey` (a context re-keyed
/// with each record's derived key).
enum GCM {
  /// Seals into `output` (`plaintext.count + 16` bytes: ciphertext, then tag). `key` is nil when
  /// `ctx` already holds the key schedule.
  static func seal(
    _ ctx: OpaquePointer, key: UnsafeRawBufferPointer?, _ plaintext: UnsafeRawBufferPointer,
    nonce: UnsafeRawBufferPointer, _ aad: UnsafeRawBufferPointer, _ moreAAD: UnsafeRawBufferPointer,
    into output: UnsafeMutableRawBufferPointer
  ) throws {
    try AESGCMKey.require(output.count, plaintext.count + AESGCMKey.tagByteCount, "output")
    try check(EVP_EncryptInit_ex(ctx, nil, nil, key?.bytes, nonce.bytes), "EVP_EncryptInit_ex")
    try feedAAD(ctx, aad)
    try feedAAD(ctx, moreAAD)
    let out = output.baseAddress!.assumingMemoryBound(to: UInt8.self)
    let written = try update(ctx, plaintext, into: out, "EVP_CipherUpdate(encrypt)")
    var final: Int32 = 0
    try check(EVP_EncryptFinal_ex(ctx, out + written, &final), "EVP_EncryptFinal_ex")
    try check(vault_gcm_get_tag(ctx, out + plaintext.count, Int32(AESGCMKey.tagByteCount)), "EVP_CTRL_GCM_GET_TAG")
  }

  /// Opens `ciphertextAndTag` into `output` (16 bytes shorter); on any failure `output` is zeroed.
  /// - Throws: `CryptoError.authenticationFailed` when the tag does not verify.
  static func open(
    _ ctx: OpaquePointer, key: UnsafeRawBufferPointer?, _ ciphertextAndTag: UnsafeRawBufferPointer,
    nonce: UnsafeRawBufferPointer, _ aad: UnsafeRawBufferPointer, _ moreAAD: UnsafeRawBufferPointer,
    into output: UnsafeMutableRawBufferPointer
  ) throws {
    guard ciphertextAndTag.count >= AESGCMKey.tagByteCount else { throw CryptoError.authenticationFailed }
    let length = ciphertextAndTag.count - AESGCMKey.tagByteCount
    try AESGCMKey.require(output.count, length, "output")
    do {
      try check(EVP_DecryptInit_ex(ctx, nil, nil, key?.bytes, nonce.bytes), "EVP_DecryptInit_ex")
      try feedAAD(ctx, aad)
      try feedAAD(ctx, moreAAD)
      let out = output.baseAddress?.assumingMemoryBound(to: UInt8.self)
      var written = 0
      if let out {
        written = try update(
          ctx, UnsafeRawBufferPointer(rebasing: ciphertextAndTag[0..<length]), into: out, "EVP_CipherUpdate(decrypt)")
      }
      try check(
        vault_gcm_set_tag(ctx, ciphertextAndTag.bytes! + length, Int32(AESGCMKey.tagByteCount)),
        "EVP_CTRL_GCM_SET_TAG")
      var final: Int32 = 0
      // GCM's final step writes no bytes; it only checks the tag. It still wants a valid pointer.
      var scratch: UInt8 = 0
      let verified = withUnsafeMutablePointer(to: &scratch) { scratch in
        EVP_DecryptFinal_ex(ctx, out.map { $0 + written } ?? scratch, &final)
      }
      guard verified == 1 else {
        ERR_clear_error()
        throw CryptoError.authenticationFailed
      }
    } catch {
      cleanse(output)
      throw error
    }
  }

  /// OpenSSL takes lengths as `int`: larger buffers go in slices of at most this many bytes. A
  /// multiple of the AES block (16), so every slice but the last is whole blocks; GCM would
  /// accept any split, this only keeps OpenSSL on its fast path.
  static let sliceLimit = 1 << 30

  /// Encrypts or decrypts `input` into `out` in slices OpenSSL's `int` lengths can express, and
  /// returns the bytes written (GCM writes exactly as many as it is given).
  static func update(
    _ ctx: OpaquePointer, _ input: UnsafeRawBufferPointer, into out: UnsafeMutablePointer<UInt8>, _ call: StaticString
  ) throws -> Int {
    var offset = 0
    while offset < input.count {
      let length = min(sliceLimit, input.count - offset)
      var written: Int32 = 0
      try check(EVP_CipherUpdate(ctx, out + offset, &written, input.bytes! + offset, Int32(length)), call)
      guard Int(written) == length else { throw CryptoError.library(call: "\(call)") }
      offset += length
    }
    return offset
  }

  private static func feedAAD(_ ctx: OpaquePointer, _ aad: UnsafeRawBufferPointer) throws {
    var offset = 0
    while offset < aad.count {
      let length = min(Self.sliceLimit, aad.count - offset)
      var ignored: Int32 = 0
      try check(EVP_CipherUpdate(ctx, nil, &ignored, aad.bytes! + offset, Int32(length)), "EVP_CipherUpdate(aad)")
      offset += length
    }
  }
}

/// One-shot AES-256-GCM over arrays, for tests, vectors and callers that seal rarely.
package enum AESGCM {
  package static func seal(
    _ plaintext: [UInt8], using key: SymmetricKey, nonce: [UInt8], authenticating aad: [UInt8] = []
  ) throws -> (ciphertext: [UInt8], tag: [UInt8]) {
    var output = [UInt8](repeating: 0, count: plaintext.count + AESGCMKey.tagByteCount)
    try withBuffers(plaintext, nonce, aad, &output) { (input, nonce, aad, out) in
      try AESGCMKey(key).seal(input, nonce: nonce, authenticating: aad, into: out)
    }
    return (Array(output.prefix(plaintext.count)), Array(output.suffix(AESGCMKey.tagByteCount)))
  }

  package static func open(
    ciphertext: [UInt8], tag: [UInt8], using key: SymmetricKey, nonce: [UInt8], authenticating aad: [UInt8] = []
  ) throws -> [UInt8] {
    guard tag.count == AESGCMKey.tagByteCount else { throw CryptoError.authenticationFailed }
    var output = [UInt8](repeating: 0, count: ciphertext.count)
    try withBuffers(ciphertext + tag, nonce, aad, &output) { (input, nonce, aad, out) in
      try AESGCMKey(key).open(input, nonce: nonce, authenticating: aad, into: out)
    }
    return output
  }

  private static func withBuffers(
    _ input: [UInt8], _ nonce: [UInt8], _ aad: [UInt8], _ output: inout [UInt8],
    _ body: (UnsafeRawBufferPointer, UnsafeRawBufferPointer, UnsafeRawBufferPointer, UnsafeMutableRawBufferPointer)
      throws -> Void
  ) throws {
    try input.withUnsafeBytes { (i) in
      try nonce.withUnsafeBytes { (n) in
        try aad.withUnsafeBytes { (a) in
          try output.withUnsafeMutableBytes { (o) in try body(i, n, a, o) }
        }
      }
    }
  }
}

extension UnsafeRawBufferPointer {
  /// The base address as the `unsigned char *` OpenSSL takes (nil for an empty buffer).
  var bytes: UnsafePointer<UInt8>? { baseAddress?.assumingMemoryBound(to: UInt8.self) }
}
