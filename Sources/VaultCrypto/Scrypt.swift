// C boundary: scrypt (RFC 7914) and streaming SHA-256 through OpenSSL, for backup bundles.
internal import COpenSSL

/// scrypt parameters: N = 2^`logN`, block size `r`, parallelism `p`.
package struct ScryptParameters: Sendable, Equatable {
  package var logN: UInt8
  package var r: UInt32
  package var p: UInt32

  package init(logN: UInt8, r: UInt32, p: UInt32) {
    self.logN = logN
    self.r = r
    self.p = p
  }

  /// What every bundle is written with: N = 2^17, r = 8, p = 1 (128 MiB, RFC 7914's interactive
  /// choice scaled up; SECURITY.md gives the measured time).
  package static let standard = ScryptParameters(logN: 17, r: 8, p: 1)

  /// 128 · N · r · p in bytes, or nil on overflow: at least the memory scrypt needs (OpenSSL
  /// allocates 128 · r · (N + p + 2)) and proportional to its work, so bounding it bounds both.
  package var memoryBytes: UInt64? {
    guard logN < 64 else { return nil }
    let (a, o1) = UInt64(128).multipliedReportingOverflow(by: UInt64(1) << UInt64(logN))
    let (b, o2) = a.multipliedReportingOverflow(by: UInt64(r))
    let (c, o3) = b.multipliedReportingOverflow(by: UInt64(p))
    return o1 || o2 || o3 ? nil : c
  }

  /// The most a bundle may ask for when it is read: `memoryBytes` ≤ 1 GiB, p ≤ 16, r ≤ 32,
  /// N ≤ 2^24. A hostile bundle can cost at most that (8 times the work of `standard`), never an
  /// allocation it names.
  package var isAcceptable: Bool {
    guard (1...24).contains(logN), (1...32).contains(r), (1...16).contains(p), let memory = memoryBytes else {
      return false
    }
    return memory <= 1 << 30
  }
}

/// scrypt key derivation into zeroizing storage.
package enum Scrypt {
  /// Derives a 256-bit key from `passphrase` and `salt`.
  ///
  /// - Throws: `CryptoError.invalidLength` for parameters outside `isAcceptable` (nothing is
  ///   allocated); `CryptoError.library` when OpenSSL fails.
  package static func deriveKey(
    passphrase: UnsafeRawBufferPointer, salt: [UInt8], parameters: ScryptParameters
  ) throws -> SymmetricKey {
    guard parameters.isAcceptable, let memory = parameters.memoryBytes else {
      throw CryptoError.invalidLength(what: "scrypt parameters", expected: 0, actual: Int(parameters.logN))
    }
    let bytes = try SecureBytes(count: SymmetricKey.byteCount) { out in
      try salt.withUnsafeBufferPointer { salt in
        try check(
          EVP_PBE_scrypt(
            passphrase.baseAddress?.assumingMemoryBound(to: CChar.self), passphrase.count, salt.baseAddress,
            salt.count, UInt64(1) << UInt64(parameters.logN), UInt64(parameters.r), UInt64(parameters.p),
            memory + (1 << 20), out.baseAddress!.assumingMemoryBound(to: UInt8.self), out.count),
          "EVP_PBE_scrypt")
      }
    }
    return try SymmetricKey(storage: bytes)
  }
}

/// SHA-256 over data given in pieces (a file read in blocks). One thread at a time.
package final class SHA256Hasher {
  private let context: DigestContext

  /// - Throws: `CryptoError.library` when OpenSSL fails.
  package init() throws {
    guard let md = sha256Digest else { throw CryptoError.library(call: "EVP_MD_fetch(SHA256)") }
    context = try DigestContext()
    try check(EVP_DigestInit_ex(context.pointer, md, nil), "EVP_DigestInit_ex")
  }

  /// Adds `data` to the hash.
  package func update(_ data: UnsafeRawBufferPointer) throws {
    guard data.count > 0 else { return }
    try check(EVP_DigestUpdate(context.pointer, data.baseAddress, data.count), "EVP_DigestUpdate")
  }

  /// The digest of everything added; the hasher is spent afterwards.
  package func finish() throws -> [UInt8] {
    var out = [UInt8](repeating: 0, count: SHA256.byteCount)
    var length: UInt32 = 0
    try out.withUnsafeMutableBufferPointer {
      try check(EVP_DigestFinal_ex(context.pointer, $0.baseAddress, &length), "EVP_DigestFinal_ex")
    }
    return out
  }
}
