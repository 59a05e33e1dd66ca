import XCTest

@testable import VaultCrypto

/// Published AES-256-GCM vectors: test cases 13–16 of McGrew & Viega, "The Galois/Counter Mode of
/// Operation (GCM)" (2005), the AES-256 cases also used in NIST's GCM validation.
private struct GCMVector {
  let name: String
  let key: String
  let nonce: String
  let plaintext: String
  let aad: String
  let ciphertext: String
  let tag: String
}

private let p64 =
  "d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a72"
  + "1c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657ba637b391aafd255"
private let c64 =
  "522dc1f099567d07f47f37a32a84427d643a8cdcbfe5c0c97598a2bd2555d1aa"
  + "8cb08e48590dbb3da7b08b1056828838c5f61e6393ba7a0abcc9f662898015ad"
private let k15 = "feffe9928665731c6d6a8f9467308308feffe9928665731c6d6a8f9467308308"

private let vectors = [
  GCMVector(
    name: "case 13", key: String(repeating: "0", count: 64), nonce: String(repeating: "0", count: 24),
    plaintext: "", aad: "", ciphertext: "", tag: "530f8afbc74536b9a963b4f1c4cb738b"),
  GCMVector(
    name: "case 14", key: String(repeating: "0", count: 64), nonce: String(repeating: "0", count: 24),
    plaintext: String(repeating: "0", count: 32), aad: "", ciphertext: "cea7403d4d606b6e074ec5d3baf39d18",
    tag: "d0d1c8a799996bf0265b98b5d48ab919"),
  GCMVector(
    name: "case 15", key: k15, nonce: "cafebabefacedbaddecaf888", plaintext: p64, aad: "", ciphertext: c64,
    tag: "b094dac5d93471bdec1a502270e3cc6c"),
  GCMVector(
    name: "case 16", key: k15, nonce: "cafebabefacedbaddecaf888", plaintext: String(p64.prefix(120)),
    aad: "feedfacedeadbeeffeedfacedeadbeefabaddad2", ciphertext: String(c64.prefix(120)),
    tag: "76fc6ece0f4e1768cddf8853bb2d551b"),
]

final class AESGCMTests: XCTestCase {
  func testPublishedVectorsSealAndOpen() throws {
    for vector in vectors {
      let key = try hex(vector.key).withUnsafeBytes { try SymmetricKey(copying: $0) }
      let sealed = try AESGCM.seal(
        hex(vector.plaintext), using: key, nonce: hex(vector.nonce), authenticating: hex(vector.aad))
      XCTAssertEqual(hexString(sealed.ciphertext), vector.ciphertext, vector.name)
      XCTAssertEqual(hexString(sealed.tag), vector.tag, vector.name)
      let opened = try AESGCM.open(
        ciphertext: hex(vector.ciphertext), tag: hex(vector.tag), using: key, nonce: hex(vector.nonce),
        authenticating: hex(vector.aad))
      XCTAssertEqual(hexString(opened), vector.plaintext, vector.name)
    }
  }

  /// The pooled contexts keep the key schedule between calls; reuse must not carry state over.
  func testReusedKeyContextGivesTheSameResultEveryTime() throws {
    let vector = vectors[3]
    let key = AESGCMKey(try hex(vector.key).withUnsafeBytes { try SymmetricKey(copying: $0) })
    let plaintext = hex(vector.plaintext)
    let nonce = hex(vector.nonce)
    let aad = hex(vector.aad)
    for _ in 0..<5 {
      var out = [UInt8](repeating: 0, count: plaintext.count + 16)
      try plaintext.withUnsafeBytes { p in
        try nonce.withUnsafeBytes { n in
          try aad.withUnsafeBytes { a in
            try out.withUnsafeMutableBytes { try key.seal(p, nonce: n, authenticating: a, into: $0) }
          }
        }
      }
      XCTAssertEqual(hexString(out), vector.ciphertext + vector.tag)
      // A failed open in between must not poison the next call.
      var tampered = out
      tampered[0] ^= 1
      var plain = [UInt8](repeating: 0, count: plaintext.count)
      XCTAssertThrowsError(
        try tampered.withUnsafeBytes { c in
          try nonce.withUnsafeBytes { n in
            try aad.withUnsafeBytes { a in
              try plain.withUnsafeMutableBytes { try key.open(c, nonce: n, authenticating: a, into: $0) }
            }
          }
        }
      ) { XCTAssertEqual($0 as? CryptoError, .authenticationFailed) }
      XCTAssertEqual(plain, [UInt8](repeating: 0, count: plaintext.count), "output is wiped on failure")
    }
  }

