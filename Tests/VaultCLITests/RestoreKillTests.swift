import Foundation
import Vault
import VaultBackup
import VaultCrypto
import VaultKeys
import VaultQueue
import VaultTestSupport
import XCTest

/// `vault restore BUNDLE --into HOME` killed with SIGKILL at each of its syncs, renames and
/// unlinks in turn (strace injects the signal at the Nth such call), then run again: the rerun
/// finishes the restore with every record, in a keyfile and in the Secret Service. Until it does,
/// the half-made home is refused as a vault.
final class RestoreKillTests: XCTestCase {
  var temporary: TemporaryDirectory!
  var bundle = ""
  var vaultID = ""
  var passphraseFile: String { temporary.sub("passphrase") }

  override func setUpWithError() throws {
    temporary = TemporaryDirectory()
    let resolver = KeyStoreResolver.system(secretServiceTimeout: 10)
    let vault = try Vault.create(
      home: temporary.sub("home"), store: StoreDescriptor(kind: .keyfile, keyfile: temporary.sub("keys/v.keys")),
      resolver: resolver)
    for (name, count) in [("queue.sqlite", 4), ("other.sqlite", 2)] {
      let directory = name == "queue.sqlite" ? vault.home : temporary.sub("elsewhere")
      try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
      let container = try QueueContainer(path: directory + "/" + name, vault: vault)
      for i in 0..<count { _ = try container.enqueue(Array("record \(i)".utf8), queue: "q") }
    }
    try FileManager.default.createDirectory(atPath: temporary.sub("backups"), withIntermediateDirectories: true)
    // Cheap scrypt (the package knob) keeps each of the many restores short.
    bundle =
      try Backup.create(
        vault: vault, to: temporary.sub("backups"), passphrase: try Passphrase("a long passphrase"), keep: 5,
        toolVersion: "test", clock: Date.init, kdf: ScryptParameters(logN: 10, r: 8, p: 1)
      ).bundle
    vaultID = vault.keyringID.hex
    try "a long passphrase\n".write(toFile: passphraseFile, atomically: true, encoding: .utf8)
    XCTAssertEqual(chmod(passphraseFile, 0o600), 0)
  }

  override func tearDown() {
    removeSecretServiceItems()
    temporary = nil
  }

  private func removeSecretServiceItems() {
    // Each clear removes the items it finds; the restore writes keys, the integrity key and the manifest copy.
    for _ in 0..<6 { _ = try? Spawn.run("/usr/bin/secret-tool", ["clear", "vault-id", vaultID]) }
  }

  private func total(_ home: String, container: String) throws -> Int? {
    let stats = try vault(["--home", home, "queue", "stats", "--container", home + "/" + container, "--json"])
    guard stats.status == 0 else { return nil }
    return (try JSONSerialization.jsonObject(with: Data(stats.output)) as? [String: Any])?["total"] as? Int
  }

  /// Kills a restore at the 1st, 2nd, … call of `calls` until one runs to the end; after each kill
  /// the home is no vault yet, and the same command run again restores every record.
  private func killEachStep(of calls: String, store: [String], limit: Int = 60) throws -> Int {
    let home = temporary.sub("restored")
    let restore = ["restore", bundle, "--into", home, "--passphrase-file", passphraseFile] + store
    var kills = 0
    for step in 1...limit {
      try? FileManager.default.removeItem(atPath: home)
      try? FileManager.default.removeItem(atPath: temporary.sub("restored-keys"))
      removeSecretServiceItems()
      let killed = try vaultKilled(at: calls, step: step, restore)
      if killed.status == 0 { break }
      XCTAssertEqual(killed.status, 128 + SIGKILL, "\(calls) #\(step): \(killed.error)")
      kills += 1
      if FileManager.default.fileExists(atPath: home + "/manifest.json") {
        let status = try vault(["--home", home, "status"])
        XCTAssertNotEqual(status.status, 0, "\(calls) #\(step): a half-made home is no vault")
        XCTAssertTrue(status.error.contains("did not finish"), "\(calls) #\(step): \(status.error)")
      }
      let rerun = try vault(restore)
      XCTAssertEqual(rerun.status, 0, "\(calls) #\(step): \(rerun.error)")
      XCTAssertEqual(try total(home, container: "queue.sqlite"), 4, "\(calls) #\(step)")
      XCTAssertEqual(try total(home, container: "other.sqlite"), 2, "\(calls) #\(step)")
      XCTAssertFalse(FileManager.default.fileExists(atPath: home + "/restore-unfinished"), "\(calls) #\(step)")
    }
    return kills
  }

