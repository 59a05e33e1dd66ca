import Foundation
import VaultTestSupport
import XCTest

/// Issue 14 through the real binary: `backup --to`, `backup --verify`, `restore`, with the real
/// scrypt parameters (about half a second per bundle here) and a keyfile vault.
final class BackupCLITests: XCTestCase {
  var temporary: TemporaryDirectory!
  var home: String { temporary.sub("home") }
  var backups: String { temporary.sub("backups") }
  var passphraseFile: String { temporary.sub("passphrase") }
  let canary = "CANARY-" + UUID().uuidString

  override func setUpWithError() throws {
    temporary = TemporaryDirectory()
    try initKeyfileVault(home: home, keyfile: temporary.sub("k/v.keys"))
    for i in 0..<3 {
      let put = try vault(["--home", home, "queue", "put", "--queue", "q"], input: Array("\(canary) \(i)".utf8))
      XCTAssertEqual(put.status, 0, put.error)
    }
    let other = try vault(
      ["--home", home, "queue", "put", "--queue", "q", "--container", temporary.sub("other.sqlite")],
      input: Array(canary.utf8))
    XCTAssertEqual(other.status, 0, other.error)
    try FileManager.default.createDirectory(atPath: backups, withIntermediateDirectories: true)
    try "a long passphrase\n".write(toFile: passphraseFile, atomically: true, encoding: .utf8)
  }

  override func tearDown() { temporary = nil }