  func testEveryFlippedBitFailsAuthentication() throws {
    let key = try SymmetricKey.generate()
    let nonce = try SecureRandom.bytes(12)
    let aad = Array("queue:outbox|id:42".utf8)
    let plaintext = Array("the meeting moved to 3pm".utf8)
    let sealed = try AESGCM.seal(plaintext, using: key, nonce: nonce, authenticating: aad)

    func opens(_ c: [UInt8], _ t: [UInt8], _ n: [UInt8], _ a: [UInt8]) -> CryptoError? {
      do {
        _ = try AESGCM.open(ciphertext: c, tag: t, using: key, nonce: n, authenticating: a)
        return nil
      } catch { return error as? CryptoError }
    }
    XCTAssertNil(opens(sealed.ciphertext, sealed.tag, nonce, aad))
    for bit in 0..<(sealed.ciphertext.count * 8) {
      var c = sealed.ciphertext
      c[bit / 8] ^= 1 << (bit % 8)
      XCTAssertEqual(opens(c, sealed.tag, nonce, aad), .authenticationFailed, "ciphertext bit \(bit)")
    }
    for bit in 0..<128 {
      var t = sealed.tag
      t[bit / 8] ^= 1 << (bit % 8)
      XCTAssertEqual(opens(sealed.ciphertext, t, nonce, aad), .authenticationFailed, "tag bit \(bit)")
    }
    for bit in 0..<96 {
      var n = nonce
      n[bit / 8] ^= 1 << (bit % 8)
      XCTAssertEqual(opens(sealed.ciphertext, sealed.tag, n, aad), .authenticationFailed, "nonce bit \(bit)")
    }
    for bit in 0..<(aad.count * 8) {
      var a = aad
      a[bit / 8] ^= 1 << (bit % 8)
      XCTAssertEqual(opens(sealed.ciphertext, sealed.tag, nonce, a), .authenticationFailed, "aad bit \(bit)")
    }
    XCTAssertEqual(opens(sealed.ciphertext, Array(sealed.tag.prefix(15)), nonce, aad), .authenticationFailed)
    XCTAssertEqual(opens(sealed.ciphertext + [0], sealed.tag, nonce, aad), .authenticationFailed)
    XCTAssertEqual(opens(sealed.ciphertext, sealed.tag, nonce, aad + [0]), .authenticationFailed)
  }

  func testWrongKeyFailsAuthentication() throws {
    let nonce = try SecureRandom.bytes(12)
    let sealed = try AESGCM.seal(Array("x".utf8), using: try .generate(), nonce: nonce)
    XCTAssertThrowsError(
      try AESGCM.open(ciphertext: sealed.ciphertext, tag: sealed.tag, using: try .generate(), nonce: nonce)
    ) { XCTAssertEqual($0 as? CryptoError, .authenticationFailed) }
  }

  func testBadNonceLengthIsRejectedNotTruncated() throws {
    XCTAssertThrowsError(try AESGCM.seal([1, 2, 3], using: try .generate(), nonce: [0, 1])) {
      XCTAssertEqual($0 as? CryptoError, .invalidLength(what: "nonce", expected: 12, actual: 2))
    }
  }

  func testConcurrentSealAndOpenOnOneKey() throws {
    let key = AESGCMKey(try .generate())
    let failures = FailureCounter()
    DispatchQueue.concurrentPerform(iterations: 8) { worker in
      for i in 0..<500 {
        do {
          let plain = Array("worker \(worker) record \(i)".utf8)
          let nonce = try SecureRandom.bytes(12)
          var sealed = [UInt8](repeating: 0, count: plain.count + 16)
          var opened = [UInt8](repeating: 0, count: plain.count)
          try plain.withUnsafeBytes { p in
            try nonce.withUnsafeBytes { n in
              try sealed.withUnsafeMutableBytes {
                try key.seal(p, nonce: n, authenticating: .init(start: nil, count: 0), into: $0)
              }
            }
          }
          try sealed.withUnsafeBytes { c in
            try nonce.withUnsafeBytes { n in
              try opened.withUnsafeMutableBytes {
                try key.open(c, nonce: n, authenticating: .init(start: nil, count: 0), into: $0)
              }
            }
          }
          if opened != plain { failures.add() }
        } catch { failures.add() }
      }
    }
    XCTAssertEqual(failures.value, 0)
  }
}

final class FailureCounter: @unchecked Sendable {
  private let lock = NSLock()
  private var count = 0
  func add() { lock.withLock { count += 1 } }
  var value: Int { lock.withLock { count } }
}
