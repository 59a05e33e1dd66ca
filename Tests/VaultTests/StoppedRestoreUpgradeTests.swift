import Foundation
import VaultCrypto
import VaultKeys
import VaultTestSupport
import XCTest

@testable import Vault

/// A restore stopped after storing its keys, its home then given an unsigned (format-1) manifest
/// by someone who can write the home but not the key store: that is not an upgrade of a
/// first-release vault killed part-way, and the file must not be signed.
final class StoppedRestoreUpgradeTests: XCTestCase {
  struct PlacementFailed: Error {}

  func testAnUnsignedManifestInTheHomeOfAStoppedRestoreIsNeverSigned() throws {
    let temporary = TemporaryDirectory()
    let store = InMemoryKeyStore()
    let keyring = try KeyringID.random()
    let home = temporary.sub("home")
    let created = "2026-01-01T00:00:00Z"
    var keys: [ExportedKey] = []
    for (version, state) in [(UInt32(1), KeyState.decryptOnly), (2, .active)] {
      let key = try SymmetricKey.generate()
      let record = KeyVersionRecord(
        version: version, state: state, createdAt: created, check: try KeyVersionRecord.checkValue(of: key))
      keys.append(ExportedKey(record: record, key: key))
    }
    // Stopped after its keys were stored: placing the containers fails (as a kill there would).
    XCTAssertThrowsError(
      try Vault.restore(
        home: home, store: StoreDescriptor(kind: .memory), resolver: .fixed(store), keyring: keyring, keys: keys,
        activeVersion: 2, highestVersion: 2, externalSealVersions: [1],
        placeContainers: { _ in throw PlacementFailed() }
      ))
    XCTAssertEqual(try store.storedVersions(keyring: keyring), [1, 2])
    XCTAssertNotNil(try store.loadRecord(.integrityKey, keyring: keyring))

    // The home's writer removes the marker and puts an unsigned manifest that retires version 1
    // and forgets that it sealed records outside any container.
    XCTAssertEqual(unlink(RestoreMarker.path(home: home)), 0)
    let forged = """
      {"format": 1, "vault_id": "\(keyring.hex)", "store": {"kind": "memory"}, "active_version": 2,
       "versions": [{"version": 1, "state": "retired", "created_at": "\(created)"},
                    {"version": 2, "state": "active", "created_at": "\(created)"}],
       "containers": [], "external_seal_versions": []}
      """
    XCTAssertTrue(
      FileManager.default.createFile(
        atPath: ManifestFile.path(home: home), contents: Data(forged.utf8), attributes: [.posixPermissions: 0o600]))
    XCTAssertThrowsError(try Vault.open(home: home, resolver: .fixed(store)))
    XCTAssertTrue(try ManifestFile.read(home: home).isLegacy, "vault signed the unsigned file")
  }

  /// The copy stored before the keys changes nothing for the restore itself: run again, the
  /// stopped restore finishes, and the vault opens with its manifest above that copy.
  func testAStoppedRestoreRunAgainFinishesAboveItsFirstCopy() throws {
    let temporary = TemporaryDirectory()
    let store = InMemoryKeyStore()
    let keyring = try KeyringID.random()
    let home = temporary.sub("home")
    let key = try SymmetricKey.generate()
    let record = KeyVersionRecord(
      version: 1, state: .active, createdAt: "2026-01-01T00:00:00Z", check: try KeyVersionRecord.checkValue(of: key))
    func restore(_ place: @escaping (String) throws -> [ContainerRecord]) throws -> Vault {
      try Vault.restore(
        home: home, store: StoreDescriptor(kind: .memory), resolver: .fixed(store), keyring: keyring,
        keys: [ExportedKey(record: record, key: key)], activeVersion: 1, highestVersion: 1,
        externalSealVersions: [], placeContainers: place)
    }
    XCTAssertThrowsError(try restore { _ in throw PlacementFailed() })
    _ = try restore { _ in [] }
    let opened = try Vault.open(home: home, resolver: .fixed(store))
    XCTAssertEqual(opened.manifest.epoch, Vault.restoreProvisionalEpoch + 1)
    XCTAssertEqual(opened.manifest.record(1)?.state, .active)
  }
}
