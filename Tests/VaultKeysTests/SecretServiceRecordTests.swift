import Foundation
import VaultCrypto
import VaultTestSupport
import XCTest

@testable import VaultKeys

/// Named records against the real Secret Service of `tools/with-secret-service.sh`.
final class SecretServiceRecordTests: XCTestCase {
  var keyring: KeyringID!

  override func setUpWithError() throws {
    try XCTSkipUnless(TestKeyring.isAvailable, "no private Secret Service; run the tests via tools/test.sh")
    keyring = try KeyringID.random()
  }

  override func tearDownWithError() throws {
    guard TestKeyring.isAvailable, let keyring else { return }
    try SecretTool.clear(["xdg:schema", "org.vault.Record", "vault-id", keyring.hex])
    try SecretTool.clear(["xdg:schema", "org.vault.Key", "vault-id", keyring.hex])
  }

  private func bytes(_ secure: SecureBytes?) -> [UInt8]? { secure?.withUnsafeBytes { Array($0) } }

  func testRecordRoundTripsAndReplaceLeavesOneItem() throws {
    let store = SecretServiceStore(timeout: 5, home: "/tmp/record-test")
    try store.storeRecord(.manifestMirror, bytes: Array("first".utf8), keyring: keyring)
    XCTAssertEqual(bytes(try store.loadRecord(.manifestMirror, keyring: keyring)), Array("first".utf8))
    try store.storeRecord(.manifestMirror, bytes: Array("second".utf8), keyring: keyring)
    XCTAssertEqual(bytes(try store.loadRecord(.manifestMirror, keyring: keyring)), Array("second".utf8))
    XCTAssertEqual(try SecretTool.count(["xdg:schema", "org.vault.Record", "vault-id", keyring.hex]), 1)
    XCTAssertEqual(
      bytes(try SecretServiceStore(timeout: 5).loadRecord(.manifestMirror, keyring: keyring)), Array("second".utf8))
  }

  func testAbsentRecordIsNilAndRecordsDoNotMix() throws {
    let store = SecretServiceStore(timeout: 5)
    XCTAssertNil(try store.loadRecord(.integrityKey, keyring: keyring))
    try store.storeRecord(.manifestMirror, bytes: [1, 2, 3], keyring: keyring)
    XCTAssertNil(try store.loadRecord(.integrityKey, keyring: keyring), "another record of the same vault")
    XCTAssertNil(try store.loadRecord(.manifestMirror, keyring: try KeyringID.random()), "another vault")
  }

  func testRecordsNeverShowUpAsKeys() throws {
    let store = SecretServiceStore(timeout: 5, home: "/tmp/record-test-keys")
    let key = try SymmetricKey.generate()
    try store.storeKey(key, keyring: keyring, version: 4)
    try store.storeRecord(.integrityKey, bytes: [UInt8](repeating: 0x11, count: 32), keyring: keyring)
    try store.storeRecord(.manifestMirror, bytes: Array("{}".utf8), keyring: keyring)
    XCTAssertEqual(try store.storedVersions(keyring: keyring), [4])
    XCTAssertEqual(try store.loadKey(keyring: keyring, version: 4), key)
    XCTAssertTrue(try store.deleteKey(keyring: keyring, version: 4))
    XCTAssertEqual(try store.storedVersions(keyring: keyring), [])
    XCTAssertEqual(
      bytes(try store.loadRecord(.integrityKey, keyring: keyring)), [UInt8](repeating: 0x11, count: 32),
      "deleting a key leaves the records")
  }

  func testLargestRecordRoundTrips() throws {
    let store = SecretServiceStore(timeout: 10)
    let mirror = (0..<KeyStoreRecord.maximumByteCount).map { UInt8(truncatingIfNeeded: $0 &* 131) }
    try store.storeRecord(.manifestMirror, bytes: mirror, keyring: keyring)
    XCTAssertEqual(bytes(try store.loadRecord(.manifestMirror, keyring: keyring)), mirror)
    let tooBig = [UInt8](repeating: 0, count: KeyStoreRecord.maximumByteCount + 1)
    XCTAssertThrowsError(try store.storeRecord(.manifestMirror, bytes: tooBig, keyring: keyring)) {
      XCTAssertEqual(
        $0 as? KeyStoreError,
        .recordTooLarge(record: "manifest", byteCount: tooBig.count, limit: KeyStoreRecord.maximumByteCount))
    }
    XCTAssertEqual(bytes(try store.loadRecord(.manifestMirror, keyring: keyring)), mirror)
  }

