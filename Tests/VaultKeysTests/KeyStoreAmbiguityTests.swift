import Foundation
import VaultCrypto
import VaultTestSupport
import XCTest

@testable import VaultKeys

/// Issue 8, item 18: key stores refuse ambiguity instead of picking an answer.
final class KeyStoreAmbiguityTests: XCTestCase {
  var temporary: TemporaryDirectory!
  var keyring: KeyringID!

  override func setUpWithError() throws {
    temporary = TemporaryDirectory()
    keyring = try KeyringID.random()
  }

  override func tearDownWithError() throws {
    if TestKeyring.isAvailable, let keyring {
      try SecretTool.clear(["xdg:schema", "org.vault.Key", "vault-id", keyring.hex])
    }
    temporary = nil
  }

  // MARK: - Secret Service

  /// Two items for one version (made by hand, or by a provider that ignored "replace"): vault
  /// cannot tell which key sealed the data, so it refuses rather than take the first.
  func testSecretServiceRefusesTwoItemsForOneVersion() throws {
    try XCTSkipUnless(TestKeyring.isAvailable, "no private Secret Service; run the tests via tools/test.sh")
    let store = SecretServiceStore(timeout: 5, home: "/tmp/ambiguity-a")
    try store.storeKey(try .generate(), keyring: keyring, version: 1)
    // Same vault and version, another home: secret_service_store's "replace" does not match it.
    try SecretTool.store(
      secret: String(repeating: "k", count: 32),
      ["xdg:schema", "org.vault.Key", "vault-id", keyring.hex, "version", "1", "home", "/tmp/ambiguity-b"])
    XCTAssertThrowsError(try store.loadKey(keyring: keyring, version: 1)) { error in
      XCTAssertEqual(error as? KeyStoreError, .ambiguousKey(version: 1, count: 2))
      XCTAssertTrue(String(describing: error).contains("2 items"), "\(error)")
    }
    XCTAssertEqual(try store.storedVersions(keyring: keyring), [1], "listed once")
  }

  /// Two items with different keys for one version: each is a candidate, and the one whose
  /// key-check value the manifest recorded is read; without a recorded value, or with one that
  /// neither matches, they stay ambiguous.
  func testSecretServicePicksAmongDifferentKeysByTheRecordedCheckValue() throws {
    try XCTSkipUnless(TestKeyring.isAvailable, "no private Secret Service; run the tests via tools/test.sh")
    let store = SecretServiceStore(timeout: 5, home: "/tmp/ambiguity-a")
    let key = try SymmetricKey.generate()
    try store.storeKey(key, keyring: keyring, version: 1)
    try SecretTool.store(
      secret: String(repeating: "k", count: 32),
      ["xdg:schema", "org.vault.Key", "vault-id", keyring.hex, "version", "1", "home", "/tmp/ambiguity-b"])
    let stray = try Array(repeating: UInt8(ascii: "k"), count: 32).withUnsafeBytes { try SymmetricKey(copying: $0) }

    let candidates = try store.loadKeyCandidates(keyring: keyring, version: 1)
    XCTAssertEqual(candidates.count, 2)
    XCTAssertTrue(candidates.contains(key) && candidates.contains(stray))
    let recorded = try KeyVersionRecord.checkValue(of: key)
    XCTAssertEqual(try store.loadKey(keyring: keyring, version: 1, check: recorded), key)
    XCTAssertEqual(
      try store.loadKey(keyring: keyring, version: 1, check: try KeyVersionRecord.checkValue(of: stray)), stray,
      "whichever the manifest recorded")
    for check in [nil, try KeyVersionRecord.checkValue(of: try .generate())] {
      XCTAssertThrowsError(try store.loadKey(keyring: keyring, version: 1, check: check)) {
        XCTAssertEqual($0 as? KeyStoreError, .ambiguousKey(version: 1, count: 2))
      }
    }
    XCTAssertEqual(try store.loadKeyCandidates(keyring: keyring, version: 2), [])
    XCTAssertNil(try store.loadKey(keyring: keyring, version: 2, check: recorded))
  }

  /// A keyfile holds one key per version: its only candidate is that key.
  func testAKeyfileHasOneCandidatePerVersion() throws {
    let store = KeyfileStore(path: temporary.sub("keys/v.keys"))
    let key = try SymmetricKey.generate()
    try store.storeKey(key, keyring: keyring, version: 1)
    XCTAssertEqual(try store.loadKeyCandidates(keyring: keyring, version: 1), [key])
    XCTAssertEqual(try store.loadKeyCandidates(keyring: keyring, version: 2), [])
    XCTAssertEqual(
      try store.loadKey(keyring: keyring, version: 1, check: "not the check"), key, "compared by the caller")
  }

  /// A byte-for-byte copy of vault's item (copied into another collection, or stored again by
  /// hand) holds the same key: it is read, not refused as ambiguous (the advice to remove the item
  /// vault did not make cannot be followed when both match in every attribute).
  func testSecretServiceReadsCopiesOfOneKey() throws {
    try XCTSkipUnless(TestKeyring.isAvailable, "no private Secret Service; run the tests via tools/test.sh")
    let store = SecretServiceStore(timeout: 5, home: "/tmp/ambiguity-a")
    let key = try Array("0123456789abcdef0123456789abcdef".utf8).withUnsafeBytes { try SymmetricKey(copying: $0) }
    try store.storeKey(key, keyring: keyring, version: 1)
    try SecretTool.store(
      secret: "0123456789abcdef0123456789abcdef",
      ["xdg:schema", "org.vault.Key", "vault-id", keyring.hex, "version", "1", "home", "/tmp/ambiguity-b"])
    XCTAssertEqual(try store.loadKey(keyring: keyring, version: 1), key)
  }