  /// Fails a restore's `step`th call of `calls` with `error` (not a kill: the restore sees the
  /// error and undoes what it made) at the 1st, 2nd, … such call until one runs to the end; after
  /// each failure the same command run again restores every record.
  private func failEachStep(of calls: String, with error: String, limit: Int = 60) throws -> Int {
    let home = temporary.sub("restored")
    let restore = [
      "restore", bundle, "--into", home, "--passphrase-file", passphraseFile, "--store", "keyfile", "--keyfile",
      temporary.sub("restored-keys/v.keys"),
    ]
    var failures = 0
    for step in 1...limit {
      try? FileManager.default.removeItem(atPath: home)
      try? FileManager.default.removeItem(atPath: temporary.sub("restored-keys"))
      XCTAssertEqual(mkdir(temporary.sub("restored-keys"), 0o700), 0)
      let failed = try vaultFailing(calls, with: error, when: "\(step)", restore)
      if failed.status == 0 { break }
      failures += 1
      XCTAssertTrue([1, 2].contains(failed.status), "\(calls) #\(step): \(failed.status) \(failed.error)")
      XCTAssertFalse(failed.error.contains("corrupt"), "\(calls) #\(step): \(failed.error)")
      let rerun = try vault(restore)
      XCTAssertEqual(rerun.status, 0, "\(calls) #\(step): \(rerun.error)")
      XCTAssertEqual(try total(home, container: "queue.sqlite"), 4, "\(calls) #\(step)")
      XCTAssertEqual(try total(home, container: "other.sqlite"), 2, "\(calls) #\(step)")
    }
    return failures
  }

  /// A restore whose sync failed (EIO) after a container was placed and opened removed the
  /// container file but not the -wal and -shm SQLite had made beside it; the rerun then found
  /// the home "not empty" and refused, and the -wal kept the container's envelopes there.
  func testARestoreFailingAtEachSyncIsRunAgainCleanly() throws {
    XCTAssertGreaterThan(try failEachStep(of: "fsync,fdatasync", with: "EIO"), 5)
  }

  /// Kills a merge of the bundle into its own home at each sync and rename, `reset` first each
  /// time; after each kill the merge runs again and the container at `container` must hold both
  /// of its records, pending (never in review as "maybe delivered"). With `backingUp`, a backup is
  /// tried after each kill that left the container's file: it may succeed only when the container
  /// holds both records (an outside review: a merge stopped by a full disk left the container it
  /// was rebuilding empty, and the next `backup --keep 1` pruned the bundle that held its records).
  private func killEachMergeStep(reset: () throws -> Void, container: String, backingUp: Bool = false) throws
    -> (kills: Int, unfinished: Int)
  {
    let home = temporary.sub("home")
    let merge = ["restore", bundle, "--into", home, "--passphrase-file", passphraseFile]
    var kills = 0
    var unfinished = 0
    for calls in ["fsync,fdatasync", "rename,renameat,renameat2"] {
      for step in 1...60 {
        try reset()
        let killed = try vaultKilled(at: calls, step: step, merge)
        if killed.status == 0 { break }
        XCTAssertEqual(killed.status, 128 + SIGKILL, "\(calls) #\(step): \(killed.error)")
        kills += 1
        if backingUp, FileManager.default.fileExists(atPath: container) {
          let later = temporary.sub("later")
          try FileManager.default.createDirectory(atPath: later, withIntermediateDirectories: true)
          let backup = try vault([
            "--home", home, "backup", "--to", later, "--keep", "1", "--passphrase-file", passphraseFile,
          ])
          // Refused (a creation cut short, or a container not filled yet), or the container is whole.
          if backup.status == 0 {
            let stats = try vault(["--home", home, "queue", "stats", "--container", container, "--json"])
            let total = (try? JSONSerialization.jsonObject(with: Data(stats.output)) as? [String: Any])?["total"]
            XCTAssertEqual(total as? Int, 2, "\(calls) #\(step): backed up with records missing")
          }
          if backup.error.contains("did not finish") {
            unfinished += 1
            // Told by status and doctor too, with what to do.
            for command in [["status"], ["status", "--json"], ["doctor"]] {
              let told = try vault(["--home", home] + command)
              XCTAssertTrue(
                told.outputText.contains("a restore of \(bundle) into this home did not finish"),
                "\(command): \(told.outputText)")
              XCTAssertTrue(told.outputText.contains("container \(container) may lack records"), "\(command)")
              XCTAssertTrue(told.outputText.contains("run `vault restore` of it again"), "\(command)")
            }
          }
        }
        let rerun = try vault(merge)
        XCTAssertEqual(rerun.status, 0, "\(calls) #\(step): \(rerun.error)")
        XCTAssertFalse(FileManager.default.fileExists(atPath: home + "/other-2.sqlite"), "\(calls) #\(step): one copy")
        let stats = try vault(["--home", home, "queue", "stats", "--container", container, "--json"])
        XCTAssertEqual(stats.status, 0, "\(calls) #\(step): \(stats.error)")
        let states = (try? JSONSerialization.jsonObject(with: Data(stats.output)) as? [String: Any])?["by_state"]
        XCTAssertEqual(
          states as? [String: Int], ["pending": 2, "in_flight": 0, "parked": 0, "review": 0], "\(calls) #\(step)")
      }
    }
    return (kills, unfinished)
  }

