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

final class KernelRandomTests: XCTestCase {
  func testEachDrawIsFresh() throws {
    var seen = Set<[UInt8]>()
    var value = [UInt8](repeating: 0, count: 24)
    for _ in 0..<5_000 {
      try value.withUnsafeMutableBytes { try KernelRandom.fill($0) }
      seen.insert(value)
    }
    XCTAssertEqual(seen.count, 5_000)
  }

  func testDrawsAreDistinctAcrossThreads() throws {
    let collected = NonceBag()
    DispatchQueue.concurrentPerform(iterations: 4) { _ in
      var local: [[UInt8]] = []
      for _ in 0..<1_000 {
        var value = [UInt8](repeating: 0, count: 24)
        try? value.withUnsafeMutableBytes { try KernelRandom.fill($0) }
        local.append(value)
      }
      collected.add(local)
    }
    XCTAssertEqual(Set(collected.all).count, 4_000)
  }

  func testMoreThanOneCallCanGiveIsRefused() throws {
    var big = [UInt8](repeating: 0, count: 257)
    XCTAssertThrowsError(try big.withUnsafeMutableBytes { try KernelRandom.fill($0) })
  }
}

final class NonceBag: @unchecked Sendable {
  private let lock = NSLock()
  private var items: [[UInt8]] = []
  func add(_ more: [[UInt8]]) { lock.withLock { items += more } }
  var all: [[UInt8]] { lock.withLock { items } }
}
