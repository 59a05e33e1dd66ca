import Foundation
import Vault
import VaultKeys
import VaultQueue
import VaultTestSupport
import XCTest

/// `vault recover` run as an operator would, against real keyfiles in the default keyfile
/// directory (`$XDG_CONFIG_HOME/vault-keys`) and the test harness's Secret Service.
final class RecoverCommandTests: XCTestCase {
  var temporary: TemporaryDirectory!
  var home: String { temporary.sub("home") }
  var keyDirectory: String { temporary.sub("config/vault-keys") }
  var manifest: String { home + "/manifest.json" }
  /// Every run sees the temporary configuration directory, so the default keyfile lands there.
  var env: [String: String] { environment(["XDG_CONFIG_HOME": temporary.sub("config"), "VAULT_HOME": nil]) }

  override func setUp() { temporary = TemporaryDirectory() }
  override func tearDown() { temporary = nil }

  private let payloads = ["first order", "second order", "third order"]  // sorted, as `deliveredPayloads` returns them

  private func run(_ arguments: [String], input: [UInt8] = []) throws -> Spawned {
    try vault(["--home", home] + arguments, input: input, environment: env)
  }

  /// A keyfile vault at `home` (default keyfile path) with three records in its default container,
  /// rotated once so that the manifest has changed since `init`. Returns its vault id.
  @discardableResult
  private func keyfileVaultWithRecords() throws -> String {
    let created = try run(["init", "--store", "keyfile", "--json"])
    XCTAssertEqual(created.status, 0, created.error)
    let vaultID = try XCTUnwrap(
      (try JSONSerialization.jsonObject(with: Data(created.output)) as? [String: Any])?["vault_id"] as? String)
    for payload in payloads {
      let put = try run(["queue", "put", "--queue", "orders"], input: Array(payload.utf8))
      XCTAssertEqual(put.status, 0, put.error)
    }
    let rotated = try run(["rotate"])
    XCTAssertEqual(rotated.status, 0, rotated.error)
    return vaultID
  }

  /// The payloads of the default container's records, opened through the recovered manifest (the
  /// library, in this process) and given back unclaimed.
  private func deliveredPayloads() throws -> [String] {
    let container = try QueueContainer(path: home + "/queue.sqlite", vault: try Vault.open(home: home))
    let records = try container.claim(queue: "orders", maxCount: 10)
    try container.release(records.map(\.id))
    return records.map { String(decoding: $0.payloadBytes, as: UTF8.self) }.sorted()
  }

  private func contents(_ path: String) -> Data? { FileManager.default.contents(atPath: path) }