  private func json(_ run: Spawned) throws -> [String: Any] {
    try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(run.output)) as? [String: Any], run.error)
  }

  /// Runs `backup --to backups --keep 1` for `home`, failing the test unless it succeeded.
  /// - Returns: the bundle it wrote.
  private func backedUpKeepingOne(_ home: String, line: UInt = #line) throws -> String {
    let run = try vault([
      "--home", home, "backup", "--to", backups, "--passphrase-file", passphraseFile, "--keep", "1", "--json",
    ])
    XCTAssertEqual(run.status, 0, run.error, line: line)
    return try XCTUnwrap(try json(run)["bundle"] as? String, line: line)
  }

  private func bundles() throws -> [String] {
    try FileManager.default.contentsOfDirectory(atPath: backups).sorted().map { backups + "/" + $0 }
  }

  /// An older file-system copy of a container put back (an outside review: a nightly copy taken
  /// before ten more records, one backup, then the copy restored): each backup after it said "3
  /// records, every one opened", and with `--keep 1` the first one pruned the only bundle holding
  /// the other ten. A bundle whose snapshot the live container has no mark of is kept now, with a
  /// warning, also when backups went to another directory meanwhile (a second review: one backup
  /// elsewhere got past a refusal kept per directory); once it is merged, it is pruned as usual.
  func testAnOlderCopyOfAContainerPutBackNeverHasItsNewerBundlePruned() throws {
    let container = home + "/queue.sqlite"
    let aside = temporary.sub("aside")
    try FileManager.default.createDirectory(atPath: aside, withIntermediateDirectories: true)
    let files = ["", "-wal", "-shm"].map { container + $0 }.filter { FileManager.default.fileExists(atPath: $0) }
    let name = { (file: String) in aside + "/" + (file as NSString).lastPathComponent }
    for file in files { try FileManager.default.copyItem(atPath: file, toPath: name(file)) }
    for i in 0..<10 {
      XCTAssertEqual(
        try vault(["--home", home, "queue", "put", "--queue", "q"], input: Array("new \(i)".utf8)).status, 0)
    }
    let bundle = try backedUpKeepingOne(home)
    for suffix in ["", "-wal", "-shm"] { unlink(container + suffix) }
    for file in files { try FileManager.default.copyItem(atPath: name(file), toPath: file) }
    let stats = { try self.json(try vault(["--home", self.home, "queue", "stats", "--json"]))["total"] as? Int }
    XCTAssertEqual(try stats(), 3)
    // Status says so while that bundle is the newest (it said "ok", a review).
    let status = try vault(["--home", home, "status"])
    XCTAssertTrue(
      status.outputText.contains(
        "warning:  registered container \(container) holds no mark of its snapshot in \(bundle), the newest backup"),
      status.outputText)

    // A backup to another directory first, then two here with --keep 1: the bundle stays.
    let elsewhere = temporary.sub("elsewhere")
    XCTAssertEqual(mkdir(elsewhere, 0o700), 0)
    XCTAssertEqual(
      try vault(["--home", home, "backup", "--to", elsewhere, "--passphrase-file", passphraseFile]).status, 0)
    var newest = ""
    for _ in 0..<2 {
      let run = try vault([
        "--home", home, "backup", "--to", backups, "--passphrase-file", passphraseFile, "--keep", "1", "--json",
      ])
      XCTAssertEqual(run.status, 0, run.error)
      newest = try XCTUnwrap(try json(run)["bundle"] as? String)
      XCTAssertTrue(
        run.error.contains(
          "\(bundle) was kept, not pruned: registered container \(container) holds no mark of its "
            + "snapshot"), run.error)
      XCTAssertTrue(run.error.contains("`vault restore \(bundle)`"), run.error)
      XCTAssertEqual(try bundles(), [bundle, newest], "the older copy's bundles pruned, the newer bundle kept")
    }

    let merged = try vault(["--home", home, "restore", bundle, "--passphrase-file", passphraseFile])
    XCTAssertEqual(merged.status, 0, merged.error)
    XCTAssertEqual(try stats(), 13)
    let after = try backedUpKeepingOne(home)
    XCTAssertEqual(try bundles(), [after])
  }

  /// A file system without hard links (FAT, exFAT: link(2) fails with EPERM): the bundle was
  /// written and verified, then every backup failed on `link` (an outside review, simulated as
  /// here). It is published with a rename that never replaces a file instead.
  func testABackupToAFileSystemWithoutHardLinksIsPublishedByRename() throws {
    let run = try vaultFailing(
      "link,linkat", with: "EPERM", when: "1+",
      ["--home", home, "backup", "--to", backups, "--passphrase-file", passphraseFile, "--json"])
    XCTAssertEqual(run.status, 0, run.error)
    let bundle = try XCTUnwrap(try json(run)["bundle"] as? String)
    XCTAssertEqual(try bundles(), [bundle], "the bundle alone: no temporary file left beside it")
    let verified = try vault(["backup", "--verify", bundle, "--passphrase-file", passphraseFile])
    XCTAssertEqual(verified.status, 0, verified.error)
    // Neither (a FUSE mount answering EINVAL to the no-replace rename): named, nothing left.
    try FileManager.default.removeItem(atPath: bundle)
    let neither = try vaultFailing(
      "link,linkat", with: "EPERM", when: "1+", also: ["renameat2:error=EINVAL:when=1+"],
      ["--home", home, "backup", "--to", backups, "--passphrase-file", passphraseFile])
    XCTAssertEqual(neither.status, 2, neither.error)
    XCTAssertTrue(
      neither.error.contains("has neither hard links nor a rename that cannot replace a file"), neither.error)
    XCTAssertEqual(try bundles(), [], "nothing left in the directory")
  }

  /// `backup --keep 2` killed at each rename and fsync, then run again: the rerun writes a bundle
  /// that verifies, keeps two, and no `backup-directories.tmp-PID` of the killed run stays in
  /// the home (review: only a later backup with the same process id removed it); one whose
  /// process still runs (pid 1 here) is a write in progress and stays.
  func testABackupKilledAtEachStepLeavesNoTemporaryInTheHome() throws {
    let live = home + "/backup-directories.tmp-1"
    XCTAssertTrue(FileManager.default.createFile(atPath: live, contents: Data()))
    let arguments = ["--home", home, "backup", "--to", backups, "--keep", "2", "--passphrase-file", passphraseFile]
    var kills = 0
    for calls in ["rename,renameat,renameat2", "fsync,fdatasync"] {
      for step in 1...20 {
        let killed = try vaultKilled(at: calls, step: step, arguments)
        if killed.status == 0 { break }
        let label = "\(calls) #\(step)"
        XCTAssertEqual(killed.status, 128 + SIGKILL, "\(label): \(killed.error)")
        kills += 1
        let again = try vault(arguments + ["--json"])
        XCTAssertEqual(again.status, 0, "\(label): \(again.error)")
        let left = try FileManager.default.contentsOfDirectory(atPath: home).filter { $0.contains(".tmp-") }
        XCTAssertEqual(left, ["backup-directories.tmp-1"], label)
        XCTAssertEqual(try bundles().filter { $0.hasSuffix(".vaultbackup") }.count, 2, label)
        let bundle = try XCTUnwrap(try json(again)["bundle"] as? String)
        let verified = try vault(["--home", home, "backup", "--verify", bundle, "--passphrase-file", passphraseFile])
        XCTAssertEqual(verified.status, 0, "\(label): \(verified.error)")
      }
    }
    XCTAssertGreaterThan(kills, 2)
  }

  /// A registered container replaced by a FIFO, a directory or an empty file: the backup said
  /// "there is no vault container" and that opening it for writing would make one (an outside
  /// review); it names what is there now, and writes no bundle.
  func testABackupNamesWhatStandsWhereARegisteredContainerWas() throws {
    let container = temporary.sub("other.sqlite")
    let cases: [(String, () -> Void, String)] = [
      ("a FIFO", { XCTAssertEqual(mkfifo(container, 0o600), 0) }, "its database file is a FIFO, not a regular file"),
      (
        "a directory", { XCTAssertEqual(mkdir(container, 0o700), 0) },
        "its database file is a directory, not a regular file"
      ),
      (
        "an empty file", { XCTAssertTrue(FileManager.default.createFile(atPath: container, contents: Data())) },
        "it is empty (its creation was cut short)"
      ),
    ]
    XCTAssertEqual(rename(container, temporary.sub("aside.sqlite")), 0)
    for (name, make, expected) in cases {
      make()
      let run = try Spawn.run(
        "/usr/bin/timeout",
        [
          "60", vaultBinary(), "--home", home, "backup", "--to", backups, "--passphrase-file", passphraseFile,
        ])
      XCTAssertNotEqual(run.status, 0, name)
      XCTAssertNotEqual(run.status, 124, "\(name): waited")
      XCTAssertTrue(run.error.contains(expected), "\(name): \(run.error)")
      XCTAssertFalse(run.error.contains("there is no vault container"), "\(name): \(run.error)")
      XCTAssertEqual(try bundles().filter { $0.hasSuffix(".vaultbackup") }, [], name)
      try FileManager.default.removeItem(atPath: container)
    }
  }

  /// A directory where another user may rename or replace entries is refused before anything is
  /// written: writable by group or others without the sticky bit, or owned by another user.
  func testABackupDirectoryOthersCanRenameEntriesInIsRefused() throws {
    let arguments = ["--home", home, "backup", "--to", backups, "--passphrase-file", passphraseFile]
    for (mode, owner) in [(0o777 as mode_t, 0 as uid_t), (0o775, 0), (0o757, 0), (0o755, 1234)] {
      XCTAssertEqual(chmod(backups, mode), 0)
      XCTAssertEqual(chown(backups, owner, 0), 0)
      let refused = try vault(arguments)
      XCTAssertEqual(refused.status, 2, "mode \(String(mode, radix: 8)) owner \(owner): \(refused.error)")
      XCTAssertTrue(refused.error.contains("lets other users rename or replace its files"), refused.error)
      XCTAssertTrue(refused.error.contains("mode \(String(mode, radix: 8)), owner uid \(owner)"), refused.error)
      XCTAssertEqual(try bundles(), [], "nothing was written")
    }
    // Sticky (as /tmp), or writable only by its owner: a backup is made.
    for mode: mode_t in [0o1777, 0o700] {
      XCTAssertEqual(chown(backups, 0, 0), 0)
      XCTAssertEqual(chmod(backups, mode), 0)
      let written = try vault(arguments)
      XCTAssertEqual(written.status, 0, "mode \(String(mode, radix: 8)): \(written.error)")
    }
    XCTAssertEqual(try bundles().count, 2)
  }

  func testBackupVerifyAndRestoreRoundTripThroughTheBinary() throws {
    let written = try vault(
      ["--home", home, "backup", "--to", backups, "--passphrase-file", passphraseFile, "--json"])
    XCTAssertEqual(written.status, 0, written.error)
    let report = try json(written)
    let bundle = try XCTUnwrap(report["bundle"] as? String)
    XCTAssertEqual(try bundles(), [bundle])
    let verification = try XCTUnwrap(report["verification"] as? [String: Any])
    XCTAssertEqual(verification["records"] as? Int, 4)
    XCTAssertEqual((verification["containers"] as? [[String: Any]])?.count, 2)

    XCTAssertTrue(written.error.contains("is open to group or others (mode 644)"), written.error)
    XCTAssertEqual(chmod(passphraseFile, 0o600), 0)
    let verified = try vault(["backup", "--verify", bundle, "--passphrase-file", passphraseFile, "--json"])
    XCTAssertEqual(verified.status, 0, verified.error)
    XCTAssertFalse(verified.error.contains("warning"), verified.error)
    XCTAssertEqual(try json(verified)["by_version"] as? [String: Int], ["1": 4])

    let restoredHome = temporary.sub("restored")
    let restored = try vault([
      "restore", bundle, "--passphrase-file", passphraseFile, "--into", restoredHome, "--store", "keyfile",
      "--keyfile", temporary.sub("k2/v.keys"), "--json",
    ])
    XCTAssertEqual(restored.status, 0, restored.error)
    let restoreReport = try json(restored)
    XCTAssertEqual(restoreReport["records"] as? Int, 4)
    XCTAssertEqual(restoreReport["store"] as? String, "keyfile")
    let list = try vault(["--home", restoredHome, "queue", "list", "--json"])
    XCTAssertEqual(list.status, 0, list.error)
    XCTAssertEqual((try JSONSerialization.jsonObject(with: Data(list.output)) as? [Any])?.count, 3)
    // The restored vault rotates: both containers are registered in the new home and open.
    let rotated = try vault(["--home", restoredHome, "rotate", "--json"])
    XCTAssertEqual(rotated.status, 0, rotated.error)
    XCTAssertEqual((try json(rotated)["resealed"] as? [String: Int])?.values.reduce(0, +), 4)
  }

  func testScanFindsNoPlaintextCanaryInABundle() throws {
    let written = try vault(["--home", home, "backup", "--to", backups, "--passphrase-file", passphraseFile])
    XCTAssertEqual(written.status, 0, written.error)
    let scan = try vault(["scan", backups, "--canary", canary])
    XCTAssertEqual(scan.status, 0, scan.outputText + scan.error)
    // The same scanner does find the canary in a file that starts like a bundle: not vacuous.
    try "VAULTBKP\0\u{1}\(canary)\n".write(toFile: backups + "/leak.bin", atomically: true, encoding: .utf8)
    let leak = try vault(["scan", backups, "--canary", canary])
    XCTAssertEqual(leak.status, 1, leak.outputText)
    XCTAssertTrue(leak.outputText.contains("leak.bin"), leak.outputText)
  }

  func testKeepPrunesOldBundlesOfThisVaultOnly() throws {
    let foreign = backups + "/vault-0000000000000000-20000101T000000.000Z.vaultbackup"
    try "another vault's bundle".write(toFile: foreign, atomically: true, encoding: .utf8)
    var written: [String] = []
    for _ in 0..<3 {
      let run = try vault([
        "--home", home, "backup", "--to", backups, "--passphrase-file", passphraseFile, "--keep", "2", "--json",
      ])
      XCTAssertEqual(run.status, 0, run.error)
      written.append(try XCTUnwrap(try json(run)["bundle"] as? String))
    }
    XCTAssertEqual(try bundles(), ([foreign] + written.suffix(2)).sorted())
  }

  /// A restore into another key store makes a second home of the same vault: its bundles are not
  /// this home's. Its `backup --keep 1` into the same directory deleted this home's only bundle,
  /// and `status` here showed its bundle as this home's last backup (an operator review). A restore
  /// into the store that already holds the vault's keys names the home to merge into (it called
  /// the keyfile another vault's).
  func testASecondHomeOfTheVaultNeitherPrunesNorShowsThisHomesBundles() throws {
    XCTAssertEqual(chmod(passphraseFile, 0o600), 0)
    let bundle = try backedUpKeepingOne(home)
    let copy = temporary.sub("copy")
    let restore = ["restore", bundle, "--passphrase-file", passphraseFile, "--into", copy, "--store", "keyfile"]
    let refused = try vault(restore + ["--keyfile", temporary.sub("k/v.keys")])
    XCTAssertEqual(refused.status, 1, refused.error)
    XCTAssertTrue(refused.error.contains("keeps its keys there, with its home at \(home)"), refused.error)
    XCTAssertTrue(refused.error.contains("`vault restore BUNDLE --into \(home)`"), refused.error)
    // Whatever the keyfile's mode: at 0640 it was called another vault's (a security review).
    XCTAssertEqual(chmod(temporary.sub("k/v.keys"), 0o640), 0)
    let refusedAt0640 = try vault(restore + ["--keyfile", temporary.sub("k/v.keys")])
    XCTAssertTrue(refusedAt0640.error.contains("keeps its keys there, with its home at \(home)"), refusedAt0640.error)
    XCTAssertEqual(chmod(temporary.sub("k/v.keys"), 0o600), 0)
    let restored = try vault(restore + ["--keyfile", temporary.sub("k2/v.keys")])
    XCTAssertEqual(restored.status, 0, restored.error)

    let theirs = try backedUpKeepingOne(copy)
    XCTAssertEqual(try bundles(), [bundle, theirs].sorted(), "each home keeps its own bundle")
    let status = try json(try vault(["--home", home, "status", "--json"]))
    XCTAssertEqual((status["last_backup"] as? [String: Any])?["bundle"] as? String, bundle)
    let mine = try backedUpKeepingOne(home)
    XCTAssertEqual(try bundles(), [theirs, mine].sorted(), "this home prunes only its own")
  }

  /// After the home is moved, its earlier bundles (which record the old place) are still its own:
  /// shown as its backups (a security review: "none found") and pruned by `--keep`, as they carry
  /// this home's identity, which a second home of the vault, even one made at the old path, does
  /// not (a second review: two machines with the same path pruned each other's bundles).
  func testAMovedHomeKeepsItsBundlesAndASecondHomeAtItsOldPathLeavesThem() throws {
    XCTAssertEqual(chmod(passphraseFile, 0o600), 0)
    let before = try backedUpKeepingOne(home)
    let moved = temporary.sub("moved")
    XCTAssertEqual(rename(home, moved), 0)
    let status = try json(try vault(["--home", moved, "status", "--json"]))
    XCTAssertEqual((status["last_backup"] as? [String: Any])?["bundle"] as? String, before)
    // A command that writes records the new place (until then a vault made at the old path would
    // make this one look like its copy), then a second home of the vault is made at the old path
    // (restored into another keyfile), and backs up there too.
    XCTAssertEqual(try vault(["--home", moved, "queue", "put", "--queue", "q"], input: [9]).status, 0)
    let restored = try vault([
      "restore", before, "--passphrase-file", passphraseFile, "--into", home, "--store", "keyfile", "--keyfile",
      temporary.sub("k2/v.keys"),
    ])
    XCTAssertEqual(restored.status, 0, restored.error)
    let theirs = try backedUpKeepingOne(home)
    XCTAssertEqual(try bundles(), [before, theirs].sorted(), "the second home prunes none of the first's")
    let mine = try backedUpKeepingOne(moved)
    XCTAssertEqual(try bundles(), [theirs, mine].sorted(), "the moved home prunes its own earlier bundle")
    let shown = try json(try vault(["--home", moved, "status", "--json"]))
    XCTAssertEqual((shown["last_backup"] as? [String: Any])?["bundle"] as? String, mine)
  }

  func testWrongPassphraseDamageAndAnExistingHomeAreRefused() throws {
    XCTAssertEqual(
      try vault(["--home", home, "backup", "--to", backups, "--passphrase-file", passphraseFile]).status, 0)
    let bundle = try XCTUnwrap(try bundles().first)
    let wrong = temporary.sub("wrong")
    try "not the passphrase".write(toFile: wrong, atomically: true, encoding: .utf8)
    let refused = try vault(["backup", "--verify", bundle, "--passphrase-file", wrong])
    XCTAssertEqual(refused.status, 1)
    XCTAssertTrue(refused.error.contains("wrong passphrase"), refused.error)
    XCTAssertFalse(refused.error.contains("not the passphrase"))

    var bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: bundle)))
    bytes[bytes.count - 100] ^= 0x80
    try Data(bytes).write(to: URL(fileURLWithPath: bundle))
    let damaged = try vault(["backup", "--verify", bundle, "--passphrase-file", passphraseFile])
    XCTAssertEqual(damaged.status, 1)
    XCTAssertTrue(damaged.error.contains("container 2"), damaged.error)
    let notRestored = try vault([
      "restore", bundle, "--passphrase-file", passphraseFile, "--into", temporary.sub("new"), "--store", "keyfile",
      "--keyfile", temporary.sub("k3/v.keys"),
    ])
    XCTAssertEqual(notRestored.status, 1)
    XCTAssertFalse(FileManager.default.fileExists(atPath: temporary.sub("new")), "nothing made before verifying")

    // Into the vault's own home a restore merges: a damaged bundle is refused before anything merges.
    let stateBefore = try vault(["--home", home, "queue", "list", "--json"])
    let over = try vault(["restore", bundle, "--passphrase-file", passphraseFile, "--into", home])
    XCTAssertEqual(over.status, 1)
    XCTAssertTrue(over.error.contains("container 2"), over.error)
    XCTAssertFalse(over.error.contains("Secret Service"), "the home's store is kept: \(over.error)")
    XCTAssertEqual(try vault(["--home", home, "queue", "list", "--json"]).output, stateBefore.output)
  }

  func testARestoreIntoTheVaultsOwnHomeMergesAndListsWhatItKeptForReview() throws {
    XCTAssertEqual(chmod(passphraseFile, 0o600), 0)
    XCTAssertEqual(
      try vault(["--home", home, "backup", "--to", backups, "--passphrase-file", passphraseFile]).status, 0)
    let bundle = try XCTUnwrap(try bundles().first)
    // The copy on a new machine stores a record under an id the home then stores too, later.
    let copy = temporary.sub("copy")
    let restored = try vault([
      "restore", bundle, "--passphrase-file", passphraseFile, "--into", copy, "--store", "keyfile", "--keyfile",
      temporary.sub("k2/v.keys"),
    ])
    XCTAssertEqual(restored.status, 0, restored.error)
    let id = UUID().uuidString.lowercased()
    XCTAssertEqual(
      try vault(["--home", copy, "queue", "put", "--queue", "q", "--id", id], input: Array("copy's".utf8)).status, 0)
    usleep(5_000)
    XCTAssertEqual(
      try vault(["--home", home, "queue", "put", "--queue", "q", "--id", id], input: Array("home's".utf8)).status, 0)
    let copyBackups = temporary.sub("copy-backups")
    try FileManager.default.createDirectory(atPath: copyBackups, withIntermediateDirectories: true)
    XCTAssertEqual(
      try vault(["--home", copy, "backup", "--to", copyBackups, "--passphrase-file", passphraseFile]).status, 0)
    let copyBundle = try XCTUnwrap(try FileManager.default.contentsOfDirectory(atPath: copyBackups).first)

    let refused = try vault([
      "--home", home, "restore", copyBackups + "/" + copyBundle, "--passphrase-file", passphraseFile, "--store",
      "keyfile",
    ])
    XCTAssertEqual(refused.status, 64)
    XCTAssertTrue(refused.error.contains("a merge keeps its key store"), refused.error)

    let merged = try vault([
      "--home", home, "restore", copyBackups + "/" + copyBundle, "--passphrase-file", passphraseFile, "--json",
    ])
    XCTAssertEqual(merged.status, 0, merged.error)
    let report = try json(merged)
    let containers = try XCTUnwrap(report["containers"] as? [[String: Any]])
    XCTAssertEqual(containers.map { $0["action"] as? String }, ["merged", "merged"])
    let kept = try XCTUnwrap(containers[0]["kept_for_review"] as? [[String: Any]])
    XCTAssertEqual(kept.map { $0["id"] as? String }, [id])
    XCTAssertEqual(kept.map { $0["from"] as? String }, ["bundle"], "the home's copy changed later and won")
    let keptAs = try XCTUnwrap(kept.first?["kept_as"] as? String)
    XCTAssertFalse(merged.outputText.contains("copy's") || merged.outputText.contains("home's"), "no payload printed")

    let review = try vault(["--home", home, "queue", "list", "--state", "review", "--json"])
    XCTAssertTrue(review.outputText.contains(keptAs), review.error)
    XCTAssertTrue(review.outputText.contains("merge-superseded"))
    XCTAssertEqual(try vault(["--home", home, "queue", "resend", keptAs]).status, 0)

    // Text form, merging again: nothing new.
    let again = try vault([
      "--home", home, "restore", copyBackups + "/" + copyBundle, "--passphrase-file", passphraseFile,
    ])
    XCTAssertEqual(again.status, 0, again.error)
    let text = again.outputText
    XCTAssertTrue(text.contains("Merged bundle"), text)
    XCTAssertTrue(text.contains("0 added, 0 updated"), text)
    XCTAssertFalse(text.contains("kept for review:"), text)
  }

  func testWithoutAPassphraseFileItAsksOnTheTerminalWithoutEchoOrRefuses() throws {
    let noTerminal = try vault(["--home", home, "backup", "--to", backups])
    XCTAssertEqual(noTerminal.status, 2)
    XCTAssertTrue(noTerminal.error.contains("--passphrase-file"), noTerminal.error)
    XCTAssertEqual(try bundles(), [])

    XCTAssertEqual(
      try vault(["--home", home, "backup", "--to", backups, "--passphrase-file", passphraseFile]).status, 0)
    let bundle = try XCTUnwrap(try bundles().first)
    // A pseudo-terminal through script(1); the passphrase is typed once the prompt turned echo off.
    let command = "'\(vaultBinary())' backup --verify '\(bundle)'"
    let typed = try Spawn.run(
      "/bin/sh", ["-c", "(sleep 1; printf 'a long passphrase\\n') | script -qec \"\(command)\" /dev/null"])
    XCTAssertEqual(typed.status, 0, typed.outputText + typed.error)
    XCTAssertTrue(typed.outputText.contains("Backup passphrase:"), typed.outputText)
    XCTAssertTrue(typed.outputText.contains("Verified bundle"), typed.outputText)
    XCTAssertFalse(typed.outputText.contains("a long passphrase"), "the passphrase was echoed")
  }

  /// A passphrase file that is a pipe (`<(cmd)`, /dev/stdin) or far too large is refused in the
  /// passphrase's own terms (exit 2, nothing written), not as a record's input would be.
  func testAPassphraseFileThatIsAPipeOrTooLargeIsRefusedInItsOwnTerms() throws {
    let fifo = temporary.sub("passphrase-fifo")
    XCTAssertEqual(mkfifo(fifo, 0o600), 0)
    let piped = try vault(["--home", home, "backup", "--to", backups, "--passphrase-file", fifo])
    XCTAssertEqual(piped.status, 2, piped.error)
    XCTAssertTrue(piped.error.contains("passphrase file \(fifo) is not a regular file"), piped.error)
    XCTAssertFalse(piped.error.contains("standard input"), piped.error)
    let large = temporary.sub("passphrase-large")
    try String(repeating: "x", count: 70_000).write(toFile: large, atomically: true, encoding: .utf8)
    let tooLong = try vault(["--home", home, "backup", "--to", backups, "--passphrase-file", large])
    XCTAssertEqual(tooLong.status, 2, tooLong.error)
    XCTAssertTrue(tooLong.error.contains("larger than 64 KiB"), tooLong.error)
    XCTAssertFalse(tooLong.error.contains("1 GiB"), tooLong.error)
    XCTAssertEqual(try bundles(), [])
  }

  func testUsageErrors() throws {
    XCTAssertEqual(try vault(["--home", home, "backup"]).status, 64)
    XCTAssertEqual(try vault(["--home", home, "backup", "--to", backups, "--keep", "0"]).status, 64)
    XCTAssertEqual(try vault(["backup", "--verify", "x", "--to", backups]).status, 64)
    XCTAssertEqual(try vault(["restore"]).status, 64)
    XCTAssertEqual(try vault(["restore", "x", "--store", "cloud"]).status, 64)
    let missing = try vault(["backup", "--verify", temporary.sub("nothing"), "--passphrase-file", passphraseFile])
    XCTAssertEqual(missing.status, 2, missing.error)
  }

  func testStatusShowsTheLastBackupAsFoundOnDisk() throws {
    let before = try vault(["--home", home, "status"])
    XCTAssertTrue(before.outputText.contains("backup:   none found"), before.outputText)
    XCTAssertTrue(try json(try vault(["--home", home, "status", "--json"]))["last_backup"] is NSNull)

    let written = try vault(["--home", home, "backup", "--to", backups, "--passphrase-file", passphraseFile, "--json"])
    let bundle = try XCTUnwrap(try json(written)["bundle"] as? String)
    let status = try vault(["--home", home, "status"])
    XCTAssertTrue(status.outputText.contains("backup:   \(bundle)"), status.outputText)
    XCTAssertTrue(status.outputText.contains("hashes match now"), status.outputText)
    let last = try XCTUnwrap(
      try json(try vault(["--home", home, "status", "--json"]))["last_backup"] as? [String: Any])
    XCTAssertEqual(last["bundle"] as? String, bundle)
    XCTAssertEqual(last["intact"] as? Bool, true)
    XCTAssertTrue(last["problem"] is NSNull)
    XCTAssertEqual(last["bundles"] as? Int, 1)

    // Damage on disk shows at once: status reads the bundle, not a record of the backup.
    var bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: bundle)))
    bytes[bytes.count - 10] ^= 0x01
    try Data(bytes).write(to: URL(fileURLWithPath: bundle))
    let damaged = try XCTUnwrap(
      try json(try vault(["--home", home, "status", "--json"]))["last_backup"] as? [String: Any])
    XCTAssertEqual(damaged["intact"] as? Bool, false)
    XCTAssertTrue((damaged["problem"] as? String)?.contains("container 2") == true, "\(damaged)")
    XCTAssertTrue(try vault(["--home", home, "status"]).outputText.contains("DAMAGED"))

    try FileManager.default.removeItem(atPath: bundle)
    XCTAssertTrue(try vault(["--home", home, "status"]).outputText.contains("backup:   none found"))
  }

  func testDoctorWarnsWhileAKeyVersionLivesOnlyInTheKeyStore() throws {
    func backupCheck() throws -> [String: Any] {
      let run = try vault(["--home", home, "doctor", "--json"])
      let checks = try XCTUnwrap(try json(run)["checks"] as? [[String: Any]])
      return try XCTUnwrap(checks.first { $0["name"] as? String == "backup" }, run.outputText)
    }
    var check = try backupCheck()
    XCTAssertEqual(check["status"] as? String, "warning")
    XCTAssertTrue((check["detail"] as? String)?.contains("no backup bundle") == true, "\(check)")
    XCTAssertEqual(
      try vault(["--home", home, "backup", "--to", backups, "--passphrase-file", passphraseFile]).status, 0)
    check = try backupCheck()
    XCTAssertEqual(check["status"] as? String, "ok", "\(check)")
    XCTAssertEqual(try vault(["--home", home, "rotate"]).status, 0)
    check = try backupCheck()
    XCTAssertEqual(check["status"] as? String, "warning")
    XCTAssertTrue(
      (check["detail"] as? String)?.contains("key version 2 exists only in the keyfile") == true, "\(check)")
    XCTAssertTrue((check["detail"] as? String)?.contains("does not hold it") == true, "\(check)")
  }

  /// Another process enqueues all along; every record it was told was stored before the backup
  /// started is in the bundle, and opens after a restore.
  func testABackupWhileAnotherProcessEnqueuesHoldsEveryConfirmedRecord() throws {
    let log = temporary.sub("writer.log")
    let stop = temporary.sub("stop")
    let writer = Process()
    writer.executableURL = URL(fileURLWithPath: "/bin/sh")
    writer.arguments = [
      "-c",
      "i=0; while [ ! -e \"$STOP\" ]; do echo \"during $i\" | \"$VAULT\" --home \"$HOME_DIR\" queue put --queue w "
        + ">> \"$LOG\" || exit 1; i=$((i+1)); done",
    ]
    writer.environment = environment([
      "STOP": stop, "VAULT": vaultBinary(), "HOME_DIR": home, "LOG": log,
    ])
    try writer.run()
    func confirmed() throws -> [String] {
      let text = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
      return text.split(separator: "\n").filter { $0.hasPrefix("stored ") }.map { String($0.dropFirst(7)) }
    }
    while try confirmed().count < 5 { usleep(20_000) }
    let before = try confirmed()
    let written = try vault(
      ["--home", home, "backup", "--to", backups, "--passphrase-file", passphraseFile, "--json"])
    XCTAssertTrue(FileManager.default.createFile(atPath: stop, contents: nil))
    writer.waitUntilExit()
    XCTAssertEqual(written.status, 0, written.error)
    XCTAssertEqual(writer.terminationStatus, 0, "the writer never failed while the backup ran")
    let bundle = try XCTUnwrap(try json(written)["bundle"] as? String)
    let restoredHome = temporary.sub("restored")
    let restored = try vault([
      "restore", bundle, "--passphrase-file", passphraseFile, "--into", restoredHome, "--store", "keyfile",
      "--keyfile", temporary.sub("k2/v.keys"),
    ])
    XCTAssertEqual(restored.status, 0, restored.error)
    let list = try vault(["--home", restoredHome, "queue", "list", "--queue", "w", "--json"])
    let ids = Set(
      (try JSONSerialization.jsonObject(with: Data(list.output)) as? [[String: Any]] ?? []).compactMap {
        $0["id"] as? String
      })
    XCTAssertGreaterThanOrEqual(ids.count, before.count)
    for id in before { XCTAssertTrue(ids.contains(id), "confirmed before the backup, missing from it: \(id)") }
  }

  /// A backup killed while its work directory holds container snapshots leaves it behind (no
  /// deinit runs); the next backup into that directory, and the next `--verify` with that
  /// `TMPDIR`, remove it once it is a minute old and its lock is free.
  func testWorkDirectoriesOfAKilledBackupAreRemovedByTheNextRun() throws {
    func leftovers(_ directory: String) -> [String] {
      ((try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []).filter {
        $0.hasPrefix(".vault-backup-work-")
      }
    }
    // The passphrase's scrypt runs (about half a second) while the snapshots are in the work
    // directory: killed then. Tried again if the backup was done before it was seen.
    var killedOne = false
    for _ in 0..<5 where !killedOne {
      let child = try Spawn.start(
        vaultBinary(), ["--home", home, "backup", "--to", backups, "--passphrase-file", passphraseFile])
      let deadline = Date().addingTimeInterval(20)
      while Date() < deadline, child.exitStatus(within: 0) == nil {
        if let work = leftovers(backups).first,
          FileManager.default.fileExists(atPath: backups + "/" + work + "/1.sqlite")
        {
          child.kill(SIGKILL)
          killedOne = child.exitStatus(within: 10) == 128 + SIGKILL
          break
        }
        usleep(1_000)
      }
      _ = child.exitStatus(within: 10)
      _ = child.finish()
    }
    XCTAssertTrue(killedOne, "a backup was killed with its snapshots in the work directory")
    let left = try XCTUnwrap(leftovers(backups).first)
    XCTAssertEqual(leftovers(backups).count, 1)

    // The same leftover in a TMPDIR, for `--verify`; both aged past the minute.
    let tmp = temporary.sub("tmp")
    try FileManager.default.createDirectory(atPath: tmp, withIntermediateDirectories: true)
    try FileManager.default.copyItem(atPath: backups + "/" + left, toPath: tmp + "/" + left)
    var old = [timeval(tv_sec: time(nil) - 120, tv_usec: 0), timeval(tv_sec: time(nil) - 120, tv_usec: 0)]
    XCTAssertEqual(utimes(backups + "/" + left, &old), 0)
    XCTAssertEqual(utimes(tmp + "/" + left, &old), 0)
    XCTAssertEqual(chmod(passphraseFile, 0o600), 0)

    let written = try vault(
      ["--home", home, "backup", "--to", backups, "--passphrase-file", passphraseFile, "--json"])
    XCTAssertEqual(written.status, 0, written.error)
    XCTAssertEqual(leftovers(backups), [], "the killed backup's work directory is gone")
    let bundle = try XCTUnwrap(try json(written)["bundle"] as? String)
    XCTAssertEqual(leftovers(tmp), [left], "another directory's leftovers are not touched")
    let verified = try vault(
      ["backup", "--verify", bundle, "--passphrase-file", passphraseFile], environment: environment(["TMPDIR": tmp]))
    XCTAssertEqual(verified.status, 0, verified.error)
    XCTAssertEqual(leftovers(tmp), [])
  }
}

