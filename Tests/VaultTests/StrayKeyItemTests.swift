import Foundation
import VaultCrypto
import VaultKeys
import VaultTestSupport
import XCTest

@testable import Vault

/// Items another program stored in the Secret Service with a vault's attributes and another key,
/// at the moments a rotation is most exposed to them: vault never adopts, seals under or reports
/// as its own a key it did not record, and a stray never stands in for a missing key.
final class StrayKeyItemTests: XCTestCase {
  var temporary: TemporaryDirectory!
  var cleared: [String] = []

  override func setUpWithError() throws {
    try XCTSkipUnless(TestKeyring.isAvailable, "no private Secret Service; run the tests via tools/test.sh")
    temporary = TemporaryDirectory()
  }

  override func tearDown() {
    for id in cleared { _ = try? Spawn.run("/usr/bin/secret-tool", ["clear", "vault-id", id]) }
    temporary = nil
  }

  private func secretServiceVault() throws -> (Vault, KeyStoreResolver) {
    let home = temporary.sub("home")
    let resolver = KeyStoreResolver.fixed(SecretServiceStore(timeout: 10, home: home))
    let vault = try Vault.create(home: home, store: StoreDescriptor(kind: .secretService), resolver: resolver)
    cleared.append(vault.keyringID.hex)
    return (vault, resolver)
  }

  private func plantStray(_ vault: Vault, version: UInt32, byte: Character = "x") throws {
    let stored = try Spawn.run(
      "/usr/bin/secret-tool",
      [
        "store", "--label=vault key \(vault.keyringID.hex) version \(version)", "xdg:schema", "org.vault.Key",
        "vault-id", vault.keyringID.hex, "version", String(version), "home", vault.home + "-elsewhere",
      ],
      input: Array(String(repeating: byte, count: 32).utf8))
    XCTAssertEqual(stored.status, 0, stored.error)
  }

  private func stray(_ byte: Character = "x") throws -> SymmetricKey {
    try Array(String(repeating: byte, count: 32).utf8).withUnsafeBytes { try SymmetricKey(copying: $0) }
  }

  /// A rotation stopped after its key reached the store, a stray then stored at that version: the
  /// next open finishes the rotation with the key it recorded, and seals under that one.
  func testAStoppedRotationFinishesWithItsOwnKeyPastAStrayAtThePendingVersion() throws {
    let (vault, resolver) = try secretServiceVault()
    try vault.withManifestLock { try vault.addPendingVersion() }
    let pending = try XCTUnwrap(vault.manifest.record(2)?.check)
    try plantStray(vault, version: 2)

    let reopened = try Vault.open(home: vault.home, resolver: resolver)
    XCTAssertEqual(reopened.manifest.activeVersion, 2)
    XCTAssertEqual(reopened.manifest.record(2)?.check, pending, "the recorded key, not the stray")
    let envelope = try reopened.seal(Array("after".utf8), context: [1])
    XCTAssertEqual(try Envelope.header(of: envelope).version, 2)
    let store = SecretServiceStore(timeout: 10)
    let sealedWith = try store.loadKey(keyring: vault.keyringID, version: 2, check: pending)
    XCTAssertNotEqual(sealedWith, try stray())
  }

  /// A rotation stopped after recording its pending version and before its key reached the store,
  /// a stray then stored at that version: it is never adopted, and nothing is made active.
  func testAStrayAloneAtThePendingVersionIsNeverAdopted() throws {
    let (vault, _) = try secretServiceVault()
    let failing = InterposedKeyStore(SecretServiceStore(timeout: 10, home: vault.home)) { call in
      if case .storeKey(version: 2) = call { throw KeyStoreError.locked }
      return .forward
    }
    let stopped = try Vault.open(home: vault.home, resolver: .fixed(failing))
    XCTAssertThrowsError(try stopped.withManifestLock { try stopped.addPendingVersion() })
    XCTAssertEqual(stopped.manifest.record(2)?.state, .pending)
    try plantStray(vault, version: 2)

    let resolver = KeyStoreResolver.fixed(SecretServiceStore(timeout: 10, home: vault.home))
    XCTAssertThrowsError(try Vault.open(home: vault.home, resolver: resolver)) {
      XCTAssertEqual($0 as? VaultError, .unexpectedKeyItem(version: 2, store: .secretService))
    }
    let (manifest, _) = try Vault.inspect(home: vault.home, resolver: resolver)
    XCTAssertEqual(manifest.activeVersion, 1)
    XCTAssertEqual(manifest.record(2)?.state, .pending)
  }

  /// A version without a recorded key-check value (a release before them) and a stray beside its
  /// key: which one sealed the data cannot be told, so it stays refused as ambiguous.
  func testWithoutARecordedCheckValueAStrayStaysAmbiguous() throws {
    let (vault, resolver) = try secretServiceVault()
    try vault.withManifestLock {
      var manifest = vault.manifest
      manifest.versions[0].check = nil
      try vault.save(manifest)
    }
    try plantStray(vault, version: 1)
    XCTAssertThrowsError(try Vault.open(home: vault.home, resolver: resolver)) {
      XCTAssertEqual($0 as? KeyStoreError, .ambiguousKey(version: 1, count: 2))
    }
  }

  /// The key of a version in use gone, a stray in its place: never read as that version's key.
  func testAStrayNeverStandsInForAMissingKey() throws {
    let (vault, resolver) = try secretServiceVault()
    let envelope = try vault.seal(Array("before".utf8), context: [1])
    _ = try vault.rotate(options: RotationOptions(retireUnused: false))
    // Version 1's own item gone (removed by hand), two strays in its place.
    let store = SecretServiceStore(timeout: 10)
    XCTAssertTrue(try store.deleteKey(keyring: vault.keyringID, version: 1))
    try plantStray(vault, version: 1)
    let reopened = try Vault.open(home: vault.home, resolver: resolver)
    XCTAssertThrowsError(try reopened.open(envelope, context: [1])) {
      XCTAssertEqual($0 as? VaultError, .keyCheckFailed(version: 1))
    }
    _ = try Spawn.run(
      "/usr/bin/secret-tool",
      [
        "store", "--label=other", "xdg:schema", "org.vault.Key", "vault-id", vault.keyringID.hex, "version", "1",
        "home", vault.home + "-third",
      ], input: Array(String(repeating: "y", count: 32).utf8))
    let again = try Vault.open(home: vault.home, resolver: resolver)
    XCTAssertThrowsError(try again.open(envelope, context: [1])) {
      XCTAssertEqual($0 as? KeyStoreError, .ambiguousKey(version: 1, count: 2))
    }
    XCTAssertThrowsError(try again.exportKeys())
  }
}