  /// A crash between storing the new item and removing the old one leaves both: the newer
  /// generation wins, and the next store removes the stale one.
  func testStaleOlderItemIsIgnoredThenRemoved() throws {
    try SecretTool.store(
      secret: "stale",
      ["xdg:schema", "org.vault.Record", "vault-id", keyring.hex, "record", "manifest", "generation", "1"])
    let store = SecretServiceStore(timeout: 5)
    XCTAssertEqual(bytes(try store.loadRecord(.manifestMirror, keyring: keyring)), Array("stale".utf8))
    try store.storeRecord(.manifestMirror, bytes: Array("fresh".utf8), keyring: keyring)
    try SecretTool.store(
      secret: "stale again",
      ["xdg:schema", "org.vault.Record", "vault-id", keyring.hex, "record", "manifest", "generation", "1"])
    XCTAssertEqual(bytes(try store.loadRecord(.manifestMirror, keyring: keyring)), Array("fresh".utf8))
    try store.storeRecord(.manifestMirror, bytes: Array("fresher".utf8), keyring: keyring)
    XCTAssertEqual(try SecretTool.count(["xdg:schema", "org.vault.Record", "vault-id", keyring.hex]), 1)
    XCTAssertEqual(bytes(try store.loadRecord(.manifestMirror, keyring: keyring)), Array("fresher".utf8))
  }

  /// An item whose generation is already the largest number trapped every later replace (the
  /// next generation overflowed); it is now a clear error and the item is left as it is.
  func testAGenerationAtTheTopIsAnErrorNotATrap() throws {
    try SecretTool.store(
      secret: "top",
      [
        "xdg:schema", "org.vault.Record", "vault-id", keyring.hex, "record", "manifest", "generation",
        String(UInt64.max),
      ])
    let store = SecretServiceStore(timeout: 5)
    XCTAssertThrowsError(try store.storeRecord(.manifestMirror, bytes: Array("next".utf8), keyring: keyring)) {
      XCTAssertEqual($0 as? KeyStoreError, .corruptRecord(record: "manifest"))
    }
    XCTAssertEqual(bytes(try store.loadRecord(.manifestMirror, keyring: keyring)), Array("top".utf8))
  }

  /// An integrity-key item of another size (another program's bytes) is no key of vault's: a
  /// distinct error naming the record, not a bare length error from the key type.
  func testAnIntegrityKeyOfAnotherSizeIsCorrupt() throws {
    try SecretTool.store(
      secret: String(repeating: "k", count: 31),
      ["xdg:schema", "org.vault.Record", "vault-id", keyring.hex, "record", "integrity-key", "generation", "1"])
    XCTAssertThrowsError(try SecretServiceStore(timeout: 5).loadRecord(.integrityKey, keyring: keyring)) {
      XCTAssertEqual($0 as? KeyStoreError, .corruptRecord(record: "integrity-key"))
    }
  }

  func testTwoEquallyNewItemsAreRefusedNotPicked() throws {
    for (home, secret) in [("/a", "one"), ("/b", "two")] {
      try SecretTool.store(
        secret: secret,
        [
          "xdg:schema", "org.vault.Record", "vault-id", keyring.hex, "record", "manifest", "generation", "3",
          "home", home,
        ])
    }
    XCTAssertThrowsError(try SecretServiceStore(timeout: 5).loadRecord(.manifestMirror, keyring: keyring)) {
      XCTAssertEqual($0 as? KeyStoreError, .ambiguousRecord(record: "manifest", count: 2))
    }
  }

  /// A locked collection must read as `.locked`, never as "no record".
  func testLockedRecordThrowsLockedNeverNil() throws {
    let store = SecretServiceStore(timeout: 5)
    try store.storeRecord(.integrityKey, bytes: [UInt8](repeating: 0x22, count: 32), keyring: keyring)
    try TestKeyring.lock()
    defer { XCTAssertNoThrow(try TestKeyring.unlock()) }
    XCTAssertThrowsError(try store.loadRecord(.integrityKey, keyring: keyring)) {
      XCTAssertEqual($0 as? KeyStoreError, .locked)
    }
    XCTAssertThrowsError(try store.storeRecord(.integrityKey, bytes: [1], keyring: keyring)) {
      XCTAssertEqual($0 as? KeyStoreError, .locked)
    }
    try TestKeyring.unlock()
    XCTAssertEqual(
      bytes(try store.loadRecord(.integrityKey, keyring: keyring)), [UInt8](repeating: 0x22, count: 32),
      "the record survived the lock and was not replaced while locked")
  }
}

/// `secret-tool` (libsecret-tools), to make items vault itself would never make.
enum SecretTool {
  static func store(secret: String, _ attributes: [String]) throws {
    let result = try Spawn.run(
      "/usr/bin/secret-tool", ["store", "--label=vault test item"] + attributes, input: Array(secret.utf8))
    guard result.status == 0 else { throw TestKeyringError.command("secret-tool store", result.error) }
  }

  static func clear(_ attributes: [String]) throws {
    // secret-tool clear removes every matching item, and exits 1 when there was none.
    try Spawn.run("/usr/bin/secret-tool", ["clear"] + attributes)
  }

  /// How many items match (locked ones included).
  static func count(_ attributes: [String]) throws -> Int {
    let result = try Spawn.run("/usr/bin/secret-tool", ["search", "--all"] + attributes)
    return result.outputText.split(separator: "\n").filter { $0.hasPrefix("[/") }.count
      + result.error.split(separator: "\n").filter { $0.hasPrefix("[/") }.count
  }
}