extension BackupCLITests {
  /// Ctrl-C (or SIGTERM, SIGHUP) during a backup left its work directory, with the containers'
  /// snapshots, until the next backup a minute later (found by an outside review). The work
  /// directory is now removed, and vault ends by the signal. strace holds the bundle's fsync for
  /// 5 s, so the signal comes while the backup is under way.
  func testAStoppedBackupRemovesItsWorkDirectory() throws {
    let strace = try Strace.path()
    for (signal, name) in [(SIGINT, "SIGINT"), (SIGTERM, "SIGTERM")] {
      // strace's log tells a death by the signal ("+++ killed by SIGINT +++") from an exit with
      // 128 + its number, which look alike to Spawn (and to a shell).
      let log = temporary.sub("strace-\(name).log")
      let child = try Spawn.start(
        strace,
        [
          "-f", "-o", log, "-e", "trace=fsync", "-e", "inject=fsync:delay_enter=5s", vaultBinary(), "--home",
          home, "backup", "--to", backups, "--passphrase-file", passphraseFile,
        ], environment: Strace.environment(nil))
      // vault is strace's child; it has begun once its work directory is there.
      let deadline = Date().addingTimeInterval(30)
      var vaultPID: Int32?
      var working = false
      while !working, Date() < deadline {
        Thread.sleep(forTimeInterval: 0.02)
        let children = try? String(contentsOfFile: "/proc/\(child.pid)/task/\(child.pid)/children", encoding: .utf8)
        vaultPID = children.flatMap { Int32($0.split(separator: " ").first ?? "") }
        working = ((try? FileManager.default.contentsOfDirectory(atPath: backups)) ?? []).contains {
          $0.hasPrefix(".vault-backup-work-")
        }
      }
      let pid = try XCTUnwrap(vaultPID, name)
      XCTAssertTrue(working, name)
      Thread.sleep(forTimeInterval: 0.3)
      kill(pid, signal)
      let stopped = child.finish()
      XCTAssertEqual(stopped.status, 128 + signal, "\(name): \(stopped.error)")
      let traced = try String(contentsOfFile: log, encoding: .utf8)
      XCTAssertTrue(traced.contains("+++ killed by \(name) +++"), "\(name): vault ended by the signal itself")
      XCTAssertTrue(
        stopped.error.contains("vault: the backup was stopped (\(name)); its work directory was removed"), stopped.error
      )
      XCTAssertFalse(stopped.error.contains("Error:"), "\(name): no error from the removed work: \(stopped.error)")
      XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: backups), [], name)
    }
    // The next backup runs as usual.
    let backup = try vault(["--home", home, "backup", "--to", backups, "--passphrase-file", passphraseFile])
    XCTAssertEqual(backup.status, 0, backup.error)
  }
}

