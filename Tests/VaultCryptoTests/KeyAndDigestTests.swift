import XCTest

@testable import VaultCrypto

final class KeyAndDigestTests: XCTestCase {
  /// FIPS 180-2 appendix B.1 ("abc") and the empty string.
  func testSHA256KnownAnswers() throws {
    XCTAssertEqual(
      hexString(try SHA256.hash(Array("abc".utf8))),
      "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
    XCTAssertEqual(
      hexString(try SHA256.hash([])), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
  }

  /// RFC 5869 appendix A, test cases 1 and 3 (SHA-256; case 3 has empty salt and info).
  func testHKDFRFC5869Vectors() throws {
    let ikm = [UInt8](repeating: 0x0b, count: 22)
    let okm1 = try ikm.withUnsafeBytes {
      try HKDF.deriveKey(inputKeyMaterial: $0, salt: Array(0x00...0x0c), info: Array(0xf0...0xf9), length: 42)
    }
    XCTAssertEqual(
      okm1.withUnsafeBytes { hexString(Array($0)) },
      "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865")
    let okm3 = try ikm.withUnsafeBytes { try HKDF.deriveKey(inputKeyMaterial: $0, salt: [], info: [], length: 42) }
    XCTAssertEqual(
      okm3.withUnsafeBytes { hexString(Array($0)) },
      "8da4e775a563c18f715f802a063c5a31b8a11f5c5ee1879ec3454e5f3c738d2d9d201395faa4b61a96c8")
  }

  func testKeysNeverDescribeTheirBytes() throws {
    let bytes = [UInt8](repeating: 0xAB, count: 32)
    let key = try bytes.withUnsafeBytes { try SymmetricKey(copying: $0) }
    for text in [
      String(describing: key), String(reflecting: key), "\(key)",
      String(describing: Mirror(reflecting: key).children.map { $0.value }),
    ] {
      XCTAssertFalse(text.lowercased().contains("ab"), "key text must be redacted: \(text.count) chars")
      XCTAssertFalse(text.contains("171"), "no decimal bytes either")
    }
    XCTAssertEqual(String(describing: key), "SymmetricKey(redacted)")
  }

  func testKeysCompareByValue() throws {
    let a = try [UInt8](repeating: 1, count: 32).withUnsafeBytes { try SymmetricKey(copying: $0) }
    let b = try [UInt8](repeating: 1, count: 32).withUnsafeBytes { try SymmetricKey(copying: $0) }
    var other = [UInt8](repeating: 1, count: 32)
    other[31] = 2
    let c = try other.withUnsafeBytes { try SymmetricKey(copying: $0) }
    XCTAssertEqual(a, b)
    XCTAssertNotEqual(a, c)
  }

  func testKeyOfWrongLengthIsRejected() {
    XCTAssertThrowsError(try [UInt8](repeating: 1, count: 16).withUnsafeBytes { try SymmetricKey(copying: $0) }) {
      XCTAssertEqual($0 as? CryptoError, .invalidLength(what: "key", expected: 32, actual: 16))
    }
  }

  func testGeneratedKeysDiffer() throws {
    XCTAssertNotEqual(try SymmetricKey.generate(), try SymmetricKey.generate())
  }
}

final class NonceSourceTests: XCTestCase {
  func testNoncesAreDistinctAcrossManyBlocks() throws {
    let source = NonceSource()
    var seen = Set<[UInt8]>()
    var nonce = [UInt8](repeating: 0, count: 12)
    for _ in 0..<5_000 {  // about 15 blocks
      try nonce.withUnsafeMutableBytes { try source.next(into: $0) }
      XCTAssertNotEqual(nonce, [UInt8](repeating: 0, count: 12))
      seen.insert(nonce)
    }
    XCTAssertEqual(seen.count, 5_000)
  }

  func testNoncesAreDistinctAcrossThreads() throws {
    let source = NonceSource()
    let collected = NonceBag()
    DispatchQueue.concurrentPerform(iterations: 4) { _ in
      var local: [[UInt8]] = []
      for _ in 0..<1_000 {
        var nonce = [UInt8](repeating: 0, count: 12)
        try? nonce.withUnsafeMutableBytes { try source.next(into: $0) }
        local.append(nonce)
      }
      collected.add(local)
    }
    XCTAssertEqual(Set(collected.all).count, 4_000)
  }

  /// A forked child must not hand out the nonces its parent already holds in its block.
  func testForkedChildDrawsANewBlock() throws {
    let source = NonceSource()
    var first = [UInt8](repeating: 0, count: 12)
    try first.withUnsafeMutableBytes { try source.next(into: $0) }
    var pipeEnds: [Int32] = [0, 0]
    XCTAssertEqual(pipe(&pipeEnds), 0)
    let pid = fork()
    if pid == 0 {
      var nonce = [UInt8](repeating: 0, count: 12)
      try? nonce.withUnsafeMutableBytes { try source.next(into: $0) }
      _ = nonce.withUnsafeBytes { write(pipeEnds[1], $0.baseAddress, 12) }
      _exit(0)
    }
    close(pipeEnds[1])
    var childNonce = [UInt8](repeating: 0, count: 12)
    XCTAssertEqual(childNonce.withUnsafeMutableBytes { read(pipeEnds[0], $0.baseAddress, 12) }, 12)
    close(pipeEnds[0])
    var status: Int32 = 0
    waitpid(pid, &status, 0)
    var parentNext = [UInt8](repeating: 0, count: 12)
    try parentNext.withUnsafeMutableBytes { try source.next(into: $0) }
    XCTAssertNotEqual(childNonce, parentNext, "the child did not reuse the parent's next nonce")
  }
}

final class NonceBag: @unchecked Sendable {
  private let lock = NSLock()
  private var items: [[UInt8]] = []
  func add(_ more: [[UInt8]]) { lock.withLock { items += more } }
  var all: [[UInt8]] { lock.withLock { items } }
}
