import Foundation
import XCTest

@testable import VaultCrypto

/// AES-GCM over buffers larger than OpenSSL's `int` lengths (issue 8, item 13: a 2 GiB record used
/// to trap converting its length to Int32).
final class LargeBufferTests: XCTestCase {
  /// 2 GiB + 17 bytes: past Int32.max, and not a multiple of the AES block or of any chunk size.
  private let size = (1 << 31) + 17

  /// Anonymous private memory of `count` bytes (zero-filled; pages cost RAM only once written).
  private func map(_ count: Int) throws -> UnsafeMutableRawBufferPointer {
    let base = mmap(nil, count, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0)
    guard let base, base != MAP_FAILED else { throw XCTSkip("cannot map \(count) bytes here") }
    return UnsafeMutableRawBufferPointer(start: base, count: count)
  }

  /// All zeros? (memcmp a slice at a time: a byte loop over 2 GiB takes many seconds unoptimised.)
  private func isZero(_ bytes: UnsafeRawBufferPointer) -> Bool {
    let zeros = [UInt8](repeating: 0, count: 1 << 20)
    var offset = 0
    while offset < bytes.count {
      let length = min(zeros.count, bytes.count - offset)
      guard memcmp(bytes.baseAddress! + offset, zeros, length) == 0 else { return false }
      offset += length
    }
    return true
  }

  func testSealAndOpenBeyondTwoGiBRoundTripAndAuthenticateTheTail() throws {
    let key = try AESGCMKey(SymmetricKey.generate())
    let nonce = [UInt8](repeating: 9, count: AESGCMKey.nonceByteCount)
    let aad = Array("large-record".utf8)
    // The plaintext is all zeros and only read, so it costs no RAM; the output is written.
    let plaintext = try map(size)
    defer { munmap(plaintext.baseAddress, plaintext.count) }
    let sealed = try map(size + AESGCMKey.tagByteCount)
    defer { munmap(sealed.baseAddress, sealed.count) }

    // Every step works in place after the first (OpenSSL allows output == input), so the test
    // needs one 2 GiB buffer of RAM, not three.
    let record = UnsafeMutableRawBufferPointer(rebasing: sealed[0..<size])
    try nonce.withUnsafeBytes { n in
      try aad.withUnsafeBytes { a in
        try key.seal(UnsafeRawBufferPointer(plaintext), nonce: n, authenticating: a, into: sealed)
        // Encrypted to the very end: keystream bytes past the 2 GiB boundary are not left as zeros.
        let tail = UnsafeRawBufferPointer(rebasing: sealed[(size - 64)..<size])
        XCTAssertTrue(tail.contains { $0 != 0 }, "the bytes past 2 GiB were encrypted")

        try key.open(UnsafeRawBufferPointer(sealed), nonce: n, authenticating: a, into: record)
        XCTAssertTrue(isZero(UnsafeRawBufferPointer(record)), "the record opens to what was sealed")

        // Tampering with the last ciphertext byte is caught: the tag covers the whole record.
        try key.seal(UnsafeRawBufferPointer(record), nonce: n, authenticating: a, into: sealed)
        sealed[size - 1] ^= 1
        XCTAssertThrowsError(try key.open(UnsafeRawBufferPointer(sealed), nonce: n, authenticating: a, into: record)) {
          XCTAssertEqual($0 as? CryptoError, .authenticationFailed)
        }
      }
    }
  }
}