extension BackupCLITests {
  /// A backup whose bundle was written and verified, but whose directory could not be added to
  /// the home's list (`backup-directories`, what `status` reads), exited 2 as if nothing had been
  /// backed up. Now it exits 0 with a warning (also in `--json`'s `warnings`), and the bundle is
  /// there and verifies. Here strace fails every rename (the list is written by a rename), and a
  /// directory whose name holds a newline (the list holds one path a line) is not listed at all.
  func testABackupWhoseDirectoryIsNotListedSucceedsWithAWarning() throws {
    let failed = try vaultFailing(
      "rename", with: "EIO", when: "1+",
      ["--home", home, "backup", "--to", backups, "--passphrase-file", passphraseFile, "--json"])
    XCTAssertEqual(failed.status, 0, failed.error)
    XCTAssertTrue(
      failed.error.contains("vault: warning: \(backups) could not be added to \(home)/backup-directories (rename "),
      failed.error)
    let report = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(failed.output)) as? [String: Any])
    XCTAssertEqual((report["warnings"] as? [String])?.count, 1, failed.outputText)
    let bundle = try XCTUnwrap(report["bundle"] as? String)
    let verified = try vault(["backup", "--verify", bundle, "--passphrase-file", passphraseFile])
    XCTAssertEqual(verified.status, 0, verified.error)

    let odd = temporary.sub("odd\nname")
    try FileManager.default.createDirectory(atPath: odd, withIntermediateDirectories: false)
    XCTAssertEqual(chmod(odd, 0o700), 0)
    let listed = try vault(["--home", home, "backup", "--to", odd, "--passphrase-file", passphraseFile])
    XCTAssertEqual(listed.status, 0, listed.error)
    XCTAssertTrue(listed.error.contains("odd\\u{a}name holds a newline, so it was not added"), listed.error)
    let list = (try? String(contentsOfFile: home + "/backup-directories", encoding: .utf8)) ?? ""
    XCTAssertFalse(list.contains("odd"), list)
  }
}