  /// A merge into the vault's own home that rebuilds a registered container whose file is gone,
  /// killed at each sync and rename: run again, it restores every record of that container as it
  /// was (pending), never to review as "maybe delivered" (review: the rebuilt container had no
  /// origin until a later step, so the rerun could not tell it was a copy of the snapshot).
  func testAMergeKilledWhileItRebuildsAContainerRestoresItsRecordsWhenRunAgain() throws {
    let lost = temporary.sub("elsewhere/other.sqlite")
    let kills = try killEachMergeStep(
      reset: { for suffix in ["", "-journal", "-wal", "-shm"] { unlink(lost + suffix) } }, container: lost,
      backingUp: true)
    XCTAssertGreaterThan(kills.kills, 10)
    XCTAssertGreaterThan(kills.unfinished, 0, "a kill left a container half made, and the backup refused it")
  }

  /// A merge left unfinished whose bundle is gone: `vault backup` names the way out, `vault
  /// container accept` takes the container as it is (saying what it lacks), and backups go on.
  func testAContainerAStoppedMergeLeftIsAcceptedAsItIs() throws {
    let home = temporary.sub("home")
    let path = home + "/queue.sqlite"
    let gone = temporary.sub("gone.vaultbackup")
    try QueueContainer(path: path, vault: try Vault.open(home: home)).beginMerge(
      UnfinishedMerge(snapshot: String(repeating: "ab", count: 32), madeIt: false, bundle: gone))
    let backup = ["--home", home, "backup", "--to", temporary.sub("backups"), "--passphrase-file", passphraseFile]

    let refused = try vault(backup)
    XCTAssertEqual(refused.status, 2, refused.error)
    XCTAssertTrue(refused.error.contains("a restore of \(gone) into this home did not finish"), refused.error)
    XCTAssertTrue(refused.error.contains("`vault container accept \(path)`"), refused.error)

    let listed = try vault(["--home", home, "container", "list"])
    XCTAssertTrue(listed.outputText.contains("ok (a restore of \(gone) did not finish)"), listed.outputText)
    let accepted = try vault(["--home", home, "container", "accept", path])
    XCTAssertEqual(accepted.status, 0, accepted.error)
    XCTAssertTrue(
      accepted.outputText.contains("Accepted \(path) as it is: the records of \(gone)"), accepted.outputText)
    XCTAssertEqual(try vault(backup).status, 0)
    let again = try vault(["--home", home, "container", "accept", path])
    XCTAssertEqual(again.status, 0, again.error)
    XCTAssertTrue(again.outputText.contains("nothing was changed"), again.outputText)
    XCTAssertNotEqual(try vault(["--home", home, "container", "accept", temporary.sub("nowhere.sqlite")]).status, 0)
  }

