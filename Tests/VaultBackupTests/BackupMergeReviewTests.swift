import Foundation
import VaultBackup
import VaultKeys
import VaultQueue
import VaultTestSupport
import XCTest

@testable import Vault

/// Regressions from the outside review of issue 14's merge that need the vault's internals.
final class BackupMergeReviewTests: XCTestCase {
  var temporary: TemporaryDirectory!
  let resolver = KeyStoreResolver.system(secretServiceTimeout: 10)

  override func setUp() { temporary = TemporaryDirectory() }
  override func tearDown() { temporary = nil }

  /// A container registered before container ids (a home upgraded from an older release, whose
  /// container was not opened since) has no id in the manifest: the merge did not match it, added
  /// the bundle's copy beside it under another name with every record, and so brought back (to be
  /// sent again) what the home had delivered.
  func testAContainerRegisteredWithoutAnIDIsMergedIntoNotAddedAgain() throws {
    let vault = try Vault.create(
      home: temporary.sub("a"), store: StoreDescriptor(kind: .keyfile, keyfile: temporary.sub("keys/v.keys")),
      resolver: resolver)
    let queue = try QueueContainer(path: vault.home + "/q.sqlite", vault: vault)
    let delivered = UUID()
    let kept = UUID()
    try queue.enqueue(Array("delivered".utf8), queue: "q", id: delivered)
    try queue.enqueue(Array("kept".utf8), queue: "q", id: kept)
    let directory = temporary.sub("backups")
    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    let bundle = try Backup.create(
      vault: vault, to: directory, passphrase: try Passphrase("correct horse"), keep: 5, toolVersion: "test",
      clock: Date.init, kdf: ScryptParameters(logN: 10, r: 8, p: 1)
    ).bundle
    try queue.ack([delivered])
    // As an older release registered it: by path only.
    try vault.withManifestLock {
      var next = vault.manifest
      next.containers = next.containers.map { ContainerRecord(path: $0.path, id: nil) }
      try vault.save(next)
    }

    let report = try Backup.merge(bundle: bundle, passphrase: try Passphrase("correct horse"), into: vault)
    XCTAssertEqual(report.containers.map(\.action), ["merged"])
    XCTAssertEqual(report.containers.map(\.path), [vault.home + "/q.sqlite"])
    XCTAssertEqual(report.containers.map(\.goneHere), [1])
    try vault.reload()
    XCTAssertEqual(vault.manifest.containers.map(\.path), [vault.home + "/q.sqlite"], "no second copy")
    XCTAssertEqual(try QueueContainer(path: vault.home + "/q.sqlite", vault: vault).list().map(\.id), [kept])
  }
}