extension BackupCLITests {
  /// `backup --keep` removed a file that only had a bundle's name (`…99991231T000000.000Z…`, five
  /// bytes of junk), and `status` showed a note named `vault-ID-notes.vaultbackup` as the newest
  /// backup, DAMAGED, with `created_at` "notes" (found by an outside operator review). Now only
  /// files whose header and manifest read as this vault's bundle are counted, pruned or shown.
  func testFilesThatOnlyHaveABundlesNameAreNeitherPrunedNorShown() throws {
    let status = try vault(["--home", home, "status", "--json"])
    let vaultID = try XCTUnwrap(
      (try JSONSerialization.jsonObject(with: Data(status.output)) as? [String: Any])?["vault_id"] as? String)
    let backup = ["--home", home, "backup", "--to", backups, "--passphrase-file", passphraseFile]
    XCTAssertEqual(try vault(backup).status, 0)
    let notes = backups + "/vault-\(vaultID)-notes.vaultbackup"
    let junk = backups + "/vault-\(vaultID)-99991231T000000.000Z.vaultbackup"
    try "my notes\n".write(toFile: notes, atomically: true, encoding: .utf8)
    try "junk\n".write(toFile: junk, atomically: true, encoding: .utf8)
    let kept = try vault(backup + ["--keep", "1", "--json"])
    XCTAssertEqual(kept.status, 0, kept.error)
    let report = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(kept.output)) as? [String: Any])
    let newest = try XCTUnwrap(report["bundle"] as? String)
    XCTAssertEqual((report["removed"] as? [String])?.count, 1, "the older real bundle: \(kept.outputText)")
    let left = try FileManager.default.contentsOfDirectory(atPath: backups).sorted()
    XCTAssertEqual(left, [junk, newest, notes].map { ($0 as NSString).lastPathComponent }.sorted())

    let after = try vault(["--home", home, "status", "--json"])
    let last = try XCTUnwrap(
      (try JSONSerialization.jsonObject(with: Data(after.output)) as? [String: Any])?["last_backup"] as? [String: Any])
    XCTAssertEqual(last["bundle"] as? String, newest)
    XCTAssertEqual(last["intact"] as? Bool, true)
  }
}
