import Foundation
import VaultBackup
import VaultKeys
import VaultTestSupport
import XCTest

@testable import Vault
@testable import VaultQueue

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

  /// A merge that stopped part way while restoring a missing container, run again, put the records
  /// it had not added yet in review as maybe delivered: the container it had made recorded no
  /// origin, so the bundle was no longer known as its origin.
  func testAMergeThatStoppedWhileRestoringAMissingContainerFinishesWhenRunAgain() throws {
    let vault = try Vault.create(
      home: temporary.sub("a"), store: StoreDescriptor(kind: .keyfile, keyfile: temporary.sub("keys/v.keys")),
      resolver: resolver)
    let queue = try QueueContainer(path: vault.home + "/q.sqlite", vault: vault)
    for index in 0..<300 { try queue.enqueue(Array("r\(index)".utf8), queue: "q") }
    // One record a merge refuses (a queue name too long), sealed as a container seals: the first
    // merge stops at the transaction holding it, after committing the one before.
    let bad = UUID().uuidString.lowercased()
    let name = String(repeating: "x", count: 129)
    let envelope = try Array("bad".utf8).withUnsafeBytes {
      try vault.seal($0, context: queue.context(queue: name, id: bad))
    }
    try queue.withStorage { storage in
      try envelope.withUnsafeBytes { bytes in
        _ = try storage.statement(
          "INSERT INTO records (id, queue, created_at, size, key_version, envelope) VALUES (?, ?, 0, ?, ?, ?)"
        ).run([
          .text(bad), .text(name), .integer(Int64(envelope.count)), .integer(Int64(vault.activeVersion)), .blob(bytes),
        ])
      }
    }
    let stopping = try backup(vault)
    _ = try queue.withStorage { try $0.statement("DELETE FROM records WHERE id = ?").run([.text(bad)]) }
    let finishing = try backup(vault)
    for suffix in ["", "-wal", "-shm"] { unlink(vault.home + "/q.sqlite" + suffix) }

    XCTAssertThrowsError(try merge(stopping, into: vault))
    // Half filled: no backup takes it for the container (a `keep` could prune the bundles with the rest).
    XCTAssertTrue(try QueueContainer.restoreUnfinished(path: vault.home + "/q.sqlite"))
    XCTAssertThrowsError(try backup(vault)) {
      XCTAssertEqual($0 as? BackupError, .containerRestoreUnfinished(path: vault.home + "/q.sqlite"))
    }
    let report = try merge(finishing, into: vault)
    XCTAssertEqual(report.containers.map(\.action), ["restored"])
    XCTAssertFalse(try QueueContainer.restoreUnfinished(path: vault.home + "/q.sqlite"))
    XCTAssertNoThrow(try backup(vault))
    XCTAssertEqual(report.containers.map(\.restored), [44])
    XCTAssertEqual(report.containers.map(\.undetermined), [0])
    let states = try QueueContainer(path: vault.home + "/q.sqlite", vault: vault).list().map(\.state)
    XCTAssertEqual(states.count, 300)
    XCTAssertEqual(Set(states), [.pending])
  }

  private func backup(_ vault: Vault) throws -> String {
    let directory = temporary.sub("backups-\(UUID().uuidString)")
    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    return try Backup.create(
      vault: vault, to: directory, passphrase: try Passphrase("correct horse"), keep: 5, toolVersion: "test",
      clock: Date.init, kdf: ScryptParameters(logN: 10, r: 8, p: 1)
    ).bundle
  }

  private func merge(_ bundle: String, into vault: Vault) throws -> MergeReport {
    try Backup.merge(bundle: bundle, passphrase: try Passphrase("correct horse"), into: vault)
  }
}
