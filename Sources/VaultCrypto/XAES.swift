// C boundary: XAES-256-GCM (AES-256 in ECB for the derivation, GCM for the record) through OpenSSL EVP.
internal import COpenSSL

/// XAES-256-GCM, as specified by C2SP (https://c2sp.org/XAES-256-GCM): AES-256-GCM under a key
/// derived from the 256-bit key and the first 12 bytes of a 192-bit nonce, with the last 12 bytes
/// as the GCM nonce. Random 192-bit nonces can be drawn for as many messages as anyone will seal
/// under one key.
///
/// Thread-safe. The AES-256 key schedule of the main key and the derivation subkey are made once;
/// each call borrows one `Workspace` (the OpenSSL contexts a record needs) from a small pool and
/// re-keys its GCM context with the derived key.
package final class XAESKey: Sendable {
  package static let nonceByteCount = 24
  package static let tagByteCount = AESGCMKey.tagByteCount

  /// K1 of the derivation: AES-256_K(0^128) doubled in GF(2^128), as CMAC's first subkey.
  private let subkey: SecureBytes
  private let key: SymmetricKey
  private let sealers = LockedValue<[Workspace]>([])
  private let openers = LockedValue<[Workspace]>([])
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
    try sealers.withLock { $0.append(try Workspace(key: key, encrypt: true, blockEncrypter: context)) }
  }

  /// The OpenSSL contexts one record needs, used by one thread at a time: the main key's AES-256
  /// schedule (for the derivation), a GCM context that each record re-keys, and a SHA-256 context
  /// for a caller's hashes of the same record. Borrowed together, so a record takes a pool's
  /// lock once rather than once per context.
  package final class Workspace: @unchecked Sendable {
    fileprivate let blockEncrypter: CipherContext
    fileprivate let gcm: CipherContext
    fileprivate let digest: DigestContext

    fileprivate init(key: SymmetricKey, encrypt: Bool, blockEncrypter: CipherContext? = nil) throws {
      self.blockEncrypter = try blockEncrypter ?? XAESKey.blockEncrypter(key)
      gcm = try XAESKey.gcmContext(encrypt: encrypt)
      digest = try DigestContext()
    }

    /// Hashes `a ‖ b ‖ c` with SHA-256 into `output` (32 bytes); as `SHA256.hash(_:_:_:into:)`.
    package func sha256(
      _ a: UnsafeRawBufferPointer, _ b: UnsafeRawBufferPointer, _ c: UnsafeRawBufferPointer,
      into output: UnsafeMutableRawBufferPointer
    ) throws {
      try SHA256.hash(a, b, c, into: output, using: digest)
    }
  }

  /// Calls `body` with a workspace for sealing (`sealing`) or opening, borrowed from the pool
  /// (or made, when every pooled one is in use) and given back afterwards.
  ///
  /// - Parameters:
  ///   - sealing: true for `seal(_:nonce:authenticating:_:into:using:)`, false for `open`.
  ///   - body: uses the workspace; it must not escape.
  /// - Returns: what `body` returns.
  /// - Throws: `CryptoError.library` when a context cannot be made; what `body` throws.
  package func withWorkspace<R>(sealing: Bool, _ body: (Workspace) throws -> R) throws -> R {
    let workspace = try borrowWorkspace(sealing: sealing)
    defer { giveBack(workspace, sealing: sealing) }
    return try body(workspace)
  }

  /// A workspace for sealing (`sealing`) or opening, from the pool or made; the caller must give
  /// it back with `giveBack(_:sealing:)` (in a `defer`) and use it on one thread meanwhile.
  /// `withWorkspace(sealing:_:)` does both; this pair is for a hot path in another module, where
  /// the generic closure's captures cost a retain and a release each on every record.
  ///
  /// - Parameter sealing: true for sealing, false for opening.
  /// - Returns: the workspace, lent to the caller.
  /// - Throws: `CryptoError.library` when a context cannot be made.
  package func borrowWorkspace(sealing: Bool) throws -> Workspace {
    let pooled = sealing ? sealers.withLock { $0.popLast() } : openers.withLock { $0.popLast() }
    return try pooled ?? Workspace(key: key, encrypt: sealing)
  }

  /// Returns a workspace from `borrowWorkspace(sealing:)` to its pool (or frees it when the pool is full).
  ///
  /// - Parameters:
  ///   - workspace: the workspace, no longer used by the caller.
  ///   - sealing: the same value it was borrowed with.
  package func giveBack(_ workspace: Workspace, sealing: Bool) {
    sealing ? giveBack(workspace, to: sealers) : giveBack(workspace, to: openers)
  }

  private func giveBack(_ workspace: Workspace, to pool: LockedValue<[Workspace]>) {
    pool.withLock { workspaces in
      if workspaces.count < Self.poolLimit { workspaces.append(workspace) }
    }
  }

  /// Writes the 32-byte key XAES-256-GCM uses for `nonce` (24 bytes) into `output`.
  package func deriveKey(nonce: UnsafeRawBufferPointer, into output: UnsafeMutableRawBufferPointer) throws {
    try withWorkspace(sealing: true) { try deriveKey(nonce: nonce, into: output, using: $0) }
  }

  private func deriveKey(
    nonce: UnsafeRawBufferPointer, into output: UnsafeMutableRawBufferPointer, using workspace: Workspace
  ) throws {
    try AESGCMKey.require(nonce.count, Self.nonceByteCount, "nonce")
    try AESGCMKey.require(output.count, SymmetricKey.byteCount, "derived key")
    try withUnsafeTemporaryAllocation(byteCount: 32, alignment: 16) { blocks in
      defer { cleanse(blocks) }
      subkey.withUnsafeBytes { k1 in
        // M1 = 00 01 'X' 00 ‖ N[0..<12], M2 = 00 02 'X' 00 ‖ N[0..<12], each XOR K1.
        for block in 0..<2 {
          let index = 16 * block
          blocks[index] = 0
          blocks[index + 1] = UInt8(block + 1)
          blocks[index + 2] = 0x58  // "X"
          blocks[index + 3] = 0
          for i in 0..<12 { blocks[index + 4 + i] = nonce[i] }
          for i in 0..<16 { blocks[index + i] ^= k1[i] }
        }
      }
      try Self.encryptBlocks(workspace.blockEncrypter, UnsafeRawBufferPointer(blocks), into: output)
    }
  }

  /// Encrypts `plaintext` into `output` (`plaintext.count + 16` bytes: ciphertext, then tag) under
  /// `nonce` (24 bytes); `aad` and `moreAAD` are authenticated in that order.
  package func seal(
    _ plaintext: UnsafeRawBufferPointer, nonce: UnsafeRawBufferPointer,
    authenticating aad: UnsafeRawBufferPointer, _ moreAAD: UnsafeRawBufferPointer = .init(start: nil, count: 0),
    into output: UnsafeMutableRawBufferPointer
  ) throws {
    try withWorkspace(sealing: true) {
      try seal(plaintext, nonce: nonce, authenticating: aad, moreAAD, into: output, using: $0)
    }
  }

  /// `seal(_:nonce:authenticating:_:into:)` with a workspace the caller borrowed for sealing.
  package func seal(
    _ plaintext: UnsafeRawBufferPointer, nonce: UnsafeRawBufferPointer,
    authenticating aad: UnsafeRawBufferPointer, _ moreAAD: UnsafeRawBufferPointer,
    into output: UnsafeMutableRawBufferPointer, using workspace: Workspace
  ) throws {
    try withDerivedKey(nonce, workspace) { derived in
      try GCM.seal(workspace.gcm.pointer, key: derived, plaintext, nonce: gcmNonce(nonce), aad, moreAAD, into: output)
    }
  }

  /// Decrypts `ciphertextAndTag` into `output` (16 bytes shorter); on any failure `output` is
  /// zeroed. - Throws: `CryptoError.authenticationFailed` if the tag does not verify.
  package func open(
    _ ciphertextAndTag: UnsafeRawBufferPointer, nonce: UnsafeRawBufferPointer,
    authenticating aad: UnsafeRawBufferPointer, _ moreAAD: UnsafeRawBufferPointer = .init(start: nil, count: 0),
    into output: UnsafeMutableRawBufferPointer
  ) throws {
    try withWorkspace(sealing: false) {
      try open(ciphertextAndTag, nonce: nonce, authenticating: aad, moreAAD, into: output, using: $0)
    }
  }

  /// `open(_:nonce:authenticating:_:into:)` with a workspace the caller borrowed for opening.
  package func open(
    _ ciphertextAndTag: UnsafeRawBufferPointer, nonce: UnsafeRawBufferPointer,
    authenticating aad: UnsafeRawBufferPointer, _ moreAAD: UnsafeRawBufferPointer,
    into output: UnsafeMutableRawBufferPointer, using workspace: Workspace
  ) throws {
    try withDerivedKey(nonce, workspace) { derived in
      try GCM.open(
        workspace.gcm.pointer, key: derived, ciphertextAndTag, nonce: gcmNonce(nonce), aad, moreAAD, into: output)
    }
  }

  // MARK: - Plumbing

  private func gcmNonce(_ nonce: UnsafeRawBufferPointer) -> UnsafeRawBufferPointer {
    UnsafeRawBufferPointer(rebasing: nonce[12..<24])
  }

  private func withDerivedKey(
    _ nonce: UnsafeRawBufferPointer, _ workspace: Workspace, _ body: (UnsafeRawBufferPointer) throws -> Void
  ) throws {
    try withUnsafeTemporaryAllocation(byteCount: SymmetricKey.byteCount, alignment: 16) { derived in
      defer { cleanse(derived) }
      try deriveKey(nonce: nonce, into: derived, using: workspace)
      try body(UnsafeRawBufferPointer(derived))
    }
  }

  fileprivate static func blockEncrypter(_ key: SymmetricKey) throws -> CipherContext {
    guard let cipher = aes256ECBCipher else { throw CryptoError.library(call: "EVP_CIPHER_fetch(AES-256-ECB)") }
    let context = try CipherContext()
    try key.withUnsafeBytes { key in
      try check(EVP_EncryptInit_ex(context.pointer, cipher, nil, key.bytes, nil), "EVP_EncryptInit_ex(ECB)")
    }
    try check(EVP_CIPHER_CTX_set_padding(context.pointer, 0), "EVP_CIPHER_CTX_set_padding")
    return context
  }

  fileprivate static func gcmContext(encrypt: Bool) throws -> CipherContext {
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
}
