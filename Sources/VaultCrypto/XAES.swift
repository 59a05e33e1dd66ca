// C boundary: XAES-256-GCM (AES-256 in ECB for the derivation, GCM for the record) through OpenSSL EVP.
internal import COpenSSL
import Synchronization

/// XAES-256-GCM, as specified by C2SP (https://c2sp.org/XAES-256-GCM): AES-256-GCM under a key
/// derived from the 256-bit key and the first 12 bytes of a 192-bit nonce, with the last 12 bytes
/// as the GCM nonce. Random 192-bit nonces can be drawn for as many messages as anyone will seal
/// under one key.
///
/// Thread-safe. The AES-256 key schedule of the main key and the derivation subkey are made once;
/// each call borrows pooled contexts and re-keys a GCM context with the derived key.
package final class XAESKey: Sendable {
  package static let nonceByteCount = 24
  package static let tagByteCount = AESGCMKey.tagByteCount

  /// K1 of the derivation: AES-256_K(0^128) doubled in GF(2^128), as CMAC's first subkey.
  private let subkey: SecureBytes
  private let key: SymmetricKey
  private let blockEncrypters = Mutex<[CipherContext]>([])
  private let sealers = Mutex<[CipherContext]>([])
  private let openers = Mutex<[CipherContext]>([])
  private static let poolLimit = 8

  package init(_ key: SymmetricKey) throws {
    self.key = key
    var zero = [UInt8](repeating: 0, count: 16)
    var l = [UInt8](repeating: 0, count: 16)
    defer { l.withUnsafeMutableBytes { cleanse($0) } }
    let context = try Self.blockEncrypter(key)
    try zero.withUnsafeMutableBytes { zero in
      try l.withUnsafeMutableBytes { try Self.encryptBlocks(context, UnsafeRawBufferPointer(zero), into: $0) }
    }
    subkey = SecureBytes(count: 16) { k1 in
      let carry = l[0] >> 7
      for i in 0..<15 { k1[i] = l[i] << 1 | l[i + 1] >> 7 }
      k1[15] = l[15] << 1 ^ (carry * 0x87)
    }
    blockEncrypters.withLock { $0.append(context) }
  }

  /// Writes the 32-byte key XAES-256-GCM uses for `nonce` (24 bytes) into `output`.
  package func deriveKey(nonce: UnsafeRawBufferPointer, into output: UnsafeMutableRawBufferPointer) throws {
    try AESGCMKey.require(nonce.count, Self.nonceByteCount, "nonce")
    try AESGCMKey.require(output.count, SymmetricKey.byteCount, "derived key")
    try withUnsafeTemporaryAllocation(byteCount: 32, alignment: 16) { blocks in
      defer { cleanse(blocks) }
      subkey.withUnsafeBytes { k1 in
        // M1 = 00 01 'X' 00 ‖ N[0..<12], M2 = 00 02 'X' 00 ‖ N[0..<12], each XOR K1.
        for (index, counter) in [(0, UInt8(1)), (16, UInt8(2))] {
          blocks[index] = 0
          blocks[index + 1] = counter
          blocks[index + 2] = 0x58  // "X"
          blocks[index + 3] = 0
          for i in 0..<12 { blocks[index + 4 + i] = nonce[i] }
          for i in 0..<16 { blocks[index + i] ^= k1[i] }
        }
      }
      let context = try borrow(blockEncrypters) { try Self.blockEncrypter(key) }
      defer { giveBack(context, to: blockEncrypters) }
      try Self.encryptBlocks(context, UnsafeRawBufferPointer(blocks), into: output)
    }
  }

  /// Encrypts `plaintext` into `output` (`plaintext.count + 16` bytes: ciphertext, then tag) under
  /// `nonce` (24 bytes); `aad` and `moreAAD` are authenticated in that order.
  package func seal(
    _ plaintext: UnsafeRawBufferPointer, nonce: UnsafeRawBufferPointer,
    authenticating aad: UnsafeRawBufferPointer, _ moreAAD: UnsafeRawBufferPointer = .init(start: nil, count: 0),
    into output: UnsafeMutableRawBufferPointer
  ) throws {
    try withDerivedKey(nonce) { derived in
      let context = try borrow(sealers) { try Self.gcmContext(encrypt: true) }
      defer { giveBack(context, to: sealers) }
      try GCM.seal(context.pointer, key: derived, plaintext, nonce: gcmNonce(nonce), aad, moreAAD, into: output)
    }
  }

  /// Decrypts `ciphertextAndTag` into `output` (16 bytes shorter); on any failure `output` is
  /// zeroed. - Throws: `CryptoError.authenticationFailed` if the tag does not verify.
  package func open(
    _ ciphertextAndTag: UnsafeRawBufferPointer, nonce: UnsafeRawBufferPointer,
    authenticating aad: UnsafeRawBufferPointer, _ moreAAD: UnsafeRawBufferPointer = .init(start: nil, count: 0),
    into output: UnsafeMutableRawBufferPointer
  ) throws {
    try withDerivedKey(nonce) { derived in
      let context = try borrow(openers) { try Self.gcmContext(encrypt: false) }
      defer { giveBack(context, to: openers) }
      try GCM.open(context.pointer, key: derived, ciphertextAndTag, nonce: gcmNonce(nonce), aad, moreAAD, into: output)
    }
  }

  // MARK: - Plumbing

  private func gcmNonce(_ nonce: UnsafeRawBufferPointer) -> UnsafeRawBufferPointer {
    UnsafeRawBufferPointer(rebasing: nonce[12..<24])
  }

  private func withDerivedKey(_ nonce: UnsafeRawBufferPointer, _ body: (UnsafeRawBufferPointer) throws -> Void) throws {
    try withUnsafeTemporaryAllocation(byteCount: SymmetricKey.byteCount, alignment: 16) { derived in
      defer { cleanse(derived) }
      try deriveKey(nonce: nonce, into: derived)
      try body(UnsafeRawBufferPointer(derived))
    }
  }

  private static func blockEncrypter(_ key: SymmetricKey) throws -> CipherContext {
    guard let cipher = aes256ECBCipher else { throw CryptoError.library(call: "EVP_CIPHER_fetch(AES-256-ECB)") }
    let context = try CipherContext()
    try key.withUnsafeBytes { key in
      try check(EVP_EncryptInit_ex(context.pointer, cipher, nil, key.bytes, nil), "EVP_EncryptInit_ex(ECB)")
    }
    try check(EVP_CIPHER_CTX_set_padding(context.pointer, 0), "EVP_CIPHER_CTX_set_padding")
    return context
  }

  private static func gcmContext(encrypt: Bool) throws -> CipherContext {
    guard let cipher = aes256GCMCipher else { throw CryptoError.library(call: "EVP_CIPHER_fetch(AES-256-GCM)") }
    let context = try CipherContext()
    try check(EVP_CipherInit_ex(context.pointer, cipher, nil, nil, nil, encrypt ? 1 : 0), "EVP_CipherInit_ex")
    return context
  }

  /// Encrypts whole 16-byte blocks in ECB mode (the derivation's single-block AES calls).
  private static func encryptBlocks(
    _ context: CipherContext, _ input: UnsafeRawBufferPointer, into output: UnsafeMutableRawBufferPointer
  ) throws {
    precondition(input.count % 16 == 0 && output.count == input.count)
    let written = try GCM.update(
      context.pointer, input, into: output.baseAddress!.assumingMemoryBound(to: UInt8.self), "EVP_EncryptUpdate(ECB)")
    guard written == input.count else { throw CryptoError.library(call: "EVP_EncryptUpdate(ECB)") }
  }

  private func borrow(_ pool: borrowing Mutex<[CipherContext]>, make: () throws -> CipherContext) throws
    -> CipherContext
  {
    if let pooled = pool.withLock({ $0.popLast() }) { return pooled }
    return try make()
  }

  private func giveBack(_ context: CipherContext, to pool: borrowing Mutex<[CipherContext]>) {
    pool.withLock { contexts in
      if contexts.count < Self.poolLimit { contexts.append(context) }
    }
  }
}
