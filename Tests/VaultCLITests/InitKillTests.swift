import Foundation
import VaultKeys
import VaultTestSupport
import XCTest

/// `vault init` killed with SIGKILL at each of its renames, syncs and writes in turn (strace
/// injects the signal at the Nth such call), then run again with the same arguments: the rerun
/// makes the vault, or, once the killed one had put its manifest in place, says a vault exists
/// (opening it finishes the pending first key). A killed init sealed nothing, so what it left (a
/// manifest temporary file in the home, a keyfile with no key, Secret Service records with no
/// key) never blocks the retry.
final class InitKillTests: XCTestCase {
  var temporary: TemporaryDirectory!
  var home: String { temporary.sub("home") }
  /// Default keyfiles (`--store keyfile` without `--keyfile`) go here, not into the user's config.
  var env: [String: String] { environment(["XDG_CONFIG_HOME": temporary.sub("config")]) }

  override func setUp() { temporary = TemporaryDirectory() }

  override func tearDown() {
    removeSecretServiceItems()
    temporary = nil
  }

  private func removeSecretServiceItems() {
    // Each clear removes the items it finds: an init writes the integrity key, manifest copies and a key.
    for _ in 0..<6 { _ = try? Spawn.run("/usr/bin/secret-tool", ["clear", "home", home]) }
  }

  /// Runs `init` with `arguments` killed at the `step`th call of `calls`.
  private func killedInit(_ arguments: [String], calls: String, step: Int) throws -> Spawned {
    try vaultKilled(at: calls, step: step, ["--home", home, "init"] + arguments, environment: env)
  }

  /// Kills `init` at the 1st, 2nd, … call of `calls` until one runs to the end, each time from
  /// nothing, and runs it again after each kill: it succeeds, or a manifest was already in place.
  /// - Returns: how many kills there were.
  private func killEachStep(of calls: String, init arguments: [String], limit: Int = 80) throws -> Int {
    var kills = 0
    for step in 1...limit {
      try? FileManager.default.removeItem(atPath: home)
      try? FileManager.default.removeItem(atPath: temporary.sub("keys"))
      try? FileManager.default.removeItem(atPath: temporary.sub("config"))
      removeSecretServiceItems()
      let killed = try killedInit(arguments, calls: calls, step: step)
      if killed.status == 0 { break }
      XCTAssertEqual(killed.status, 128 + SIGKILL, "\(calls) #\(step): \(killed.error)")
      kills += 1
      let manifestInPlace = ManifestFile.exists(home: home)
      if manifestInPlace, arguments.contains("--keyfile") {
        // That home is a vault now (its next open finishes the first key in this keyfile):
        // another home's init must not take the keyfile for debris (review).
        let other = try vault(["--home", temporary.sub("other"), "init"] + arguments, environment: env)
        XCTAssertNotEqual(other.status, 0, "\(calls) #\(step): \(other.outputText)")
        try? FileManager.default.removeItem(atPath: temporary.sub("other"))
      }
      let rerun = try vault(["--home", home, "init"] + arguments, environment: env)
      if manifestInPlace {
        XCTAssertTrue(rerun.error.contains("already"), "\(calls) #\(step): \(rerun.error)")
      } else {
        XCTAssertEqual(rerun.status, 0, "\(calls) #\(step): \(rerun.error)")
      }
      let sealed = try vault(
        ["--home", home, "seal", "--context", "c", "--armor"], input: Array("x".utf8), environment: env)
      XCTAssertEqual(sealed.status, 0, "\(calls) #\(step): the vault works: \(sealed.error)")
      let keys = (try? FileManager.default.contentsOfDirectory(atPath: temporary.sub("keys"))) ?? []
      XCTAssertEqual(keys.filter { $0.contains(".tmp-") }, [], "\(calls) #\(step): no keyfile temporary is left")
    }
    return kills
  }

