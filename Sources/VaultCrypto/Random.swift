import COpenSSL
import Foundation
import Glibc
import Synchronization

/// Cryptographically secure random bytes from OpenSSL's DRBG (seeded by the kernel).
public enum SecureRandom {
  /// Fills `buffer` with random bytes.
  /// - Throws: `CryptoError.randomUnavailable` if the generator fails; callers must not fall back.
  public static func fill(_ buffer: UnsafeMutableRawBufferPointer) throws {
    guard let base = buffer.baseAddress else { return }
    // RAND_bytes takes an `int` length: fill larger buffers a slice at a time.
    var offset = 0
    while offset < buffer.count {
      let length = min(1 << 30, buffer.count - offset)
      guard RAND_bytes(base.assumingMemoryBound(to: UInt8.self) + offset, Int32(length)) == 1 else {
        ERR_clear_error()
        throw CryptoError.randomUnavailable
      }
      offset += length
    }
  }

  /// A random (version 4) UUID from the DRBG. Foundation's `UUID()` must not be used for record
  /// ids: when it cannot open /dev/urandom (too many open files) it returns the same UUID every
  /// time, and the queue then drops every later record as a "duplicate".
  public static func uuid() throws -> UUID {
    var bytes = try self.bytes(16)
    bytes[6] = bytes[6] & 0x0F | 0x40  // version 4
    bytes[8] = bytes[8] & 0x3F | 0x80  // RFC 4122 variant
    return UUID(
      uuid: (
        bytes[0], bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7], bytes[8], bytes[9],
        bytes[10], bytes[11], bytes[12], bytes[13], bytes[14], bytes[15]
      ))
  }

  /// Returns `count` random bytes (for identifiers and nonces, not for keys: use `SymmetricKey.generate`).
  public static func bytes(_ count: Int) throws -> [UInt8] {
    var out = [UInt8](repeating: 0, count: count)
    try out.withUnsafeMutableBytes { (buffer) in try fill(buffer) }
    return out
  }
}

/// Random 96-bit GCM nonces, drawn from OpenSSL's DRBG in 4 KiB blocks.
///
/// One `RAND_bytes` call costs about as much as sealing a 1 KiB record, so nonces are fetched in
/// bulk and handed out once each. The block is discarded when the process id changes, so a forked
/// child never reuses its parent's nonces. Thread-safe.
public final class NonceSource: Sendable {
  public static let nonceByteCount = 12
  private static let blockByteCount = 4092  // 341 nonces

  private struct Block {
    var bytes = [UInt8](repeating: 0, count: NonceSource.blockByteCount)
    var offset = NonceSource.blockByteCount
    var owner: pid_t = 0
  }

  private let block = Mutex(Block())

  public init() {}

  /// Writes a fresh random nonce into `nonce` (exactly 12 bytes).
  public func next(into nonce: UnsafeMutableRawBufferPointer) throws {
    guard nonce.count == Self.nonceByteCount else {
      throw CryptoError.invalidLength(what: "nonce", expected: Self.nonceByteCount, actual: nonce.count)
    }
    try block.withLock { block in
      let pid = getpid()
      if block.offset + Self.nonceByteCount > block.bytes.count || block.owner != pid {
        try block.bytes.withUnsafeMutableBytes { try SecureRandom.fill($0) }
        block.offset = 0
        block.owner = pid
      }
      block.bytes.withUnsafeBytes { bytes in
        nonce.copyMemory(
          from: UnsafeRawBufferPointer(rebasing: bytes[block.offset..<(block.offset + Self.nonceByteCount)]))
      }
      // Each nonce is handed out once: overwrite it in the block as it leaves.
      for i in block.offset..<(block.offset + Self.nonceByteCount) { block.bytes[i] = 0 }
      block.offset += Self.nonceByteCount
    }
  }
}
