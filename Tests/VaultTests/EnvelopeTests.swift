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
      XCTAssertEqual(envelope.count, size + 89)
      XCTAssertEqual(try vault.open(envelope, context: context), plaintext, "size \(size)")
    }
  }

  func testANewVaultSealsFormatTwo() throws {
    let envelope = try vault.seal(Array("x".utf8), context: context)
    XCTAssertEqual(Array(envelope[0..<3]), Array("VLT".utf8))
    XCTAssertEqual(envelope[3], 2, "format")
    XCTAssertEqual(envelope[4], 2, "suite")
    XCTAssertEqual(Array(envelope[5..<13]), vault.keyringID.bytes)
    XCTAssertEqual(Array(envelope[13..<17]), [0, 0, 0, 1], "version 1, big-endian")
    XCTAssertEqual(
      try Envelope.header(of: envelope), .init(format: 2, suite: 2, keyring: vault.keyringID, version: 1))
    XCTAssertEqual(vault.manifest.record(1)?.suite, 2)
    XCTAssertEqual(
      try ManifestFile.read(home: vault.home).manifest.format, 3, "a suite-2 version makes the manifest format 3")
  }

  func testEverySealDrawsAFreshRandomValue() throws {
    let plaintext = Array("same text".utf8)
    var randoms = Set<[UInt8]>()
    var commitments = Set<[UInt8]>()
    for _ in 0..<200 {
      let envelope = try vault.seal(plaintext, context: context)
      randoms.insert(Array(envelope[17..<41]))
      commitments.insert(Array(envelope[41..<73]))
    }
    XCTAssertEqual(randoms.count, 200)
    XCTAssertEqual(commitments.count, 200, "the commitment binds each record's own nonce")
  }

  func testContextBindsTheRecordToItsPlace() throws {
    let envelope = try vault.seal(Array("secret".utf8), context: context)
    for other in [Array("queue:outbox|id:7d3e".utf8), [], context + [0], Array(context.dropLast())] {
      XCTAssertThrowsError(try vault.open(envelope, context: other)) {
        XCTAssertEqual($0 as? EnvelopeError, .keyCommitmentMismatch)
      }
    }
    // The same bytes in another domain are another context.
    let queueShaped = EnvelopeContext.queue(containerID: "0123456789abcdef", queue: "outbox", id: "7d3f")
    XCTAssertThrowsError(try vault.open(envelope, context: queueShaped))
    XCTAssertThrowsError(try vault.seal(Array("x".utf8), context: [])) {
      XCTAssertEqual($0 as? EnvelopeError, .emptyContext)
    }
  }

  /// Contexts are tuples: moving bytes between parts, or between the domain and a part, changes
  /// the encoding, so no two different contexts encode alike.
  func testContextEncodingIsInjective() throws {
    let contexts: [EnvelopeContext] = [
      .queue(containerID: "ab", queue: "c", id: "d"), .queue(containerID: "a", queue: "bc", id: "d"),
      .queue(containerID: "a", queue: "b", id: "cd"), .app(Array("abcd".utf8)), .app(Array("a\u{0}bcd".utf8)),
      EnvelopeContext(domain: "app", parts: [Array("ab".utf8), Array("cd".utf8)], format1Bytes: []),
      EnvelopeContext(domain: "ap", parts: [Array("pab".utf8)], format1Bytes: []),
    ]
    XCTAssertEqual(Set(contexts.map(\.encoded)).count, contexts.count)
    XCTAssertEqual(
      EnvelopeContext.app(Array("hi".utf8)).encoded, [3] + Array("app".utf8) + [0, 0, 0, 2] + Array("hi".utf8))
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
    XCTAssertEqual(error(Array(envelope.prefix(88))), .truncated(format: 2))
    XCTAssertEqual(error(Array(envelope.prefix(4))), .notAnEnvelope)
    var future = envelope
    future[3] = 3
    XCTAssertEqual(error(future), .unsupportedFormat(3))
    var downgraded = envelope
    downgraded[3] = 1
    XCTAssertEqual(error(downgraded), .unsupportedSuite(2), "format 1 has only suite 1")
    var suite = envelope
    suite[4] = 1
    XCTAssertEqual(error(suite), .unsupportedSuite(1), "format 2 has only suite 2")
    var version = envelope
    version[16] = 99
    XCTAssertEqual(error(version), .unknownKeyVersion(99))
  }

  /// Every single-bit change and every truncation is refused; a change to R or the commitment is
  /// caught by the commitment before anything is decrypted, one in the body by the tag.
  func testEveryFlippedBitAndEveryTruncationIsRefused() throws {
    let envelope = try vault.seal(Array("a secret record".utf8), context: context)
    for index in 0..<envelope.count {
      for bit in 0..<8 {
        var flipped = envelope
        flipped[index] ^= 1 << bit
        do {
          _ = try vault.open(flipped, context: context)
          XCTFail("byte \(index) bit \(bit) opened")
        } catch let error as EnvelopeError {
          switch index {
          case 17..<73: XCTAssertEqual(error, .keyCommitmentMismatch, "byte \(index)")
          case 73...: XCTAssertEqual(error, .authenticationFailed, "byte \(index)")
          default: break  // header fields: each has its own error (see above)
          }
        }
      }
    }
    for length in 0..<envelope.count {
      XCTAssertThrowsError(try vault.open(Array(envelope.prefix(length)), context: context), "length \(length)") {
        XCTAssertNotNil($0 as? EnvelopeError)
      }
    }
    XCTAssertThrowsError(try vault.open(envelope + [0], context: context))
  }

  /// Random mutations (bytes replaced, inserted or removed, runs spliced in from another envelope
  /// of the same vault, headers grafted onto other bodies): never a crash, and never anything
  /// opened but the unchanged envelope.
  func testRandomMutationsNeverOpen() throws {
    let plaintext = Array("a record worth forging".utf8)
    let envelope = try vault.seal(plaintext, context: context)
    let other = try vault.seal(Array("another record entirely".utf8), context: context)
    var generator = SystemRandomNumberGenerator()
    var opened = 0
    for _ in 0..<20_000 {
      var mutated = envelope
      for _ in 0..<Int.random(in: 1...4, using: &generator) {
        let index = Int.random(in: 0..<max(mutated.count, 1), using: &generator)
        switch Int.random(in: 0..<5, using: &generator) {
        case 0 where !mutated.isEmpty: mutated[index] = UInt8.random(in: 0...255, using: &generator)
        case 1: mutated.insert(UInt8.random(in: 0...255, using: &generator), at: min(index, mutated.count))
        case 2 where !mutated.isEmpty: mutated.remove(at: index)
        case 3:
          let start = Int.random(in: 0..<other.count, using: &generator)
          let end = min(other.count, start + Int.random(in: 1...40, using: &generator))
          let at = min(index, mutated.count)
          mutated.replaceSubrange(at..<min(mutated.count, at + (end - start)), with: other[start..<end])
        default: mutated = Array(mutated.prefix(index))
        }
      }
      do {
        let result = try vault.open(mutated, context: context)
        XCTAssertEqual(result, plaintext)
        XCTAssertEqual(mutated, envelope, "only the unchanged envelope opens")
        opened += 1
      } catch is EnvelopeError {
      }
    }
    XCTAssertLessThan(opened, 20_000)
  }

  /// An envelope sealed under another key that claims this vault's keyring and version is a
  /// commitment mismatch, found before decrypting.
  func testAnotherKeyUnderTheSameVersionIsACommitmentMismatch() throws {
    let impostor = try VersionKey(SymmetricKey.generate(), suite: 2)
    let forged = try Array("x".utf8).withUnsafeBytes { plaintext in
      try SecureRandom.bytes(24).withUnsafeBytes { random in
        try Envelope.sealFormat2(
          plaintext, key: impostor, keyring: vault.keyringID, version: 1, random: random, context: .app(context))
      }
    }
    XCTAssertThrowsError(try vault.open(forged, context: context)) {
      XCTAssertEqual($0 as? EnvelopeError, .keyCommitmentMismatch)
    }
  }

  /// A version's key is used with its own suite only: a format-1 envelope made with the key of a
  /// suite-2 version is refused before any decryption.
  func testAnEnvelopeOfAnotherSuiteThanItsVersionIsRefused() throws {
    let material = try XCTUnwrap(try store.loadKey(keyring: vault.keyringID, version: 1))
    let asSuiteOne = try VersionKey(material, suite: 1)
    let sealed = try Array("x".utf8).withUnsafeBytes { plaintext in
      try context.withUnsafeBytes {
        try Envelope.sealFormat1(plaintext, key: asSuiteOne, keyring: vault.keyringID, version: 1, context: $0)
      }
    }
    XCTAssertThrowsError(try vault.open(sealed, context: context)) {
      XCTAssertEqual($0 as? EnvelopeError, .suiteMismatch(version: 1, envelope: 1, key: 2))
    }
  }

  /// A repeated R (a cloned random state) under a different context gives an unrelated nonce and
  /// key: the two ciphertexts do not XOR to the XOR of the plaintexts.
  func testARepeatedRandomValueWithAnotherContextSharesNothing() throws {
    let key = try vault.key(for: 1)
    let random = [UInt8](repeating: 0x5A, count: 24)
    let plaintext = [UInt8](repeating: 0, count: 64)
    func seal(_ context: String) throws -> [UInt8] {
      try plaintext.withUnsafeBytes { p in
        try random.withUnsafeBytes {
          try Envelope.sealFormat2(
            p, key: key, keyring: vault.keyringID, version: 1, random: $0, context: .app(Array(context.utf8)))
        }
      }
    }
    let a = try seal("record a")
    let b = try seal("record b")
    XCTAssertEqual(a[17..<41], b[17..<41])
    XCTAssertNotEqual(a[73..<137], b[73..<137], "same keystream under a repeated R")
    XCTAssertEqual(try seal("record a")[73...], a[73...], "same R and same context: the same record, deterministically")
  }

  func testEnvelopeFromAnotherVaultIsWrongKeyring() throws {
    let other = try Vault.create(
      home: temporary.sub("other"), store: StoreDescriptor(kind: .memory), resolver: .fixed(InMemoryKeyStore()))
    let envelope = try other.seal(Array("theirs".utf8), context: context)
    XCTAssertThrowsError(try vault.open(envelope, context: context)) {
      XCTAssertEqual($0 as? EnvelopeError, .wrongKeyring(found: other.keyringID, expected: vault.keyringID))
    }
  }

  /// The version field is bound: relabelling a v1 record as v2 fails (the commitment names v1's
  /// key), it is not re-keyed.
  func testHeaderBytesAreAuthenticated() throws {
    let envelope = try vault.seal(Array("secret".utf8), context: context)
    _ = try vault.rotate()
    var relabelled = envelope
    relabelled[16] = 2
    XCTAssertThrowsError(try vault.open(relabelled, context: context)) {
      XCTAssertEqual($0 as? EnvelopeError, .keyCommitmentMismatch)
    }
    XCTAssertEqual(try vault.open(envelope, context: context), Array("secret".utf8))
  }

  func testErrorTextsNeverContainThePlaintext() throws {
    let secret = "4111 1111 1111 1111"
    let envelope = try vault.seal(Array(secret.utf8), context: context)
    var broken = envelope
    broken[80] ^= 1
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