  /// The review's case (a): killed just before the manifest's temporary file is renamed into
  /// place; the home then holds `vault.lock` and `manifest.json.tmp-*`, and no vault ever existed.
  func testInitKilledBeforeItsManifestIsRenamedIsRetried() throws {
    let killed = try killedInit(["--store", "keyfile"], calls: "rename,renameat,renameat2", step: 3)
    XCTAssertEqual(killed.status, 128 + SIGKILL, killed.error)
    let left = try FileManager.default.contentsOfDirectory(atPath: home)
    XCTAssertTrue(left.contains { $0.hasPrefix("manifest.json.tmp-") }, "\(left)")
    XCTAssertFalse(ManifestFile.exists(home: home))
    let rerun = try vault(["--home", home, "init", "--store", "keyfile"], environment: env)
    XCTAssertEqual(rerun.status, 0, rerun.error)
    XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: home).filter { $0.contains(".tmp-") }, [])
  }

  /// The review's case (b): `--keyfile P` killed at the second rename leaves P holding the
  /// integrity key and no key; it protects nothing, and the rerun replaces it.
  func testInitKilledBeforeItStoredAKeyIsRetriedOverItsKeyfile() throws {
    let keyfile = temporary.sub("keys/v.keys")
    let arguments = ["--store", "keyfile", "--keyfile", keyfile]
    let killed = try killedInit(arguments, calls: "rename,renameat,renameat2", step: 2)
    XCTAssertEqual(killed.status, 128 + SIGKILL, killed.error)
    XCTAssertTrue(FileManager.default.fileExists(atPath: keyfile))
    let rerun = try vault(["--home", home, "init"] + arguments, environment: env)
    XCTAssertEqual(rerun.status, 0, rerun.error)
    let manifest = try ManifestFile.read(home: home).manifest
    XCTAssertEqual(try KeyfileStore(path: keyfile).storedVersions(keyring: XCTUnwrap(manifest.keyringID)), [1])
  }

  func testAKeyfileInitKilledAtAnyStepIsRetried() throws {
    let arguments = ["--store", "keyfile", "--keyfile", temporary.sub("keys/v.keys")]
    var kills = 0
    for calls in ["rename,renameat,renameat2", "fsync,fdatasync"] {
      kills += try killEachStep(of: calls, init: arguments)
    }
    kills += try killEachStep(of: "write", init: arguments, limit: 12)
    XCTAssertGreaterThan(kills, 20, "init was killed at every step")
  }

  /// `init` failing (EIO, not a kill) at each sync in turn: the retry works, and the failed run
  /// leaves no keyfile that holds no key. Storing the integrity key was outside the undo, so a
  /// failed fsync of the keyfile's directory left `<id>.keys` with only that record, under an id
  /// no vault has (the retry picks a new one), for good.
  func testADefaultKeyfileInitFailingAtEachSyncLeavesNoKeylessKeyfile() throws {
    let keys = temporary.sub("config/vault-keys")
    var failures = 0
    for step in 1...60 {
      try? FileManager.default.removeItem(atPath: home)
      try? FileManager.default.removeItem(atPath: temporary.sub("config"))
      let failed = try vaultFailing(
        "fsync,fdatasync", with: "EIO", when: "\(step)", ["--home", home, "init", "--store", "keyfile"],
        environment: env)
      if failed.status == 0 { break }
      failures += 1
      XCTAssertEqual(failed.status, 1, "fsync #\(step): \(failed.error)")
      for name in (try? FileManager.default.contentsOfDirectory(atPath: keys)) ?? [] {
        let keyring = try XCTUnwrap(KeyringID(hex: String(name.prefix(16))), "fsync #\(step): \(name)")
        let versions = try KeyfileStore(path: keys + "/" + name).storedVersions(keyring: keyring)
        XCTAssertFalse(versions.isEmpty, "fsync #\(step): \(name) holds no key and no vault uses it")
      }
      if !ManifestFile.exists(home: home) {
        let rerun = try vault(["--home", home, "init", "--store", "keyfile"], environment: env)
        XCTAssertEqual(rerun.status, 0, "fsync #\(step): \(rerun.error)")
      } else if try vault(["--home", home, "status"], environment: env).status == 0 {
        // A vault that works was made: the failure says so, so nobody runs init again (a
        // fault-injection review saw only "fsync … Input/output error" at some steps).
        XCTAssertTrue(
          failed.error.contains("was created in") || failed.error.contains("created vault"),
          "fsync #\(step): \(failed.error)")
      }
    }
    XCTAssertGreaterThan(failures, 5)
  }

  func testADefaultKeyfileInitKilledAtAnyRenameIsRetried() throws {
    XCTAssertGreaterThan(try killEachStep(of: "rename,renameat,renameat2", init: ["--store", "keyfile"]), 5)
  }

  /// With the Secret Service, init failing (EIO, not a kill) at each rename in turn. The manifest
  /// write that makes the first key active fails after that key is stored: the failed init
  /// removed its manifest, and every retry was then refused as orphaned keys ("restore
  /// manifest.json from a backup", which never existed) though nothing was ever sealed. Now the
  /// manifest stays once the key is stored, and the vault works (its next open finishes the key).
  func testASecretServiceInitFailingAtEachRenameLeavesAVaultOrARetry() throws {
    try XCTSkipUnless(TestKeyring.isAvailable, "no private Secret Service; run the tests via tools/test.sh")
    var failures = 0
    for step in 1...12 {
      try? FileManager.default.removeItem(atPath: home)
      removeSecretServiceItems()
      let failed = try vaultFailing(
        "rename,renameat,renameat2", with: "EIO", when: "\(step)",
        ["--home", home, "init", "--store", "secret-service"],
        environment: env)
      if failed.status == 0 { break }
      XCTAssertEqual(failed.status, 1, "rename #\(step): \(failed.error)")
      failures += 1
      let manifestInPlace = ManifestFile.exists(home: home)
      let rerun = try vault(["--home", home, "init", "--store", "secret-service"], environment: env)
      if manifestInPlace {
        XCTAssertTrue(rerun.error.contains("already exists"), "rename #\(step): \(rerun.error)")
      } else {
        XCTAssertEqual(rerun.status, 0, "rename #\(step): \(rerun.error)")
      }
      let sealed = try vault(
        ["--home", home, "seal", "--context", "c", "--armor"], input: Array("x".utf8), environment: env)
      XCTAssertEqual(sealed.status, 0, "rename #\(step): the vault works: \(sealed.error)")
    }
    XCTAssertGreaterThanOrEqual(failures, 3, "init failed at each of its manifest renames")
  }

  /// With the Secret Service, a killed init leaves the integrity key and a manifest copy (no key)
  /// under a new vault id for this home: not orphaned keys, so the retry is not refused.
  func testASecretServiceInitKilledAtAnyStepIsRetried() throws {
    try XCTSkipUnless(TestKeyring.isAvailable, "no private Secret Service; run the tests via tools/test.sh")
    let arguments = ["--store", "secret-service"]
    XCTAssertGreaterThan(
      try killEachStep(of: "rename,renameat,renameat2", init: arguments)
        + killEachStep(of: "fsync,fdatasync", init: arguments), 5)
  }
}
