import Foundation
import VaultCrypto
import VaultKeys
import VaultTestSupport
import XCTest

@testable import Vault

final class EnvelopeTests: XCTestCase {
  var temporary: TemporaryDirectory!
  var store: InMemoryKeyStore!
  var vault: Vault!

  override func setUpWithError() throws {
    temporary = TemporaryDirectory()
    store = InMemoryKeyStore()
    vault = try Vault.create(
      home: temporary.sub("home"), store: StoreDescriptor(kind: .memory), resolver: .fixed(store))
  }

  override func tearDown() {
    vault = nil
    temporary = nil
  }

  private let context = Array("queue:outbox|id:7d3f".utf8)

  func testSealThenOpenRoundTrips() throws {
    for size in [0, 1, 15, 16, 17, 64, 1024, 16384, 100_000] {
      let plaintext = (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) }
      let envelope = try vault.seal(plaintext, context: context)
      XCTAssertEqual(envelope.count, size + 45)
      XCTAssertEqual(try vault.open(envelope, context: context), plaintext, "size \(size)")
    }
  }

  func testHeaderLayoutIsFormatOne() throws {
    let envelope = try vault.seal(Array("x".utf8), context: context)
    XCTAssertEqual(Array(envelope[0..<3]), Array("VLT".utf8))
    XCTAssertEqual(envelope[3], 1, "format")
    XCTAssertEqual(envelope[4], 1, "suite")
    XCTAssertEqual(Array(envelope[5..<13]), vault.keyringID.bytes)
    XCTAssertEqual(Array(envelope[13..<17]), [0, 0, 0, 1], "version 1, big-endian")
    XCTAssertEqual(try Envelope.header(of: envelope), .init(keyring: vault.keyringID, version: 1))
  }

  func testEverySealUsesAFreshNonce() throws {
    let plaintext = Array("same text".utf8)
    var nonces = Set<[UInt8]>()
    for _ in 0..<200 {
      let envelope = try vault.seal(plaintext, context: context)
      nonces.insert(Array(envelope[17..<29]))
    }
    XCTAssertEqual(nonces.count, 200)
  }

  func testContextBindsTheRecordToItsPlace() throws {
    let envelope = try vault.seal(Array("secret".utf8), context: context)
    for other in [Array("queue:outbox|id:7d3e".utf8), [], context + [0], Array(context.dropLast())] {
      XCTAssertThrowsError(try vault.open(envelope, context: other)) {
        XCTAssertEqual($0 as? EnvelopeError, .authenticationFailed)
      }
    }
  }

  func testEachMalformedInputHasItsOwnError() throws {
    let envelope = try vault.seal(Array("secret".utf8), context: context)
    func error(_ bytes: [UInt8]) -> EnvelopeError? {
      do {
        _ = try vault.open(bytes, context: context)
        return nil
      } catch { return error as? EnvelopeError }
    }
    XCTAssertEqual(error([]), .notAnEnvelope)
    XCTAssertEqual(error(Array("hello, plain text".utf8)), .notAnEnvelope)
    XCTAssertEqual(error(try SecureRandom.bytes(200).map { $0 == 0x56 ? 0 : $0 }), .notAnEnvelope)
    XCTAssertEqual(error(Array(envelope.prefix(44))), .truncated)
    XCTAssertEqual(error(Array(envelope.prefix(4))), .notAnEnvelope)
    var future = envelope
    future[3] = 2
    XCTAssertEqual(error(future), .unsupportedFormat(2))
    var suite = envelope
    suite[4] = 9
    XCTAssertEqual(error(suite), .unsupportedSuite(9))
    var version = envelope
    version[16] = 99
    XCTAssertEqual(error(version), .unknownKeyVersion(99))
    for index in 17..<envelope.count {
      var flipped = envelope
      flipped[index] ^= 0x40
      XCTAssertEqual(error(flipped), .authenticationFailed, "byte \(index)")
    }
  }

  func testEnvelopeFromAnotherVaultIsWrongKeyring() throws {
    let other = try Vault.create(
      home: temporary.sub("other"), store: StoreDescriptor(kind: .memory), resolver: .fixed(InMemoryKeyStore()))
    let envelope = try other.seal(Array("theirs".utf8), context: context)
    XCTAssertThrowsError(try vault.open(envelope, context: context)) {
      XCTAssertEqual($0 as? EnvelopeError, .wrongKeyring(found: other.keyringID, expected: vault.keyringID))
    }
  }

  /// The version field is authenticated: relabelling a v1 record as v2 fails, it is not re-keyed.
  func testHeaderBytesAreAuthenticated() throws {
    let envelope = try vault.seal(Array("secret".utf8), context: context)
    _ = try vault.rotate()
    var relabelled = envelope
    relabelled[16] = 2
    XCTAssertThrowsError(try vault.open(relabelled, context: context)) {
      XCTAssertEqual($0 as? EnvelopeError, .authenticationFailed)
    }
    XCTAssertEqual(try vault.open(envelope, context: context), Array("secret".utf8))
  }

  func testErrorTextsNeverContainThePlaintext() throws {
    let secret = "4111 1111 1111 1111"
    let envelope = try vault.seal(Array(secret.utf8), context: context)
    var broken = envelope
    broken[30] ^= 1
    do {
      _ = try vault.open(broken, context: context)
      XCTFail("expected failure")
    } catch {
      XCTAssertFalse(String(describing: error).contains("4111"))
    }
  }

  func testSealAndOpenFromManyThreadsAtOnce() throws {
    let vault = self.vault!
    let failures = Counter()
    DispatchQueue.concurrentPerform(iterations: 8) { worker in
      for i in 0..<300 {
        let plaintext = Array("worker \(worker) record \(i)".utf8)
        let context = Array("ctx \(worker) \(i)".utf8)
        guard let envelope = try? vault.seal(plaintext, context: context),
          (try? vault.open(envelope, context: context)) == plaintext
        else {
          failures.add()
          continue
        }
      }
    }
    XCTAssertEqual(failures.value, 0)
  }
}

final class Counter: @unchecked Sendable {
  private let lock = NSLock()
  private var count = 0
  func add() { lock.withLock { count += 1 } }
  var value: Int { lock.withLock { count } }
}
