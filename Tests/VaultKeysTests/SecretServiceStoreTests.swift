import Foundation
import VaultCrypto
import VaultTestSupport
import XCTest

@testable import VaultKeys

/// Runs against the real Secret Service that `tools/with-secret-service.sh` starts (gnome-keyring
/// on a private D-Bus). Skipped only when that harness is absent, never in the test command.
final class SecretServiceStoreTests: XCTestCase {
  override func setUpWithError() throws {
    try XCTSkipUnless(TestKeyring.isAvailable, "no private Secret Service; run the tests via tools/test.sh")
  }

  func testProbeFindsTheUnlockedService() {
    XCTAssertEqual(SecretServiceStore(timeout: 5).probe(), .available)
  }

  func testStoreLoadListDeleteAgainstGnomeKeyring() throws {
    let store = SecretServiceStore(timeout: 5, home: "/tmp/secret-service-test")
    let keyring = try KeyringID.random()
    let one = try SymmetricKey.generate()
    let two = try SymmetricKey.generate()
    XCTAssertNil(try store.loadKey(keyring: keyring, version: 1))
    try store.storeKey(one, keyring: keyring, version: 1)
    try store.storeKey(two, keyring: keyring, version: 2)
    XCTAssertEqual(try store.loadKey(keyring: keyring, version: 1), one)
    XCTAssertEqual(try store.loadKey(keyring: keyring, version: 2), two)
    XCTAssertEqual(try store.storedVersions(keyring: keyring), [1, 2])
    XCTAssertEqual(try store.keyringIDs(forHome: "/tmp/secret-service-test"), [keyring.hex])
    XCTAssertThrowsError(try store.storeKey(try .generate(), keyring: keyring, version: 1)) {
      XCTAssertEqual($0 as? KeyStoreError, .keyExists(version: 1))
    }
    XCTAssertEqual(try store.loadKey(keyring: keyring, version: 1), one, "refused overwrite left the key as it was")
    XCTAssertTrue(try store.deleteKey(keyring: keyring, version: 1))
    XCTAssertNil(try store.loadKey(keyring: keyring, version: 1))
    XCTAssertEqual(try store.storedVersions(keyring: keyring), [2])
    XCTAssertTrue(try store.deleteKey(keyring: keyring, version: 2))
  }

  /// A long-lived app reads the store on every `Vault.open` and after every rotation: each call's
  /// D-Bus proxies must be freed, not left as clean-up queued in a main context nobody runs (the
  /// app's default one), which leaked about 3 KB a `Vault.open` for as long as the process lived.
  func testCallsLeaveNoWorkInTheDefaultMainContext() throws {
    let store = SecretServiceStore(timeout: 5)
    let keyring = try KeyringID.random()
    try store.storeKey(try .generate(), keyring: keyring, version: 1)
    for _ in 0..<3 { XCTAssertNotNil(try store.loadKey(keyring: keyring, version: 1)) }
    XCTAssertEqual(try store.storedVersions(keyring: keyring), [1])
    XCTAssertTrue(try store.deleteKey(keyring: keyring, version: 1))
    XCTAssertFalse(SecretServiceStore.defaultMainContextHasPendingWork)
  }

  /// What `withDeadline`'s retry does after a daemon stored the key and died before answering:
  /// store the same key again. That succeeds and adds no item; another key, or the same key
  /// beside another program's item at that version, is still refused and replaces nothing.
  func testStoringTheKeyAVersionHoldsAgainAddsNothingAndAnotherKeyIsRefused() throws {
    let home = "/tmp/secret-service-test-idempotent"
    let store = SecretServiceStore(timeout: 5, home: home)
    let keyring = try KeyringID.random()
    let items = ["xdg:schema", "org.vault.Key", "vault-id", keyring.hex, "version", "1"]
    addTeardownBlock { try? SecretTool.clear(items) }
    let key = try SymmetricKey.generate()
    try store.storeKey(key, keyring: keyring, version: 1)
    try store.storeKey(key, keyring: keyring, version: 1)
    XCTAssertEqual(try SecretTool.count(items), 1, "the second store added no item")
    XCTAssertEqual(try store.loadKey(keyring: keyring, version: 1), key)

    XCTAssertThrowsError(try store.storeKey(try .generate(), keyring: keyring, version: 1)) {
      XCTAssertEqual($0 as? KeyStoreError, .keyExists(version: 1))
    }
    try SecretTool.store(secret: String(repeating: "s", count: 32), items + ["home", home + "-elsewhere"])
    XCTAssertThrowsError(try store.storeKey(key, keyring: keyring, version: 1), "not every item holds this key") {
      XCTAssertEqual($0 as? KeyStoreError, .keyExists(version: 1))
    }
    XCTAssertEqual(try SecretTool.count(items), 2)
    XCTAssertEqual(try store.loadKeyCandidates(keyring: keyring, version: 1).count, 2, "nothing replaced")
  }

  func testKeysOfDifferentVaultsDoNotMix() throws {
    let store = SecretServiceStore(timeout: 5)
    let a = try KeyringID.random()
    let b = try KeyringID.random()
    let keyA = try SymmetricKey.generate()
    try store.storeKey(keyA, keyring: a, version: 1)
    XCTAssertNil(try store.loadKey(keyring: b, version: 1))
    XCTAssertEqual(try store.loadKey(keyring: a, version: 1), keyA)
    _ = try store.deleteKey(keyring: a, version: 1)
  }

  /// A locked collection must read as `.locked`, never as "no key" (which could lead a caller to
  /// generate a new key over the real one). Unlocking needs the password, so the daemon is
  /// replaced with the same password afterwards, as a user logging in would.
  func testLockedCollectionIsLockedNotAbsent() throws {
    let store = SecretServiceStore(timeout: 5)
    let keyring = try KeyringID.random()
    let key = try SymmetricKey.generate()
    try store.storeKey(key, keyring: keyring, version: 1)
    try TestKeyring.lock()
    defer { XCTAssertNoThrow(try TestKeyring.unlock()) }

    XCTAssertThrowsError(try store.loadKey(keyring: keyring, version: 1)) {
      XCTAssertEqual($0 as? KeyStoreError, .locked)
    }
    XCTAssertThrowsError(try store.storeKey(try .generate(), keyring: keyring, version: 2)) {
      XCTAssertEqual($0 as? KeyStoreError, .locked)
    }
    XCTAssertEqual(store.probe(), .unavailable(.locked))
    try TestKeyring.unlock()
    XCTAssertEqual(try store.loadKey(keyring: keyring, version: 1), key, "the key survived the lock")
    XCTAssertNil(try store.loadKey(keyring: keyring, version: 2), "nothing was stored while locked")
    _ = try store.deleteKey(keyring: keyring, version: 1)
  }
}
