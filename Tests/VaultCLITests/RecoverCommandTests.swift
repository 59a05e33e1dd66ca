import Foundation
import Vault
import VaultCrypto
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

  /// Asserts that `result` succeeded, that the home's manifest is `written` byte for byte, and that
  /// every record opens through it.
  private func assertRecovered(_ result: Spawned, as written: Data, file: StaticString = #filePath, line: UInt = #line)
    throws
  {
    XCTAssertEqual(result.status, 0, result.error, file: file, line: line)
    XCTAssertEqual(contents(manifest), written, file: file, line: line)
    XCTAssertEqual(try deliveredPayloads(), payloads, file: file, line: line)
  }

  /// Asserts that `result` failed with exit status 1 and that its error says each of `phrases`.
  private func assertRefused(
    _ result: Spawned, saying phrases: [String], file: StaticString = #filePath, line: UInt = #line
  ) {
    XCTAssertEqual(result.status, 1, result.error, file: file, line: line)
    for phrase in phrases {
      XCTAssertTrue(result.error.contains(phrase), "missing \"\(phrase)\" in: \(result.error)", file: file, line: line)
    }
  }

  /// Removes the home of vault `vaultID` and runs `makeNext` there while that vault's keyfile is
  /// set aside (`init` refuses a home whose vault's keyfile is still in the default directory),
  /// then puts the keyfile back: a vault removed from this path whose keyfile came back later.
  private func replaceVault(_ vaultID: String, by makeNext: () throws -> Void) throws {
    try FileManager.default.removeItem(atPath: home)
    let keyfile = keyDirectory + "/\(vaultID).keys"
    XCTAssertEqual(rename(keyfile, temporary.sub("aside.keys")), 0)
    try makeNext()
    XCTAssertEqual(rename(temporary.sub("aside.keys"), keyfile), 0)
  }

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
    XCTAssertTrue(lost.error.contains("(`vault recover` writes it back; `vault init` creates a vault)"), lost.error)

    if TestKeyring.isAvailable {
      // A keyring keeps the items of vaults whose homes were deleted long ago (a full test run
      // leaves dozens): they are told of, and stop nothing.
      let stray = [
        "xdg:schema", "org.vault.Key", "vault-id", "0123456789abcdef", "version", "1", "home",
        temporary.sub("deleted-long-ago"),
      ]
      let stored = try Spawn.run(
        "/usr/bin/secret-tool", ["store", "--label=stray"] + stray, input: Array(String(repeating: "x", count: 32).utf8)
      )
      XCTAssertEqual(stored.status, 0, stored.error)
      addTeardownBlock { _ = try? Spawn.run("/usr/bin/secret-tool", ["clear"] + stray) }
    }
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
      XCTAssertTrue(refused.error.contains("`vault recover` writes back that copy"), refused.error)

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
    assertRefused(
      result,
      saying: [
        "no key store holds a copy of the manifest",
        "the keyfiles in \(keyDirectory)",
        "Nothing was changed",
        "vault restore BUNDLE --into \(home)",
      ])
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

  /// Vault A's home was removed and vault B made at the same path; A's keyfile stays in the
  /// default directory. Both copies name the home: neither is taken unasked (a container's vault
  /// id is not authenticated, so the home's `queue.sqlite` is shown as a hint and does not choose),
  /// and naming B recovers it.
  func testCopiesOfTwoVaultsAreNotChosenBetweenAndTheContainerIsOnlyAHint() throws {
    let first = try keyfileVaultWithRecords()
    var second = ""
    try replaceVault(first) { second = try keyfileVaultWithRecords() }
    let written = try XCTUnwrap(contents(manifest))
    XCTAssertEqual(unlink(manifest), 0)

    let both = try run(["recover"])
    assertRefused(
      both,
      saying: [
        "more than one key store copy could be the manifest of \(home)",
        "vault \(first) in the keyfile",
        "\(home)/queue.sqlite records vault \(second)",
        "vault \(second) in the keyfile",
        "a container here records this vault",
        "`vault recover --vault-id ID`",
      ])
    XCTAssertFalse(FileManager.default.fileExists(atPath: manifest))

    let chosen = try run(["recover", "--vault-id", second])
    try assertRecovered(chosen, as: written)
  }

  /// The outside review's case: B's keyfile is outside the default directory, so the only copy
  /// found is A's, a vault whose home was removed. B's container contradicts it: it is not taken,
  /// and naming B's keyfile recovers B.
  func testACopyTheHomesContainersContradictIsNeverTaken() throws {
    let first = try keyfileVaultWithRecords()
    XCTAssertEqual(mkdir(temporary.sub("elsewhere"), 0o700), 0)
    let keyfile = temporary.sub("elsewhere/b.keys")
    try replaceVault(first) {
      XCTAssertEqual(try run(["init", "--store", "keyfile", "--keyfile", keyfile]).status, 0)
    }
    for payload in payloads {
      XCTAssertEqual(try run(["queue", "put", "--queue", "orders"], input: Array(payload.utf8)).status, 0)
    }
    let written = try XCTUnwrap(contents(manifest))
    XCTAssertEqual(unlink(manifest), 0)

    let refused = try run(["recover"])
    assertRefused(
      refused,
      saying: [
        "vault \(first) in the keyfile",
        "\(home)/queue.sqlite records vault ",
        "`vault recover --keyfile PATH`",
      ])
    XCTAssertFalse(refused.error.contains("vault restore"), "the keys are not gone: \(refused.error)")
    XCTAssertFalse(FileManager.default.fileExists(atPath: manifest))

    let recovered = try run(["recover", "--keyfile", keyfile])
    try assertRecovered(recovered, as: written)
  }

  /// A manifest that verifies but is another vault's than the home's container (a wrong copy put
  /// there) is reported, never replaced on a container's word; moved aside as the advice says,
  /// the home's own vault is recovered.
  func testAnotherVaultsManifestThatVerifiesIsReportedNotReplaced() throws {
    let vaultID = try keyfileVaultWithRecords()
    let written = try XCTUnwrap(contents(manifest))
    let otherHome = temporary.sub("otherhome")
    XCTAssertEqual(try vault(["--home", otherHome, "init", "--store", "keyfile"], environment: env).status, 0)
    let foreign = try XCTUnwrap(contents(otherHome + "/manifest.json"))
    XCTAssertTrue(FileManager.default.createFile(atPath: manifest, contents: foreign))

    let reported = try run(["recover"])
    XCTAssertEqual(reported.status, 1)
    XCTAssertTrue(
      reported.error.contains("the container \(home)/queue.sqlite records vault \(vaultID)"), reported.error)
    XCTAssertTrue(reported.error.contains("(mv \(manifest) \(manifest).wrong-"), reported.error)
    XCTAssertTrue(reported.error.contains("then `vault --home \(home) recover`)"), reported.error)
    XCTAssertEqual(contents(manifest), foreign, "nothing was changed")

    XCTAssertEqual(rename(manifest, manifest + ".wrong"), 0, "the move the advice names")
    let recovered = try run(["recover"])
    try assertRecovered(recovered, as: written)
  }

  /// The second outside review's attack: whoever can write the home plants another vault's
  /// container at `queue.sqlite`. A sound manifest is not replaced; with the manifest deleted too,
  /// no copy is taken on the planted container's word, and naming the vault recovers it.
  func testAPlantedContainerNeverChoosesAVault() throws {
    let vaultID = try keyfileVaultWithRecords()
    let written = try XCTUnwrap(contents(manifest))
    let otherHome = temporary.sub("otherhome")
    let other = try vault(["--home", otherHome, "init", "--store", "keyfile", "--json"], environment: env)
    let otherID = try XCTUnwrap(
      (try JSONSerialization.jsonObject(with: Data(other.output)) as? [String: Any])?["vault_id"] as? String)
    XCTAssertEqual(rename(home + "/queue.sqlite", temporary.sub("kept.sqlite")), 0)
    for suffix in ["-wal", "-shm"] { unlink(home + "/queue.sqlite" + suffix) }
    try FileManager.default.copyItem(atPath: otherHome + "/queue.sqlite", toPath: home + "/queue.sqlite")

    let intact = try run(["recover"])
    XCTAssertEqual(intact.status, 1)
    XCTAssertTrue(intact.error.contains("records vault \(otherID)"), intact.error)
    XCTAssertEqual(contents(manifest), written, "a sound manifest is not replaced")

    XCTAssertEqual(unlink(manifest), 0)
    let lost = try run(["recover"])
    XCTAssertEqual(lost.status, 1)
    XCTAssertTrue(lost.error.contains("name vault \(vaultID) to take the copy"), lost.error)
    XCTAssertFalse(FileManager.default.fileExists(atPath: manifest), "no copy is taken on a container's word")

    let named = try run(["recover", "--vault-id", vaultID])
    XCTAssertEqual(named.status, 0, named.error)
    XCTAssertEqual(contents(manifest), written)
  }

  /// A tampered manifest names a keyfile that does not exist: it is damaged, not an answer.
  func testATamperedStoreInTheManifestDoesNotBlockRecovery() throws {
    try keyfileVaultWithRecords()
    let written = try XCTUnwrap(contents(manifest))
    let text = String(decoding: written, as: UTF8.self)
    let tampered = text.replacingOccurrences(
      of: #""keyfile" : "[^"]*""#, with: #""keyfile" : "/nonexistent/x.keys""#, options: .regularExpression)
    XCTAssertNotEqual(tampered, text)
    XCTAssertTrue(FileManager.default.createFile(atPath: manifest, contents: Data(tampered.utf8)))
    let recovered = try run(["recover"])
    XCTAssertEqual(recovered.status, 0, recovered.error)
    XCTAssertEqual(contents(manifest), written)
  }

  /// A home moved with `mv` whose manifest was then lost: the copy names the old home, which
  /// no longer holds the vault. Taken once the vault is named, and bound to its new place.
  func testAMovedHomeIsRecoveredAndBoundToItsNewPlace() throws {
    let vaultID = try keyfileVaultWithRecords()
    let moved = temporary.sub("moved-home")
    XCTAssertEqual(rename(home, moved), 0)
    XCTAssertEqual(unlink(moved + "/manifest.json"), 0)
    let unnamed = try vault(["--home", moved, "recover"], environment: env)
    XCTAssertEqual(unnamed.status, 1)
    XCTAssertTrue(
      unnamed.error.contains("if this home was moved from there, name vault \(vaultID) to take it"), unnamed.error)
    XCTAssertFalse(FileManager.default.fileExists(atPath: moved + "/manifest.json"))
    let recovered = try vault(["--home", moved, "recover", "--vault-id", vaultID], environment: env)
    XCTAssertEqual(recovered.status, 0, recovered.error)
    XCTAssertTrue(recovered.outputText.contains("vault \(vaultID)"), recovered.outputText)
    let rotated = try vault(["--home", moved, "rotate"], environment: env)
    XCTAssertEqual(rotated.status, 0, rotated.error)
    let status = try vault(["--home", moved, "status", "--json"], environment: env)
    let json = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(status.output)) as? [String: Any])
    XCTAssertEqual(json["home"] as? String, moved)
  }

  /// One copy, no container to confirm it, and a keyfile in the directory that could not be
  /// read: the home's vault may be that one, so the copy is taken only when named.
  func testAnUnconfirmedCopyIsNotTakenWhileAStoreCouldNotBeSearched() throws {
    let vaultID = try keyfileVaultWithRecords()
    for name in ["manifest.json", "queue.sqlite", "queue.sqlite-wal", "queue.sqlite-shm"] { unlink(home + "/" + name) }
    let otherHome = temporary.sub("otherhome")
    let other = try vault(["--home", otherHome, "init", "--store", "keyfile", "--json"], environment: env)
    let otherID = try XCTUnwrap(
      (try JSONSerialization.jsonObject(with: Data(other.output)) as? [String: Any])?["vault_id"] as? String)
    XCTAssertEqual(chmod(keyDirectory + "/\(otherID).keys", 0o640), 0)

    let refused = try run(["recover"])
    assertRefused(
      refused,
      saying: [
        "could not be searched, and the home's vault may be there",
        "\(otherID).keys",
      ])
    XCTAssertFalse(FileManager.default.fileExists(atPath: manifest))

    let named = try run(["recover", "--vault-id", vaultID])
    XCTAssertEqual(named.status, 0, named.error)
  }

  /// The options name what the caller expects: a sound manifest of another vault is not taken for it.
  func testASoundManifestOfAnotherVaultThanTheOneNamedIsReported() throws {
    let vaultID = try keyfileVaultWithRecords()
    let result = try run(["recover", "--vault-id", "0123456789abcdef"])
    XCTAssertEqual(result.status, 1)
    XCTAssertTrue(result.error.contains("verifies, and is vault \(vaultID)'s"), result.error)
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
    XCTAssertTrue(result.error.contains("the keyfile \(keyfile): no authentic manifest copy"), result.error)
    XCTAssertFalse(FileManager.default.fileExists(atPath: manifest))
  }

  func testACopyOfAnotherHomeIsNotTaken() throws {
    try keyfileVaultWithRecords()
    let other = temporary.sub("other")
    XCTAssertEqual(mkdir(other, 0o700), 0)
    let result = try vault(["--home", other, "recover"], environment: env)
    XCTAssertEqual(result.status, 1)
    XCTAssertTrue(result.error.contains(": its home is \(home), which still holds this vault"), result.error)
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

  /// The second outside review's case: a `cp -a` of a home that had lost its manifest. The copy
  /// is not taken for the copied home (the original still holds the vault's container), so the
  /// original is not stranded.
  func testACopyOfAHomeDoesNotTakeTheOriginalsManifest() throws {
    let vaultID = try keyfileVaultWithRecords()
    XCTAssertEqual(unlink(manifest), 0)
    let copy = temporary.sub("copied-home")
    let copied = try Spawn.run("/bin/cp", ["-a", home, copy])
    XCTAssertEqual(copied.status, 0, copied.error)
    let refused = try vault(["--home", copy, "recover", "--vault-id", vaultID], environment: env)
    XCTAssertEqual(refused.status, 1)
    XCTAssertTrue(refused.error.contains("its home is \(home), which still holds this vault"), refused.error)
    XCTAssertFalse(FileManager.default.fileExists(atPath: copy + "/manifest.json"))
    let original = try run(["recover"])
    XCTAssertEqual(original.status, 0, original.error)
    XCTAssertEqual(try deliveredPayloads(), payloads)
  }

  /// The third outside review's attack: whoever can write the home puts a keyfile in it, holding
  /// the home's vault id, an integrity key of their own and a copy signed with it, and points the
  /// (then damaged) manifest at it. That keyfile is never taken: new records would be sealed under
  /// their keys.
  func testAKeyfilePlantedInTheHomeIsNeverTaken() throws {
    XCTAssertEqual(mkdir(temporary.sub("elsewhere"), 0o700), 0)
    let keyfile = temporary.sub("elsewhere/b.keys")
    XCTAssertEqual(try run(["init", "--store", "keyfile", "--keyfile", keyfile]).status, 0)
    let signed = try ManifestFile.parse(Array(try XCTUnwrap(contents(manifest))), path: manifest)
    let planted = home + "/evil.keys"
    var forged = signed.manifest
    forged.store = StoreDescriptor(kind: .keyfile, keyfile: planted)
    let theirs = try SymmetricKey.generate()
    let keyring = try XCTUnwrap(forged.keyringID)
    let store = KeyfileStore(path: planted)
    try theirs.withUnsafeBytes { try store.storeRecord(.integrityKey, bytes: $0, keyring: keyring) }
    try ManifestFile.sign(forged, key: theirs).withUnsafeBytes {
      try store.storeRecord(.manifestMirror, bytes: $0, keyring: keyring)
    }
    // The home's manifest, pointed at the planted keyfile: its MAC no longer verifies.
    let text = String(decoding: try XCTUnwrap(contents(manifest)), as: UTF8.self)
    let damaged = Data(text.replacingOccurrences(of: keyfile, with: planted).utf8)
    XCTAssertTrue(FileManager.default.createFile(atPath: manifest, contents: damaged))

    let result = try run(["recover"])
    XCTAssertNotEqual(result.status, 0, result.outputText)
    XCTAssertEqual(contents(manifest), damaged, "nothing was written from the planted keyfile")
    XCTAssertFalse(result.error.contains("evil.keys (key version"), "not offered as a choice: \(result.error)")

    // The fourth review's way round: the damaged manifest names the planted keyfile by a relative
    // path, read from wherever `vault` runs (here the directory holding the home).
    let relative = Data(text.replacingOccurrences(of: keyfile, with: "home/evil.keys").utf8)
    XCTAssertTrue(FileManager.default.createFile(atPath: manifest, contents: relative))
    let fromParent = try Spawn.run(
      "/bin/sh", ["-c", "cd \"$0\" && exec \"$1\" --home home recover", temporary.sub(""), vaultBinary()],
      environment: env)
    XCTAssertNotEqual(fromParent.status, 0, fromParent.outputText)
    XCTAssertEqual(contents(manifest), relative, "nothing was written from the planted keyfile")

    let named = try run(["recover", "--keyfile", keyfile])
    XCTAssertEqual(named.status, 0, named.error)
  }

  /// The third outside review's case with nothing planted: a vault removed from this path left
  /// its copy in the default directory, the home's vault keeps its keyfile elsewhere, and the
  /// home's container is gone. The lone copy is not taken unasked.
  func testALoneCopyNoContainerConfirmsIsNotTakenUnasked() throws {
    let first = try keyfileVaultWithRecords()
    XCTAssertEqual(mkdir(temporary.sub("elsewhere"), 0o700), 0)
    let keyfile = temporary.sub("elsewhere/b.keys")
    try replaceVault(first) {
      XCTAssertEqual(try run(["init", "--store", "keyfile", "--keyfile", keyfile]).status, 0)
    }
    let written = try XCTUnwrap(contents(manifest))
    for name in ["manifest.json", "queue.sqlite", "queue.sqlite-wal", "queue.sqlite-shm"] { unlink(home + "/" + name) }

    let refused = try run(["recover"])
    assertRefused(
      refused,
      saying: [
        "vault \(first) in the keyfile",
        "no container in the home records its vault",
      ])
    XCTAssertFalse(FileManager.default.fileExists(atPath: manifest))

    let named = try run(["recover", "--keyfile", keyfile])
    XCTAssertEqual(named.status, 0, named.error)
    XCTAssertEqual(contents(manifest), written)
  }

  /// `init` over a home whose vault's keyfile, with its manifest copy, is still in the default
  /// directory is refused: the records of that vault would be left behind (the same as for
  /// Secret Service items). The advice's `mv` retires the keyfile, and `init` then works.
  func testInitRefusesAHomeWhoseVaultsKeyfileRemains() throws {
    let vaultID = try keyfileVaultWithRecords()
    try FileManager.default.removeItem(atPath: home)
    let keyfile = keyDirectory + "/\(vaultID).keys"
    let refused = try run(["init", "--store", "keyfile"])
    assertRefused(
      refused,
      saying: [
        "the keyfile \(keyfile) holds the keys of vault \(vaultID)",
        "`vault recover`",
        "mv \(keyfile) \(keyfile).retired",
      ])
    XCTAssertFalse(FileManager.default.fileExists(atPath: manifest))
    XCTAssertEqual(rename(keyfile, keyfile + ".retired"), 0, "the move the error names")
    let created = try run(["init", "--store", "keyfile"])
    XCTAssertEqual(created.status, 0, created.error)
  }

  /// A keyfile whose mode lets its group read it is still its vault's: the vault refuses to use it
  /// until the mode is fixed, and `init` over its home is refused as for a private one (it was
  /// passed over as unreadable).
  func testInitRefusesAHomeWhoseVaultsKeyfileRemainsWithAMode0640() throws {
    let vaultID = try keyfileVaultWithRecords()
    try FileManager.default.removeItem(atPath: home)
    let keyfile = keyDirectory + "/\(vaultID).keys"
    XCTAssertEqual(chmod(keyfile, 0o640), 0)
    assertRefused(
      try run(["init", "--store", "keyfile"]),
      saying: ["the keyfile \(keyfile) holds the keys of vault \(vaultID)", "mv \(keyfile) \(keyfile).retired"])
    XCTAssertFalse(FileManager.default.fileExists(atPath: manifest))
  }

  /// The sixth outside review's case: a vault removed from this path kept its keyfile outside the
  /// default directory; whoever can write the home points the damaged manifest at that keyfile
  /// and plants that vault's container. A copy found only through the damaged manifest's keyfile
  /// is taken only when named.
  func testACopyFoundOnlyThroughTheDamagedManifestIsTakenOnlyWhenNamed() throws {
    XCTAssertEqual(mkdir(temporary.sub("kd"), 0o700), 0)
    XCTAssertEqual(mkdir(temporary.sub("kb"), 0o700), 0)
    let removed = temporary.sub("kd/d.keys")
    XCTAssertEqual(try run(["init", "--store", "keyfile", "--keyfile", removed]).status, 0)
    let removedManifest = try XCTUnwrap(contents(manifest))
    try FileManager.default.copyItem(atPath: home + "/queue.sqlite", toPath: temporary.sub("d.sqlite"))
    try FileManager.default.removeItem(atPath: home)
    let keyfile = temporary.sub("kb/b.keys")
    XCTAssertEqual(try run(["init", "--store", "keyfile", "--keyfile", keyfile]).status, 0)
    let written = try XCTUnwrap(contents(manifest))
    // The planter's damaged manifest: the removed vault's, with its MAC broken, naming its keyfile.
    let damaged = Data(Self.changingItsEpoch(String(decoding: removedManifest, as: UTF8.self)).utf8)
    XCTAssertTrue(FileManager.default.createFile(atPath: manifest, contents: damaged))
    for suffix in ["", "-wal", "-shm"] { unlink(home + "/queue.sqlite" + suffix) }
    try FileManager.default.copyItem(atPath: temporary.sub("d.sqlite"), toPath: home + "/queue.sqlite")

    let refused = try run(["recover"])
    XCTAssertEqual(refused.status, 1)
    XCTAssertTrue(refused.error.contains("found only through the keyfile the damaged manifest names"), refused.error)
    XCTAssertEqual(contents(manifest), damaged, "nothing was changed")
    let named = try run(["recover", "--keyfile", keyfile])
    XCTAssertEqual(named.status, 0, named.error)
    XCTAssertEqual(contents(manifest), written)
  }

  /// An `init` killed before its first key left a keyfile (no key, a copy naming the home) that
  /// the rerun did not reuse; it is never a candidate, so the vault's lost manifest still comes
  /// back unasked.
  func testAKeyfileAKilledInitLeftIsNoCandidate() throws {
    let killed = try vaultKilled(
      at: "rename,renameat,renameat2", step: 3, ["--home", home, "init", "--store", "keyfile"], environment: env)
    XCTAssertEqual(killed.status, 128 + SIGKILL, killed.error)
    let rerun = try run(["init", "--store", "keyfile"])
    XCTAssertEqual(rerun.status, 0, rerun.error)
    for payload in payloads {
      XCTAssertEqual(try run(["queue", "put", "--queue", "orders"], input: Array(payload.utf8)).status, 0)
    }
    XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: keyDirectory).count, 2, "the leftover stays")
    XCTAssertEqual(unlink(manifest), 0)
    let recovered = try run(["recover"])
    XCTAssertEqual(recovered.status, 0, recovered.error)
    XCTAssertEqual(try deliveredPayloads(), payloads)
  }

  /// The seventh outside review's case: the home's keyfile was moved by hand into the default
  /// directory, a vault removed from this path left its keyfile there too, and its container is
  /// planted. The moved keyfile may be the home's vault: no other copy is taken beside it.
  func testAKeyfileMovedByHandStopsAnotherLoneCopy() throws {
    let first = try keyfileVaultWithRecords()
    try FileManager.default.copyItem(atPath: home + "/queue.sqlite", toPath: temporary.sub("first.sqlite"))
    XCTAssertEqual(mkdir(temporary.sub("kb"), 0o700), 0)
    let keyfile = temporary.sub("kb/b.keys")
    var second = ""
    try replaceVault(first) {
      let created = try run(["init", "--store", "keyfile", "--keyfile", keyfile, "--json"])
      second = try XCTUnwrap(
        (try JSONSerialization.jsonObject(with: Data(created.output)) as? [String: Any])?["vault_id"] as? String)
    }
    let movedTo = keyDirectory + "/\(second).keys"
    XCTAssertEqual(rename(keyfile, movedTo), 0)
    XCTAssertEqual(unlink(manifest), 0)
    for suffix in ["", "-wal", "-shm"] { unlink(home + "/queue.sqlite" + suffix) }
    try FileManager.default.copyItem(atPath: temporary.sub("first.sqlite"), toPath: home + "/queue.sqlite")

    let refused = try run(["recover"])
    XCTAssertEqual(refused.status, 1)
    XCTAssertTrue(refused.error.contains("Move the keyfile back: mv \(movedTo) \(keyfile)"), refused.error)
    XCTAssertFalse(FileManager.default.fileExists(atPath: manifest), "vault \(first) is not taken unasked")
  }

  /// The sixth outside review's other way to two vaults at one path: restoring another vault's
  /// bundle into a home whose removed vault's keyfile remains is refused, as `init` is.
  func testRestoreRefusesAHomeWhoseVaultsKeyfileRemains() throws {
    let vaultID = try keyfileVaultWithRecords()
    let otherHome = temporary.sub("otherhome")
    XCTAssertEqual(try vault(["--home", otherHome, "init", "--store", "keyfile"], environment: env).status, 0)
    let (bundle, passphrase) = try backUp(otherHome, in: temporary, environment: env)
    try FileManager.default.removeItem(atPath: home)

    let restored = try vault(
      ["restore", bundle, "--passphrase-file", passphrase, "--into", home, "--store", "keyfile"], environment: env)
    assertRefused(restored, saying: ["holds the keys of vault \(vaultID), whose manifest copy names \(home)"])
    XCTAssertFalse(FileManager.default.fileExists(atPath: manifest))
  }

  /// A home that does not exist gets an error of its own (it was "stat the vault home … failed"),
  /// which says where a manifest can go back, and nothing is made there.
  func testAHomeThatDoesNotExistIsNamedAndNotMade() throws {
    _ = try keyfileVaultWithRecords()
    try FileManager.default.removeItem(atPath: home)
    assertRefused(
      try run(["recover"]), saying: ["the vault home \(home) does not exist", "`vault --home NEW recover`"])
    // And `status` there no longer sends the operator to `recover` (an operator review followed it).
    let status = try run(["status"])
    XCTAssertTrue(status.error.contains("(the directory does not exist: for a vault that was moved"), status.error)
    XCTAssertFalse(status.error.contains("`vault recover`"), status.error)
    XCTAssertFalse(FileManager.default.fileExists(atPath: home), "recover made nothing")
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

  /// A Secret Service vault's items name the home they were stored for: after the home is moved
  /// and its manifest lost, recover says which vault's items name a home that no longer exists,
  /// and naming it recovers the vault at its new place.
  func testAMovedSecretServiceHomeIsFoundByItsVaultID() throws {
    try XCTSkipUnless(TestKeyring.isAvailable, "no private Secret Service; run the tests via tools/test.sh")
    let created = try run(["init", "--store", "secret-service", "--json"])
    XCTAssertEqual(created.status, 0, created.error)
    let vaultID = try XCTUnwrap(
      (try JSONSerialization.jsonObject(with: Data(created.output)) as? [String: Any])?["vault_id"] as? String)
    addTeardownBlock { _ = try? Spawn.run("/usr/bin/secret-tool", ["clear", "vault-id", vaultID]) }
    for payload in payloads {
      XCTAssertEqual(try run(["queue", "put", "--queue", "orders"], input: Array(payload.utf8)).status, 0)
    }
    let moved = temporary.sub("moved-home")
    XCTAssertEqual(rename(home, moved), 0)
    XCTAssertEqual(unlink(moved + "/manifest.json"), 0)
    XCTAssertEqual(mkdir(home, 0o700), 0, "the old path made again, empty: it holds no vault")

    let unnamed = try vault(["--home", moved, "recover"], environment: env)
    XCTAssertEqual(unnamed.status, 1)
    XCTAssertTrue(
      unnamed.error.contains("The Secret Service holds the keys of vaults whose homes no longer hold them: "),
      unnamed.error)
    XCTAssertTrue(unnamed.error.contains("vault \(vaultID) (stored for \(home))"), unnamed.error)
    XCTAssertTrue(unnamed.error.contains("`vault recover --vault-id ID`"), unnamed.error)
    let named = try vault(["--home", moved, "recover", "--vault-id", vaultID], environment: env)
    XCTAssertEqual(named.status, 0, named.error)
    let rotated = try vault(["--home", moved, "rotate"], environment: env)
    XCTAssertEqual(rotated.status, 0, rotated.error)
  }
}