  /// The manifest `text` with another epoch: still a valid manifest, but its MAC no longer verifies.
  private static func changingItsEpoch(_ text: String) -> String {
    text.replacingOccurrences(of: #""epoch" : [0-9]+"#, with: #""epoch" : 999"#, options: .regularExpression)
  }

  func testALostManifestIsWrittenBackFromTheKeyfilesCopyAndEveryRecordOpens() throws {
    let vaultID = try keyfileVaultWithRecords()
    let written = try XCTUnwrap(contents(manifest))
    let keyfile = keyDirectory + "/\(vaultID).keys"
    let keys = try XCTUnwrap(contents(keyfile))
    XCTAssertEqual(unlink(manifest), 0)

    let lost = try run(["status"])
    XCTAssertEqual(lost.status, 2, lost.error)
    XCTAssertTrue(lost.error.contains("`vault recover` writes its manifest back"), lost.error)

    let recovered = try run(["recover"])
    XCTAssertEqual(recovered.status, 0, recovered.error)
    XCTAssertTrue(
      recovered.outputText.contains(
        "Recovered the manifest of vault \(vaultID) in \(home) from its copy in the keyfile \(keyfile)"),
      recovered.outputText)
    XCTAssertTrue(recovered.outputText.contains("Active key version: 2"), recovered.outputText)
    XCTAssertEqual(contents(manifest), written, "the store's copy is the manifest last written, byte for byte")
    XCTAssertEqual(contents(keyfile), keys, "no key was made or changed")
    var info = stat()
    XCTAssertEqual(stat(manifest, &info), 0)
    XCTAssertEqual(info.st_mode & 0o777, 0o600)
    XCTAssertEqual(try deliveredPayloads(), payloads)
    let rotated = try run(["rotate"])
    XCTAssertEqual(rotated.status, 0, rotated.error)
    XCTAssertEqual(try deliveredPayloads(), payloads, "the recovered vault rotates and still opens every record")
  }

  func testADamagedManifestIsReplacedAndKeptBesideTheRecoveredOne() throws {
    try keyfileVaultWithRecords()
    let written = try XCTUnwrap(contents(manifest))
    let text = String(decoding: written, as: UTF8.self)
    let tampered = Self.changingItsEpoch(text)
    XCTAssertNotEqual(tampered, text)
    for (damage, bytes) in [("corrupt", Data("{ not json".utf8)), ("tampered", Data(tampered.utf8))] {
      XCTAssertTrue(FileManager.default.createFile(atPath: manifest, contents: bytes))
      let refused = try run(["queue", "stats"])
      XCTAssertEqual(refused.status, 1, damage)
      XCTAssertTrue(
        refused.error.contains(damage == "corrupt" ? "is corrupt" : "fails its integrity check"), refused.error)
      XCTAssertTrue(refused.error.contains("`vault recover` writes back the copy"), refused.error)

      let recovered = try run(["recover", "--json"])
      XCTAssertEqual(recovered.status, 0, recovered.error)
      let json = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(recovered.output)) as? [String: Any])
      XCTAssertEqual(json["outcome"] as? String, "recovered")
      let kept = try XCTUnwrap(json["kept_damaged"] as? String, damage)
      XCTAssertTrue(kept.hasPrefix(manifest + ".damaged-"), kept)
      XCTAssertEqual(contents(kept), bytes, "the damaged file is kept as it was")
      XCTAssertEqual(contents(manifest), written, damage)
      XCTAssertEqual(try deliveredPayloads(), payloads, damage)
      XCTAssertEqual(unlink(kept), 0)
    }
  }

  func testAManifestThatVerifiesIsLeftAsItIs() throws {
    let vaultID = try keyfileVaultWithRecords()
    let written = try XCTUnwrap(contents(manifest))
    let result = try run(["recover"])
    XCTAssertEqual(result.status, 0, result.error)
    XCTAssertTrue(
      result.outputText.contains("The manifest of vault \(vaultID) in \(home) verifies; nothing was changed"),
      result.outputText)
    XCTAssertEqual(contents(manifest), written)
    XCTAssertFalse(try FileManager.default.contentsOfDirectory(atPath: home).contains { $0.contains("damaged") })
  }

  func testAManifestRefusedForItsModeOrALinkIsNotReplaced() throws {
    try keyfileVaultWithRecords()
    let written = try XCTUnwrap(contents(manifest))
    XCTAssertEqual(chmod(manifest, 0o664), 0)
    let open = try run(["recover"])
    XCTAssertEqual(open.status, 1)
    XCTAssertTrue(open.error.contains("chmod 600"), open.error)
    XCTAssertEqual(contents(manifest), written)
    XCTAssertEqual(chmod(manifest, 0o600), 0)

    XCTAssertEqual(rename(manifest, temporary.sub("elsewhere.json")), 0)
    XCTAssertEqual(symlink(temporary.sub("elsewhere.json"), manifest), 0)
    let link = try run(["recover"])
    XCTAssertEqual(link.status, 1)
    XCTAssertTrue(link.error.contains("is a symbolic link"), link.error)
    var info = stat()
    XCTAssertEqual(lstat(manifest, &info), 0)
    XCTAssertEqual(info.st_mode & S_IFMT, S_IFLNK, "the link is left for the operator")
  }

  func testWithTheKeysGoneTooNothingIsChangedAndTheErrorSaysWhereItLooked() throws {
    let vaultID = try keyfileVaultWithRecords()
    XCTAssertEqual(unlink(manifest), 0)
    XCTAssertEqual(rename(keyDirectory + "/\(vaultID).keys", temporary.sub("kept.keys")), 0)
    let before = try FileManager.default.contentsOfDirectory(atPath: home).sorted()

    let result = try run(["recover"])
    XCTAssertEqual(result.status, 1)
    XCTAssertTrue(result.error.contains("no key store holds a copy of the manifest"), result.error)
    XCTAssertTrue(result.error.contains("the keyfiles in \(keyDirectory)"), result.error)
    XCTAssertTrue(result.error.contains("Nothing was changed"), result.error)
    XCTAssertTrue(result.error.contains("vault restore BUNDLE --into \(home)"), result.error)
    XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: home).sorted(), before)
    XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: keyDirectory), [], "no key was made")

  }

  func testAKeyfileMovedByHandIsFoundWithKeyfileAndNamedWithTheMoveBack() throws {
    let vaultID = try keyfileVaultWithRecords()
    let keyfile = keyDirectory + "/\(vaultID).keys"
    XCTAssertEqual(unlink(manifest), 0)
    XCTAssertEqual(mkdir(temporary.sub("moved"), 0o700), 0)
    let moved = temporary.sub("moved/keys")
    XCTAssertEqual(rename(keyfile, moved), 0)

    let notFound = try run(["recover"])
    XCTAssertEqual(notFound.status, 1)
    XCTAssertTrue(notFound.error.contains("`vault recover --keyfile PATH`"), notFound.error)

    let named = try run(["recover", "--keyfile", moved])
    XCTAssertEqual(named.status, 1)
    XCTAssertTrue(named.error.contains("Move the keyfile back: mv \(moved) \(keyfile)"), named.error)
    XCTAssertFalse(FileManager.default.fileExists(atPath: manifest))

    XCTAssertEqual(rename(moved, keyfile), 0, "the move the error names")
    let recovered = try run(["recover"])
    XCTAssertEqual(recovered.status, 0, recovered.error)
    XCTAssertEqual(try deliveredPayloads(), payloads)
  }

  func testCopiesOfTwoVaultsNamingTheHomeAreNotChosenBetween() throws {
    let first = try keyfileVaultWithRecords()
    // The home is removed whole and a second vault made there; the first one's keyfile stays.
    try FileManager.default.removeItem(atPath: home)
    let second = try keyfileVaultWithRecords()
    let written = try XCTUnwrap(contents(manifest))
    XCTAssertEqual(unlink(manifest), 0)

    let both = try run(["recover"])
    XCTAssertEqual(both.status, 1)
    XCTAssertTrue(both.error.contains("vault \(first) in the keyfile"), both.error)
    XCTAssertTrue(both.error.contains("vault \(second) in the keyfile"), both.error)
    XCTAssertTrue(both.error.contains("`vault recover --vault-id ID`"), both.error)
    XCTAssertFalse(FileManager.default.fileExists(atPath: manifest))

    let chosen = try run(["recover", "--vault-id", second])
    XCTAssertEqual(chosen.status, 0, chosen.error)
    XCTAssertEqual(contents(manifest), written)
    XCTAssertEqual(try deliveredPayloads(), payloads)
  }

  /// A copy in the keyfile that fails its MAC (changed by something other than vault) is never
  /// written to the home, even when it is the only one.
  func testACopyThatFailsItsIntegrityCheckIsNotTaken() throws {
    let vaultID = try keyfileVaultWithRecords()
    let keyfile = keyDirectory + "/\(vaultID).keys"
    let text = String(decoding: try XCTUnwrap(contents(manifest)), as: UTF8.self)
    let forged = Array(Self.changingItsEpoch(text).utf8)
    XCTAssertNotEqual(forged, Array(text.utf8))
    let keyring = try XCTUnwrap(KeyringID(hex: vaultID))
    try forged.withUnsafeBytes {
      try KeyfileStore(path: keyfile).storeRecord(.manifestMirror, bytes: $0, keyring: keyring)
    }
    XCTAssertEqual(unlink(manifest), 0)

    let result = try run(["recover"])
    XCTAssertEqual(result.status, 1)
    XCTAssertTrue(result.error.contains("the keyfile \(keyfile) (no authentic manifest copy)"), result.error)
    XCTAssertFalse(FileManager.default.fileExists(atPath: manifest))
  }

  func testACopyOfAnotherHomeIsNotTaken() throws {
    try keyfileVaultWithRecords()
    let other = temporary.sub("other")
    XCTAssertEqual(mkdir(other, 0o700), 0)
    let result = try vault(["--home", other, "recover"], environment: env)
    XCTAssertEqual(result.status, 1)
    XCTAssertTrue(result.error.contains("(the manifest of the home \(home))"), result.error)
    XCTAssertFalse(FileManager.default.fileExists(atPath: other + "/manifest.json"))
  }

  /// `recover` killed with SIGKILL at each of its links, renames, syncs and writes in turn, over a
  /// damaged manifest: the home always holds a whole manifest, the damaged one or the recovered
  /// one, and running `recover` again finishes with every record readable.
  func testRecoverKilledAtEveryStepLeavesAWholeManifestAndARerunFinishes() throws {
    try keyfileVaultWithRecords()
    let written = try XCTUnwrap(contents(manifest))
    let damaged = Data("{ damaged".utf8)
    let calls = "link,linkat,rename,renameat,renameat2,fsync,fdatasync,write,pwrite64"
    var kills = 0
    for step in 1...60 {
      for name in try FileManager.default.contentsOfDirectory(atPath: home) where name.contains(".damaged-") {
        XCTAssertEqual(unlink(home + "/" + name), 0)
      }
      XCTAssertTrue(FileManager.default.createFile(atPath: manifest, contents: damaged))
      let killed = try vaultKilled(at: calls, step: step, ["--home", home, "recover"], environment: env)
      if killed.status == 0 { break }
      XCTAssertEqual(killed.status, 128 + SIGKILL, "#\(step): \(killed.error)")
      kills += 1
      let left = contents(manifest)
      XCTAssertTrue(left == damaged || left == written, "#\(step): the home holds a whole manifest")
      let rerun = try run(["recover"])
      XCTAssertEqual(rerun.status, 0, "#\(step): \(rerun.error)")
      XCTAssertEqual(contents(manifest), written, "#\(step)")
    }
    XCTAssertGreaterThan(kills, 2, "the kills reached the link and the rename")
    XCTAssertEqual(try deliveredPayloads(), payloads)
  }

  func testOptionsAreChecked() throws {
    let badID = try run(["recover", "--vault-id", "zz"])
    XCTAssertEqual(badID.status, 64)
    XCTAssertTrue(badID.error.contains("16 hex digits"), badID.error)
    let both = try run(["recover", "--keyfile", "k", "--store", "keyfile"])
    XCTAssertEqual(both.status, 64)
  }

  func testALostManifestIsWrittenBackFromTheSecretService() throws {
    try XCTSkipUnless(TestKeyring.isAvailable, "no private Secret Service; run the tests via tools/test.sh")
    let created = try run(["init", "--store", "secret-service", "--json"])
    XCTAssertEqual(created.status, 0, created.error)
    let vaultID = try XCTUnwrap(
      (try JSONSerialization.jsonObject(with: Data(created.output)) as? [String: Any])?["vault_id"] as? String)
    addTeardownBlock { _ = try? Spawn.run("/usr/bin/secret-tool", ["clear", "vault-id", vaultID]) }
    for payload in payloads {
      XCTAssertEqual(try run(["queue", "put", "--queue", "orders"], input: Array(payload.utf8)).status, 0)
    }
    XCTAssertEqual(try run(["rotate"]).status, 0)
    let written = try XCTUnwrap(contents(manifest))
    XCTAssertEqual(unlink(manifest), 0)

    try TestKeyring.lock()
    let locked = try run(["recover"])
    try TestKeyring.unlock()
    XCTAssertEqual(locked.status, 1)
    XCTAssertTrue(locked.error.contains("locked"), locked.error)
    XCTAssertFalse(FileManager.default.fileExists(atPath: manifest), "nothing is written while the keyring is locked")

    let recovered = try run(["recover"])
    XCTAssertEqual(recovered.status, 0, recovered.error)
    XCTAssertTrue(recovered.outputText.contains("from its copy in the Secret Service"), recovered.outputText)
    XCTAssertEqual(contents(manifest), written)
    XCTAssertEqual(try deliveredPayloads(), payloads)
  }
}