  func testProbeSaysTheTransferSessionIsEncryptedWithGnomeKeyring() throws {
    try XCTSkipUnless(TestKeyring.isAvailable, "no private Secret Service; run the tests via tools/test.sh")
    let store = SecretServiceStore(timeout: 5)
    XCTAssertEqual(store.probe(), .available)
    XCTAssertEqual(store.transfer, .encrypted)
  }

  func testTransferIsClassifiedFromTheSessionAlgorithm() {
    XCTAssertEqual(SecretTransfer(algorithms: "plain"), .plain)
    XCTAssertEqual(SecretTransfer(algorithms: "dh-ietf1024-sha256-aes128-cbc-pkcs7"), .encrypted)
    XCTAssertNil(SecretTransfer(algorithms: nil))
    XCTAssertTrue(SecretTransfer.plain.warning?.contains("unencrypted") ?? false)
    XCTAssertNil(SecretTransfer.encrypted.warning)
  }

  // MARK: - Keyfile

  /// A FIFO at the keyfile path used to block `open` until a writer came; now it is refused at once.
  func testAFIFOAtTheKeyfilePathIsRefusedNotWaitedOn() throws {
    let directory = temporary.sub("keys")
    XCTAssertEqual(mkdir(directory, 0o700), 0)
    let path = directory + "/v.keys"
    XCTAssertEqual(mkfifo(path, 0o600), 0)
    let store = KeyfileStore(path: path)
    let outcome = Outcome()
    let done = DispatchSemaphore(value: 0)
    let keyring = keyring!
    Thread.detachNewThread {
      do {
        _ = try store.loadKey(keyring: keyring, version: 1)
        outcome.set("returned")
      } catch {
        outcome.set(String(describing: error))
      }
      done.signal()
    }
    if done.wait(timeout: .now() + 5) == .timedOut {
      XCTFail("loading a keyfile that is a FIFO blocked")
      // Release the blocked reader so the thread ends.
      let writer = open(path, O_WRONLY | O_NONBLOCK)
      if writer >= 0 { close(writer) }
      _ = done.wait(timeout: .now() + 5)
      return
    }
    XCTAssertEqual(outcome.value, KeyStoreError.notARegularFile(path: path).description)
  }

  func testAKeyfileListingAVersionTwiceIsRefused() throws {
    let path = temporary.sub("keys/v.keys")
    let first = try SymmetricKey.generate()
    let second = try SymmetricKey.generate()
    for format: UInt8 in [1, 2] {
      var body: [UInt8] = Array("VKF".utf8) + [format] + keyring.bytes + [0, 0, 0, 2]
      if format == 2 { body += [0, 0, 0, 0] }
      body += [0, 0, 0, 1] + first.withUnsafeBytes { Array($0) }
      body += [0, 0, 0, 1] + second.withUnsafeBytes { Array($0) }
      body += try SHA256.hash(body)
      try SecureFile.makeDirectory(temporary.sub("keys"))
      try body.withUnsafeBytes { try SecureFile.atomicWrite(path, bytes: $0) }
      let store = KeyfileStore(path: path)
      XCTAssertThrowsError(try store.loadKey(keyring: keyring, version: 1), "format \(format)") { error in
        XCTAssertEqual(error as? KeyStoreError, .duplicateKeyVersion(path: path, version: 1))
      }
      XCTAssertThrowsError(try store.storedVersions(keyring: keyring))
      XCTAssertThrowsError(try store.storeKey(try .generate(), keyring: keyring, version: 2))
      XCTAssertEqual(Array(try Data(contentsOf: URL(fileURLWithPath: path))), body, "left as found")
    }
  }

  func testAKeyfileInsideTheDataItProtectsIsRefused() throws {
    let home = temporary.sub("home")
    try SecureFile.makeDirectory(home)
    for path in [home + "/v.keys", home + "/keys/v.keys"] {
      let store = KeyfileStore(path: path, protectedData: { .init(home: home) })
      XCTAssertThrowsError(try store.storeKey(try .generate(), keyring: keyring, version: 1)) { error in
        XCTAssertEqual(error as? KeyStoreError, .keyfileInsideData(path: path, dataDirectory: home))
        XCTAssertTrue(String(describing: error).contains("outside"), "\(error)")
      }
      XCTAssertFalse(FileManager.default.fileExists(atPath: path), "nothing was written")
      XCTAssertThrowsError(try store.loadKey(keyring: keyring, version: 1))
    }
    // Beside a container: its directory is copied with it.
    let data = temporary.sub("data")
    try SecureFile.makeDirectory(data)
    let besideContainer = KeyfileStore(
      path: data + "/v.keys", protectedData: { .init(home: home, containers: [data + "/queue.sqlite"]) })
    XCTAssertThrowsError(try besideContainer.loadKey(keyring: keyring, version: 1)) {
      XCTAssertEqual($0 as? KeyStoreError, .keyfileInsideData(path: data + "/v.keys", dataDirectory: data))
    }
    // Beside it is fine: a sibling directory is not inside the home.
    let beside = KeyfileStore(path: temporary.sub("home-keys/v.keys"), protectedData: { .init(home: home) })
    XCTAssertNoThrow(try beside.storeKey(try .generate(), keyring: keyring, version: 1))
  }
}

private final class Outcome: @unchecked Sendable {
  private let lock = NSLock()
  private var text: String?
  func set(_ value: String) { lock.withLock { text = value } }
  var value: String? { lock.withLock { text } }
}
