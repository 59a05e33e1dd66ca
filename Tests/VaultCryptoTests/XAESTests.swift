import Foundation
import XCTest

@testable import VaultCrypto

/// XAES-256-GCM against C2SP's published vectors (https://c2sp.org/XAES-256-GCM, "Test vectors").
final class XAESTests: XCTestCase {
  func testC2SPVectors() throws {
    let nonce = Array("ABCDEFGHIJKLMNOPQRSTUVWX".utf8)
    let plaintext = Array("XAES-256-GCM".utf8)
    let cases: [(key: UInt8, aad: [UInt8], expected: String)] = [
      (0x01, [], "ce546ef63c9cc60765923609b33a9a1974e96e52daf2fcf7075e2271"),
      (0x03, Array("c2sp.org/XAES-256-GCM".utf8), "986ec1832593df5443a179437fd083bf3fdb41abd740a21f71eb769d"),
    ]
    for item in cases {
      let key = try [UInt8](repeating: item.key, count: 32).withUnsafeBytes { try SymmetricKey(copying: $0) }
      let xaes = try XAESKey(key)
      var sealed = [UInt8](repeating: 0, count: plaintext.count + 16)
      try plaintext.withUnsafeBytes { p in
        try nonce.withUnsafeBytes { n in
          try item.aad.withUnsafeBytes { a in
            try sealed.withUnsafeMutableBytes { try xaes.seal(p, nonce: n, authenticating: a, into: $0) }
          }
        }
      }
      XCTAssertEqual(hexString(sealed), item.expected)
      var opened = [UInt8](repeating: 0, count: plaintext.count)
      try sealed.withUnsafeBytes { s in
        try nonce.withUnsafeBytes { n in
          try item.aad.withUnsafeBytes { a in
            try opened.withUnsafeMutableBytes { try xaes.open(s, nonce: n, authenticating: a, into: $0) }
          }
        }
      }
      XCTAssertEqual(opened, plaintext)
      sealed[0] ^= 1
      XCTAssertThrowsError(
        try sealed.withUnsafeBytes { s in
          try nonce.withUnsafeBytes { n in
            try item.aad.withUnsafeBytes { a in
              try opened.withUnsafeMutableBytes { try xaes.open(s, nonce: n, authenticating: a, into: $0) }
            }
          }
        }
      ) { XCTAssertEqual($0 as? CryptoError, .authenticationFailed) }
      XCTAssertEqual(opened, [UInt8](repeating: 0, count: plaintext.count), "nothing is returned on failure")
    }
  }

  func testAWrongNonceLengthIsRefused() throws {
    let xaes = try XAESKey(SymmetricKey.generate())
    var out = [UInt8](repeating: 0, count: 32)
    XCTAssertThrowsError(
      try [UInt8](repeating: 0, count: 12).withUnsafeBytes { n in
        try out.withUnsafeMutableBytes { try xaes.deriveKey(nonce: n, into: $0) }
      })
  }
}