  /// While a merge into a home runs (here held at its first container, its marks set), `vault
  /// container accept` is refused (exit 2) and leaves the mark, and so is a second merge of the
  /// same bundle; `status` says it is running and `backup` to wait for it; once the merge has
  /// finished accept and the merge go through. Accept used to take no lock: run
  /// beside a merge, it removed that merge's mark, and a merge stopped after that would have left a
  /// container lacking records that backups took again.
  func testARunningMergeKeepsAcceptAndASecondMergeOut() throws {
    let home = temporary.sub("home")
    let path = home + "/queue.sqlite"
    let merge = ["restore", bundle, "--into", home, "--passphrase-file", passphraseFile]
    // What ran while the merge was held, and the container's marks after (the checks run after
    // the merge: an XCTest failure inside its progress callback would be on the wrong thread).
    let during = LockedValue<[String: Spawned]>([:])
    let marksDuring = LockedValue<[String]>([])
    let backup = ["--home", home, "backup", "--to", temporary.sub("backups"), "--passphrase-file", passphraseFile]
    _ = try Backup.merge(
      bundle: bundle, passphrase: try Passphrase("a long passphrase"), into: try Vault.open(home: home),
      progress: { step in
        guard case .merging(container: 1, of: _) = step else { return }
        let commands = [
          "accept": ["--home", home, "container", "accept", path], "second": merge,
          "status": ["--home", home, "status"],
          "backup": backup,
        ]
        for (name, arguments) in commands { if let run = try? vault(arguments) { during.withLock { $0[name] = run } } }
        marksDuring.withLock { $0 = (try? QueueContainer.unfinishedMerges(path: path)) ?? [] }
      })
    let (accept, second, marks) = (
      during.withLock { $0["accept"] }, during.withLock { $0["second"] }, marksDuring.withLock { $0 }
    )
    let refused = try XCTUnwrap(accept)
    XCTAssertEqual(refused.status, 2, refused.error)
    XCTAssertTrue(refused.error.contains("a restore (merge of a bundle) into \(home) is running"), refused.error)
    XCTAssertEqual(marks, [bundle], "accept removed the running merge's mark")
    let secondMerge = try XCTUnwrap(second)
    XCTAssertEqual(secondMerge.status, 2, secondMerge.error)
    XCTAssertTrue(secondMerge.error.contains("is running"), secondMerge.error)
    // Status says it runs (not that it was stopped, with advice to run it again), and a backup
    // says to wait for it.
    let status = try XCTUnwrap(during.withLock { $0["status"] })
    XCTAssertTrue(status.outputText.contains("a restore of \(bundle) into this home is running now"), status.outputText)
    XCTAssertFalse(status.outputText.contains("did not finish"), status.outputText)
    let refusedBackup = try XCTUnwrap(during.withLock { $0["backup"] })
    XCTAssertEqual(refusedBackup.status, 2, refusedBackup.error)
    XCTAssertTrue(refusedBackup.error.contains("into \(home) is running"), refusedBackup.error)
    // Finished: no mark left, and both run.
    XCTAssertEqual(try QueueContainer.unfinishedMerges(path: path), [])
    XCTAssertEqual(try vault(merge).status, 0)
    let accepted = try vault(["--home", home, "container", "accept", path])
    XCTAssertEqual(accepted.status, 0, accepted.error)
    XCTAssertTrue(accepted.outputText.contains("nothing was changed"), accepted.outputText)
  }

  /// A merge stopped with Ctrl-Z holds its lock and never finishes until resumed: status said it
  /// was "running now" (an adversarial review). It names the process and how to resume it.
  func testAStoppedMergeIsNamedWithHowToResumeIt() throws {
    let home = temporary.sub("home")
    let path = home + "/queue.sqlite"
    try QueueContainer(path: path, vault: try Vault.open(home: home)).beginMerge(
      UnfinishedMerge(snapshot: String(repeating: "cd", count: 32), madeIt: false, bundle: bundle))
    let holder = try FlockHolder(path: home + "/merge.lock")
    holder.stop()
    defer { holder.release() }
    let status = try vault(["--home", home, "status"])
    XCTAssertTrue(
      status.outputText.contains(
        "a restore of \(bundle) into this home is running now (process \(holder.pid) (python3)) but is stopped "
          + "(Ctrl-Z or SIGSTOP): resume it (`fg` in its shell, or `kill -CONT \(holder.pid)`);"),
      status.outputText)
    let doctor = try vault(["--home", home, "doctor"])
    XCTAssertTrue(doctor.outputText.contains("kill -CONT \(holder.pid)"), doctor.outputText)
  }

  /// A merge that adds a container the home does not know, killed at each sync and rename: run
  /// again, it takes up the file the killed run made (no second copy beside it, review: a stray
  /// `other.sqlite` stayed and the rerun added `other-2.sqlite`), with every record pending.
  func testAMergeKilledWhileItAddsAContainerTakesUpItsFileWhenRunAgain() throws {
    let home = temporary.sub("home")
    let places = [temporary.sub("elsewhere/other.sqlite"), home + "/other.sqlite", home + "/other-2.sqlite"]
    let kills = try killEachMergeStep(
      reset: {
        for place in places {
          for suffix in ["", "-journal", "-wal", "-shm"] { unlink(place + suffix) }
          _ = try vault(["--home", home, "container", "forget", place])
        }
      }, container: places[1], backingUp: true)
    XCTAssertGreaterThan(kills.kills, 10)
  }

