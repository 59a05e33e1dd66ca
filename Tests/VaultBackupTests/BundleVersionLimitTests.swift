import Foundation
import VaultBackup
import VaultCrypto
import VaultKeys
import VaultTestSupport
import XCTest

@testable import Vault

/// Version numbers a bundle may carry: they stop one short of 2^32 - 1, as a vault's do.
final class BundleVersionLimitTests: XCTestCase {
  /// A bundle whose highest version is 2^32 - 1 (an edited bundle; a vault never gets there) is
  /// refused by the verification every restore begins with: restored, its first rotation trapped
  /// on the overflow (a security review, SIGILL), and nothing could rotate it again. A backup
  /// verifies its bundle the same way before naming it, so a manifest pushed there (here through
  /// the module's internals) leaves no bundle.
  func testABundleClaimingTheLastVersionNumberIsRefused() throws {
    let temporary = TemporaryDirectory()
    let vault = try Vault.create(
      home: temporary.sub("home"), store: StoreDescriptor(kind: .keyfile, keyfile: temporary.sub("keys/v.keys")))
    try vault.withManifestLock {
      var next = vault.manifest
      next.highestVersion = .max
      try vault.save(next)
    }
    let bundles = temporary.sub("bundles")
    try FileManager.default.createDirectory(atPath: bundles, withIntermediateDirectories: true)
    XCTAssertThrowsError(
      try Backup.create(
        vault: vault, to: bundles, passphrase: try Passphrase("pass"), keep: 5, toolVersion: "test", clock: Date.init,
        kdf: ScryptParameters(logN: 10, r: 8, p: 1))
    ) { error in
      guard case .damagedManifest(_, let reason)? = error as? BackupError else { return XCTFail("\(error)") }
      XCTAssertEqual(reason, "highest version")
    }
    XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: bundles), [], "no bundle is left")
  }
}
