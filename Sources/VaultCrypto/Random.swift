internal import COpenSSL
import Foundation
import Glibc

/// Cryptographically secure random bytes from OpenSSL's DRBG (seeded by the kernel).
public enum SecureRandom {
  /// Fills `buffer` with random bytes, of any size.
  ///
  /// - Parameter buffer: the bytes to overwrite.
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

  /// A random (version 4) UUID from `getrandom(2)`. Foundation's `UUID()` must not be used for record
  /// ids: when it cannot open /dev/urandom (too many open files) it returns the same UUID every
  /// time, and the queue then drops every later record as a "duplicate".
  ///
  /// - Returns: a new UUID with version 4 and the RFC 4122 variant set.
  /// - Throws: `CryptoError.randomUnavailable` when the kernel refuses.
  public static func uuid() throws -> UUID {
    // From the kernel, like envelope nonces: record ids are part of queue contexts, and nothing a
    // cloned process holds should make two records share one.
    var bytes = [UInt8](repeating: 0, count: 16)
    try bytes.withUnsafeMutableBytes { try KernelRandom.fill($0) }
    bytes[6] = bytes[6] & 0x0F | 0x40  // version 4
    bytes[8] = bytes[8] & 0x3F | 0x80  // RFC 4122 variant
    return UUID(
      uuid: (
        bytes[0], bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7], bytes[8], bytes[9],
        bytes[10], bytes[11], bytes[12], bytes[13], bytes[14], bytes[15]
      ))
  }

  /// Returns `count` random bytes (for identifiers and nonces, not for keys: use `SymmetricKey.generate`).
  ///
  /// - Parameter count: how many bytes.
  /// - Returns: the random bytes, in an ordinary (not zeroizing) array.
  /// - Throws: `CryptoError.randomUnavailable` if the generator fails.
  public static func bytes(_ count: Int) throws -> [UInt8] {
    var out = [UInt8](repeating: 0, count: count)
    try out.withUnsafeMutableBytes { (buffer) in try fill(buffer) }
    return out
  }
}

/// Random bytes straight from the kernel, one `getrandom(2)` call per use, for envelope nonces.
///
/// No user-space state is kept between calls, so nothing a process holds can be replayed by a
/// copy of it (a fork, a CRIU restore, a VM snapshot started twice): a repeat would need the
/// kernel's own generator to repeat.
public enum KernelRandom {
  /// The most `fill` draws in one call: getrandom(2) never returns fewer bytes for requests of up
  /// to 256 bytes once the generator is initialised.
  public static let maximumByteCount = 256

  /// Fills `buffer` (at most 256 bytes) with one blocking `getrandom(2)` call, retried only when a
  /// signal interrupted it.
  ///
  /// - Parameter buffer: the bytes to overwrite; an empty buffer is left as it is.
  /// - Throws: `CryptoError.invalidLength` when `buffer` is larger than `maximumByteCount`;
  ///   `CryptoError.randomUnavailable` when the kernel refuses or returns fewer bytes (the buffer
  ///   is then cleared).
  public static func fill(_ buffer: UnsafeMutableRawBufferPointer) throws {
    guard let base = buffer.baseAddress, buffer.count > 0 else { return }
    guard buffer.count <= maximumByteCount else {
      throw CryptoError.invalidLength(what: "kernel random request", expected: maximumByteCount, actual: buffer.count)
    }
    while true {
      let got = getrandom(base, buffer.count, 0)
      if got == buffer.count { return }
      if got < 0, errno == EINTR { continue }
      cleanse(buffer)
      throw CryptoError.randomUnavailable
    }
  }
}