  /// An empty file under the name a merge would give a container is taken up only when it has no
  /// other name (review: a hard link to someone's empty file became the container, so the merge
  /// wrote into that file).
  func testAMergeNeverWritesIntoAHardLinkedFile() throws {
    let home = temporary.sub("home")
    let lost = temporary.sub("elsewhere/other.sqlite")
    for suffix in ["", "-wal", "-shm"] { unlink(lost + suffix) }
    XCTAssertEqual(try vault(["--home", home, "container", "forget", lost]).status, 0)
    let note = temporary.sub("notes.txt")
    XCTAssertTrue(FileManager.default.createFile(atPath: note, contents: Data()))
    XCTAssertEqual(link(note, home + "/other.sqlite"), 0)
    let merged = try vault(["restore", bundle, "--into", home, "--passphrase-file", passphraseFile])
    XCTAssertEqual(merged.status, 0, merged.error)
    XCTAssertTrue(merged.outputText.contains("other-2.sqlite (added)"), merged.outputText)
    XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: note)), Data(), "the note is untouched")
  }

  func testARestoreKilledAtAnyStepIntoAKeyfileIsFinishedByRunningItAgain() throws {
    let keyfile = ["--store", "keyfile", "--keyfile", temporary.sub("restored-keys/v.keys")]
    var kills = 0
    for calls in ["fsync,fdatasync", "rename,renameat,renameat2", "unlink,unlinkat"] {
      kills += try killEachStep(of: calls, store: keyfile)
    }
    XCTAssertGreaterThan(kills, 20, "the restore was killed at every step")
  }

  /// Two operators (or a script run twice) restoring the same bundle into the same new home at
  /// once: one restores it, the other finishes it too or is refused (a vault already exists, or
  /// the finished home is this bundle's vault, where --store does not apply),
  /// and the home holds one vault with every record, whoever came second (neither takes the
  /// other's files for leftovers of a stopped restore and clears them).
  func testTwoRestoresRacingIntoOneHomeLeaveOneVaultWithEveryRecord() throws {
    let home = temporary.sub("restored")
    let restore = [
      "restore", bundle, "--into", home, "--passphrase-file", passphraseFile, "--store", "keyfile", "--keyfile",
      temporary.sub("restored-keys/v.keys"),
    ]
    var outcomes: [Int32: Int] = [:]
    for round in 1...8 {
      try? FileManager.default.removeItem(atPath: home)
      try? FileManager.default.removeItem(atPath: temporary.sub("restored-keys"))
      let first = try Spawn.start(vaultBinary(), restore)
      let second = try Spawn.start(vaultBinary(), restore)
      let results = [first.finish(), second.finish()]
      for result in results {
        outcomes[result.status, default: 0] += 1
        // 1: refused as a vault already there; 64: the finished home seen as this bundle's vault,
        // to merge into, for which --store and --keyfile do not apply.
        XCTAssertTrue([0, 1, 64].contains(result.status), "round \(round): \(result.status) \(result.error)")
        if result.status == 1 {
          XCTAssertTrue(result.error.contains("already"), "round \(round): \(result.error)")
        } else if result.status == 64 {
          XCTAssertTrue(result.error.contains("holds this bundle's vault"), "round \(round): \(result.error)")
        }
      }
      XCTAssertTrue(results.contains { $0.status == 0 }, "round \(round): one restore finished")
      XCTAssertEqual(try total(home, container: "queue.sqlite"), 4, "round \(round)")
      XCTAssertEqual(try total(home, container: "other.sqlite"), 2, "round \(round)")
      XCTAssertFalse(FileManager.default.fileExists(atPath: home + "/restore-unfinished"), "round \(round)")
      let verify = try vault(["scan", "--verify", "--home", home, home])
      XCTAssertEqual(verify.status, 0, "round \(round): \(verify.outputText) \(verify.error)")
    }
    print("racing restores, exit statuses over 8 rounds: \(outcomes)")
  }

  func testARestoreKilledAtAnyStepIntoTheSecretServiceIsFinishedByRunningItAgain() throws {
    XCTAssertGreaterThan(try killEachStep(of: "fsync,fdatasync", store: ["--store", "secret-service"]), 10)
  }
}
