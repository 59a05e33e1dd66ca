import Foundation
import VaultCrypto
import VaultTestSupport
import XCTest

@testable import VaultKeys

final class KeyfileStoreTests: XCTestCase {
  var temporary: TemporaryDirectory!
  var keyring: KeyringID!

  override func setUpWithError() throws {
    temporary = TemporaryDirectory()
    keyring = try KeyringID.random()
  }

  override func tearDown() { temporary = nil }

  private func makeStore() -> KeyfileStore { KeyfileStore(path: temporary.sub("keys/vault.keys")) }

  func testStoreThenLoadRoundTripsEveryVersion() throws {
    let store = makeStore()
    let one = try SymmetricKey.generate()
    let two = try SymmetricKey.generate()
    try store.storeKey(one, keyring: keyring, version: 1)
    try store.storeKey(two, keyring: keyring, version: 2)
    XCTAssertEqual(try store.loadKey(keyring: keyring, version: 1), one)
    XCTAssertEqual(try store.loadKey(keyring: keyring, version: 2), two)
    XCTAssertNil(try store.loadKey(keyring: keyring, version: 3))
    XCTAssertEqual(try store.storedVersions(keyring: keyring), [1, 2])
    // A fresh instance reads the same file.
    XCTAssertEqual(try KeyfileStore(path: store.path).loadKey(keyring: keyring, version: 2), two)
  }

  func testFileIs0600InA0700Directory() throws {
    let store = makeStore()
    try store.storeKey(try .generate(), keyring: keyring, version: 1)
    XCTAssertEqual(try mode(store.path), 0o600)
    XCTAssertEqual(try mode(temporary.sub("keys")), 0o700)
    let leftovers = try FileManager.default.contentsOfDirectory(atPath: temporary.sub("keys"))
    XCTAssertEqual(leftovers, ["vault.keys"], "no temporary files are left behind")
  }

  func testRefusesToOverwriteAnExistingVersion() throws {
    let store = makeStore()
    let original = try SymmetricKey.generate()
    try store.storeKey(original, keyring: keyring, version: 1)
    XCTAssertThrowsError(try store.storeKey(try .generate(), keyring: keyring, version: 1)) {
      XCTAssertEqual($0 as? KeyStoreError, .keyExists(version: 1))
    }
    XCTAssertEqual(try store.loadKey(keyring: keyring, version: 1), original)
  }

  /// Storing the key a version already holds (a retried call) succeeds without rewriting the file.
  func testStoringTheKeyAVersionHoldsAgainLeavesTheFileAlone() throws {
    let store = makeStore()
    let key = try SymmetricKey.generate()
    try store.storeKey(key, keyring: keyring, version: 1)
    var before = stat()
    XCTAssertEqual(stat(store.path, &before), 0)
    try store.storeKey(key, keyring: keyring, version: 1)
    var after = stat()
    XCTAssertEqual(stat(store.path, &after), 0)
    XCTAssertEqual(after.st_ino, before.st_ino, "the file was not replaced")
    XCTAssertEqual(try store.loadKey(keyring: keyring, version: 1), key)
  }

  func testDeleteRemovesOnlyThatVersion() throws {
    let store = makeStore()
    let keep = try SymmetricKey.generate()
    try store.storeKey(try .generate(), keyring: keyring, version: 1)
    try store.storeKey(keep, keyring: keyring, version: 2)
    XCTAssertTrue(try store.deleteKey(keyring: keyring, version: 1))
    XCTAssertFalse(try store.deleteKey(keyring: keyring, version: 1))
    XCTAssertNil(try store.loadKey(keyring: keyring, version: 1))
    XCTAssertEqual(try store.loadKey(keyring: keyring, version: 2), keep)
  }

  func testRefusesAFileReadableByOthersAndSaysHowToFixIt() throws {
    let store = makeStore()
    try store.storeKey(try .generate(), keyring: keyring, version: 1)
    chmod(store.path, 0o644)
    XCTAssertThrowsError(try store.loadKey(keyring: keyring, version: 1)) { error in
      XCTAssertEqual(
        error as? KeyStoreError, .insecurePermissions(path: store.path, mode: 0o100644, isDirectory: false))
      let text = String(describing: error)
      XCTAssertTrue(text.contains("0644"), text)
      XCTAssertTrue(text.contains("chmod 600 \(store.path)"), text)
    }
    // Refusing must not change the file: fixing the mode makes the key readable again.
    chmod(store.path, 0o600)
    XCTAssertNotNil(try store.loadKey(keyring: keyring, version: 1))
  }

  func testRefusesAGroupWritableFile() throws {
    let store = makeStore()
    try store.storeKey(try .generate(), keyring: keyring, version: 1)
    chmod(store.path, 0o620)
    XCTAssertThrowsError(try store.loadKey(keyring: keyring, version: 1)) {
      guard case .insecurePermissions(_, _, false)? = $0 as? KeyStoreError else { return XCTFail("\($0)") }
    }
  }

  func testRefusesADirectoryOpenToOthers() throws {
    let store = makeStore()
    try store.storeKey(try .generate(), keyring: keyring, version: 1)
    chmod(temporary.sub("keys"), 0o755)
    XCTAssertThrowsError(try store.loadKey(keyring: keyring, version: 1)) { error in
      XCTAssertEqual(
        error as? KeyStoreError, .insecurePermissions(path: temporary.sub("keys"), mode: 0o40755, isDirectory: true))
      XCTAssertTrue(String(describing: error).contains("chmod 700"))
    }
  }

