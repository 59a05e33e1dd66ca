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
    // The first merge stops at the transaction holding it, after committing the one before.
    let bad = try insertUnmergeable(into: queue, vault: vault)
    let stopping = try backup(vault)
    _ = try queue.withStorage { try $0.statement("DELETE FROM records WHERE id = ?").run([.text(bad)]) }
    let finishing = try backup(vault)
    for suffix in ["", "-wal", "-shm"] { unlink(vault.home + "/q.sqlite" + suffix) }

    XCTAssertThrowsError(try merge(stopping, into: vault))
    // Half filled: no backup takes it for the container (a `keep` could prune the bundles with the rest).
    XCTAssertEqual(try QueueContainer.unfinishedMerges(path: vault.home + "/q.sqlite"), [stopping])
    XCTAssertThrowsError(try backup(vault)) {
      XCTAssertEqual($0 as? BackupError, .containerMergeUnfinished(path: vault.home + "/q.sqlite", bundles: [stopping]))
    }
    // Another bundle of the same container finishes its own merge, not the stopped one's (review:
    // keyed by the container's instance, which every bundle of it shares, it cleared the mark).
    let report = try merge(finishing, into: vault)
    XCTAssertEqual(report.containers.map(\.action), ["merged"])
    XCTAssertEqual(try QueueContainer.unfinishedMerges(path: vault.home + "/q.sqlite"), [stopping])
    XCTAssertThrowsError(try backup(vault))
    // The stopped bundle is broken for good here (its bad record): the container is accepted as it is.
    let accepted = try QueueContainer(path: vault.home + "/q.sqlite", vault: vault).acceptUnfinishedMerges()
    XCTAssertEqual(accepted.map(\.bundle), [stopping])
    XCTAssertEqual(try QueueContainer.unfinishedMerges(path: vault.home + "/q.sqlite"), [])
    XCTAssertNoThrow(try backup(vault))
    XCTAssertEqual(report.containers.map(\.restored), [44])
    XCTAssertEqual(report.containers.map(\.undetermined), [0])
    let states = try QueueContainer(path: vault.home + "/q.sqlite", vault: vault).list().map(\.state)
    XCTAssertEqual(states.count, 300)
    XCTAssertEqual(Set(states), [.pending])
  }

  /// A merge into a container that is there (not one it makes) stopped part way: the container is
  /// marked until that merge finishes, so no backup takes it half merged (review: a home rolled
  /// back to an older copy, a merge of the newer bundle killed, and `backup --keep 1` pruned it
  /// with 345 records the home lacked). A refused backup leaves no snapshot mark in the container.
  func testAMergeIntoAContainerThatIsThereStoppedPartWayKeepsBackupsOff() throws {
    let vault = try Vault.create(
      home: temporary.sub("a"), store: StoreDescriptor(kind: .keyfile, keyfile: temporary.sub("keys/v.keys")),
      resolver: resolver)
    let path = vault.home + "/q.sqlite"
    let older = temporary.sub("older.sqlite")
    do {
      let queue = try QueueContainer(path: path, vault: vault)
      try queue.enqueue(Array("first".utf8), queue: "q")
      let copy = "import sqlite3,sys; s=sqlite3.connect(sys.argv[1]); d=sqlite3.connect(sys.argv[2]); s.backup(d)"
      XCTAssertEqual(try Spawn.run("/usr/bin/env", ["python3", "-c", copy, path, older]).status, 0)
      for index in 0..<300 { try queue.enqueue(Array("r\(index)".utf8), queue: "q") }
      try insertUnmergeable(into: queue, vault: vault)
    }
    let stopping = try backup(vault)
    // The home is put back to its older copy (a rollback): it lacks 300 records the bundle holds.
    for suffix in ["", "-wal", "-shm"] { unlink(path + suffix) }
    try FileManager.default.copyItem(atPath: older, toPath: path)
    XCTAssertEqual(chmod(path, 0o600), 0)

    XCTAssertThrowsError(try merge(stopping, into: vault))

    let queue = try QueueContainer(path: path, vault: vault)
    XCTAssertGreaterThan(try queue.stats().total, 1, "part of the bundle went in")
    XCTAssertEqual(try QueueContainer.unfinishedMerges(path: path), [stopping])
    let marksBefore = try queue.lineage().passedSnapshots
    XCTAssertThrowsError(try backup(vault)) {
      XCTAssertEqual($0 as? BackupError, .containerMergeUnfinished(path: path, bundles: [stopping]))
    }
    XCTAssertEqual(try queue.lineage().passedSnapshots, marksBefore, "a refused backup marks nothing passed")
  }

  /// A merge that stops before it reaches a container the home does not know (here: in the one
  /// before it) has registered it already: the home's backups refuse it as missing until the merge
  /// is run again, instead of going on without it and pruning the only bundle that holds it.
  func testAContainerAMergeWouldAddIsRegisteredBeforeAnythingIsMerged() throws {
    let stopped = try mergeStoppedBeforeAnAddedContainer(nameTaken: false)
    XCTAssertEqual(stopped.added, stopped.vault.home + "/elsewhere.sqlite")
    // The container the merge stopped in is refused first; taken as it is, the one not reached yet.
    XCTAssertThrowsError(try backup(stopped.vault)) {
      XCTAssertEqual(
        $0 as? BackupError, .containerMergeUnfinished(path: stopped.first.path, bundles: [stopped.bundle]))
    }
    XCTAssertEqual(try stopped.first.acceptUnfinishedMerges().map(\.bundle), [stopped.bundle])
    XCTAssertThrowsError(try backup(stopped.vault)) {
      XCTAssertEqual($0 as? BackupError, .containerMissing(path: stopped.added))
    }
  }

  /// The same when the name is taken: the container was lost, forgotten, and the app made a new one
  /// under its name, so the merge adds the bundle's copy as `elsewhere-2.sqlite` (a second review:
  /// it was registered only at its turn, and a kill before that let a backup prune its only copy).
  func testAContainerAMergeWouldAddUnderAnotherNameIsRegisteredBeforeAnythingIsMerged() throws {
    let stopped = try mergeStoppedBeforeAnAddedContainer(nameTaken: true)
    XCTAssertEqual(stopped.added, stopped.vault.home + "/elsewhere-2.sqlite")
    XCTAssertEqual(try stopped.first.acceptUnfinishedMerges().map(\.bundle), [stopped.bundle])
    XCTAssertThrowsError(try backup(stopped.vault)) {
      XCTAssertEqual($0 as? BackupError, .containerMissing(path: stopped.added))
    }
  }

  /// A bundle of two containers, the first with a record no merge takes, the second lost and
  /// forgotten since (with `nameTaken`, a new container of the app's in the home under its name),
  /// merged back: the merge stops in the first. Returns the path the second was registered at
  /// before that (the test fails when it was not).
  private func mergeStoppedBeforeAnAddedContainer(nameTaken: Bool) throws
    -> (vault: Vault, first: QueueContainer, bundle: String, added: String)
  {
    let vault = try Vault.create(
      home: temporary.sub("a"), store: StoreDescriptor(kind: .keyfile, keyfile: temporary.sub("keys/v.keys")),
      resolver: resolver)
    let first = try QueueContainer(path: vault.home + "/a.sqlite", vault: vault)
    for index in 0..<300 { try first.enqueue(Array("a\(index)".utf8), queue: "q") }
    try insertUnmergeable(into: first, vault: vault)
    let second = nameTaken ? vault.home + "/elsewhere.sqlite" : temporary.sub("elsewhere.sqlite")
    try QueueContainer(path: second, vault: vault).enqueue(Array("only here".utf8), queue: "q")
    let bundle = try backup(vault)
    for suffix in ["", "-wal", "-shm"] { unlink(second + suffix) }
    _ = try vault.forgetContainer(at: second)
    if nameTaken { try QueueContainer(path: second, vault: vault).enqueue(Array("the app's".utf8), queue: "q") }

    XCTAssertThrowsError(try merge(bundle, into: vault))

    try vault.reload()
    let known = Set([first.path] + (nameTaken ? [second] : []))
    let added = try XCTUnwrap(
      vault.manifest.containers.map(\.path).first { !known.contains($0) }, "registered before its turn")
    return (vault, first, bundle, added)
  }

  /// One record a merge refuses (a queue name too long), sealed as a container seals, stored after
  /// the others: a merge of a bundle holding it stops at the transaction holding it, after
  /// committing the ones before. Returns its id.
  @discardableResult
  private func insertUnmergeable(into queue: QueueContainer, vault: Vault) throws -> String {
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
    return bad
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