  /// A keyfile named without `.keys` (`keys`, as an operator may call it) alone in a directory
  /// open to others: the directory holds only that keyfile, so the advice is to chmod it (it was
  /// said to hold "other files than keyfiles": an outside review).
  func testADirectoryHoldingOnlyAKeyfileOfAnotherNameIsToldToChmod() throws {
    let store = KeyfileStore(path: temporary.sub("keys/keys"))
    try store.storeKey(try .generate(), keyring: keyring, version: 1)
    chmod(temporary.sub("keys"), 0o755)
    XCTAssertThrowsError(try store.loadKey(keyring: keyring, version: 1)) { error in
      XCTAssertEqual(
        error as? KeyStoreError, .insecurePermissions(path: temporary.sub("keys"), mode: 0o40755, isDirectory: true))
      XCTAssertTrue(String(describing: error).contains("chmod 700"), "\(error)")
    }
  }

  /// A directory open to others that holds other files than keyfiles (/etc, /home as root) is
  /// refused without the advice to chmod it, which would lock others out of what else it holds
  /// (an operator review was told "run: chmod 700 /etc").
  func testADirectoryUsedForOtherFilesIsNeverToldToChangeItsMode() throws {
    let store = makeStore()
    try store.storeKey(try .generate(), keyring: keyring, version: 1)
    XCTAssertTrue(FileManager.default.createFile(atPath: temporary.sub("keys/notes.txt"), contents: Data()))
    chmod(temporary.sub("keys"), 0o755)
    XCTAssertThrowsError(try store.loadKey(keyring: keyring, version: 1)) { error in
      XCTAssertEqual(
        error as? KeyStoreError,
        .unsafeKeyfileDirectory(path: temporary.sub("keys"), mode: 0o40755, owner: geteuid(), expected: geteuid()))
      let text = String(describing: error)
      XCTAssertFalse(text.contains("chmod"), text)
      XCTAssertTrue(text.contains("holds other files than keyfiles"), text)
      XCTAssertTrue(text.contains("keep the keyfile in a private directory of your own"), text)
    }
  }

  func testRefusesAFileOwnedByAnotherUser() throws {
    try XCTSkipUnless(geteuid() == 0, "changing a file's owner needs root (CI runs as root)")
    let store = makeStore()
    try store.storeKey(try .generate(), keyring: keyring, version: 1)
    XCTAssertEqual(chown(store.path, 4242, 4242), 0)
    XCTAssertThrowsError(try store.loadKey(keyring: keyring, version: 1)) { error in
      XCTAssertEqual(error as? KeyStoreError, .wrongOwner(path: store.path, owner: 4242, expected: 0))
      // Root is told to run as the owner, never to take the user's file (PermissionHintTests).
      XCTAssertTrue(String(describing: error).contains("run as uid 4242"))
    }
  }

  func testRefusesASymlinkedKeyfile() throws {
    let store = makeStore()
    try store.storeKey(try .generate(), keyring: keyring, version: 1)
    let link = temporary.sub("keys/link.keys")
    XCTAssertEqual(symlink(store.path, link), 0)
    XCTAssertThrowsError(try KeyfileStore(path: link).loadKey(keyring: keyring, version: 1)) {
      XCTAssertEqual($0 as? KeyStoreError, .notARegularFile(path: link))
    }
  }

  func testCorruptFileIsReportedNeverReplaced() throws {
    let store = makeStore()
    try store.storeKey(try .generate(), keyring: keyring, version: 1)
    var bytes = try Data(contentsOf: URL(fileURLWithPath: store.path))
    bytes[20] ^= 0x01
    try bytes.write(to: URL(fileURLWithPath: store.path))
    chmod(store.path, 0o600)
    XCTAssertThrowsError(try store.loadKey(keyring: keyring, version: 1)) {
      XCTAssertEqual($0 as? KeyStoreError, .corruptKeyfile(path: store.path, reason: "checksum mismatch"))
    }
    XCTAssertThrowsError(try store.storeKey(try .generate(), keyring: keyring, version: 2))
    XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: store.path)), bytes, "a corrupt file is left as found")
  }

  func testTruncatedAndForeignFilesAreDistinctErrors() throws {
    let store = makeStore()
    try store.storeKey(try .generate(), keyring: keyring, version: 1)
    let other = try KeyringID.random()
    XCTAssertThrowsError(try store.loadKey(keyring: other, version: 1)) {
      XCTAssertEqual($0 as? KeyStoreError, .foreignKeyfile(path: store.path, found: keyring, expected: other))
    }
    try Data("VKF".utf8).write(to: URL(fileURLWithPath: store.path))
    XCTAssertThrowsError(try store.loadKey(keyring: keyring, version: 1)) {
      XCTAssertEqual($0 as? KeyStoreError, .corruptKeyfile(path: store.path, reason: "too short"))
    }
  }

  func testMissingFileMeansNoKeys() throws {
    XCTAssertNil(try makeStore().loadKey(keyring: keyring, version: 1))
    XCTAssertEqual(try makeStore().storedVersions(keyring: keyring), [])
  }

  func testErrorsNeverContainKeyBytes() throws {
    let store = makeStore()
    let key = try SymmetricKey.generate()
    try store.storeKey(key, keyring: keyring, version: 1)
    chmod(store.path, 0o644)
    do {
      _ = try store.loadKey(keyring: keyring, version: 1)
      XCTFail("expected a refusal")
    } catch {
      let text = String(describing: error)
      let keyHex = key.withUnsafeBytes { $0.map { String(format: "%02x", $0) }.joined() }
      XCTAssertFalse(text.contains(keyHex))
    }
  }

  private func mode(_ path: String) throws -> UInt32 {
    var info = stat()
    XCTAssertEqual(stat(path, &info), 0)
    return UInt32(info.st_mode) & 0o7777
  }
}
