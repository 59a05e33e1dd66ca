import Foundation
import VaultTestSupport
import XCTest

/// The CLI against the real Secret Service of the test harness, and against buses where it is
/// missing, has no provider, or hangs.
final class SecretServiceCLITests: XCTestCase {
  var temporary: TemporaryDirectory!
  override func setUp() { temporary = TemporaryDirectory() }
  override func tearDown() { temporary = nil }

  private let secret = Array("the launch code is not here".utf8)

  private func requireKeyring() throws {
    try XCTSkipUnless(TestKeyring.isAvailable, "no private Secret Service; run the tests via tools/test.sh")
  }

  /// The id of the vault at `home` (from `status --json`); its Secret Service items are cleared
  /// when the test ends.
  private func vaultIDClearedAfterTheTest(home: String) throws -> String {
    let status =
      try JSONSerialization.jsonObject(
        with: Data(try vault(["--home", home, "status", "--json"]).output)) as! [String: Any]
    let vaultID = try XCTUnwrap(status["vault_id"] as? String)
    addTeardownBlock { _ = try? Spawn.run("/usr/bin/secret-tool", ["clear", "vault-id", vaultID]) }
    return vaultID
  }

  /// A vault made with `init --store secret-service` at a new home, and `secret` sealed by it
  /// (context "c"); fails the test unless it was made.
  private func secretServiceVaultWithASealedSecret() throws -> (home: String, sealed: [UInt8]) {
    let home = temporary.sub("home")
    let created = try vault(["--home", home, "init", "--store", "secret-service"])
    XCTAssertEqual(created.status, 0, created.error)
    return (home, try vault(["--home", home, "seal", "--context", "c"], input: secret).output)
  }

  /// Stores an item as another program could: vault's schema and attributes for `version` of
  /// `vaultID`, with `home` as its home attribute, holding `holding` (32 bytes that are not the
  /// vault's key by default). Fails the test unless it was stored.
  ///
  /// - Returns: the item's attributes, for `secret-tool clear`.
  @discardableResult
  private func storeStrayItem(
    vaultID: String, version: Int, home: String, holding: [UInt8] = Array(String(repeating: "x", count: 32).utf8)
  ) throws -> [String] {
    let attributes = ["xdg:schema", "org.vault.Key", "vault-id", vaultID, "version", "\(version)", "home", home]
    let stored = try Spawn.run(
      "/usr/bin/secret-tool", ["store", "--label=vault key \(vaultID) version \(version)"] + attributes,
      input: holding)
    XCTAssertEqual(stored.status, 0, stored.error)
    return attributes
  }

  func testInitSealRotateOpenWithTheSecretService() throws {
    try requireKeyring()
    let home = temporary.sub("home")
    let created = try vault(["--home", home, "init", "--store", "secret-service"])
    XCTAssertEqual(created.status, 0, created.error)
    XCTAssertTrue(created.outputText.contains("Keys: Secret Service"), created.outputText)
    let sealed = try vault(["--home", home, "seal", "--context", "c"], input: secret)
    XCTAssertEqual(sealed.status, 0, sealed.error)
    XCTAssertEqual(try vault(["--home", home, "rotate"]).status, 0)
    XCTAssertEqual(try vault(["--home", home, "open", "--context", "c"], input: sealed.output).output, secret)
    let status =
      try JSONSerialization.jsonObject(
        with: Data(try vault(["--home", home, "status", "--json"]).output)) as! [String: Any]
    XCTAssertEqual(status["store"] as? String, "secret-service")
    XCTAssertTrue(status["keyfile"] is NSNull, "null for a Secret Service vault, never omitted")
    XCTAssertFalse(FileManager.default.fileExists(atPath: home + "/keys"), "no key material in the home")
  }

  func testAutoChoosesTheUnlockedSecretServiceAndSaysSo() throws {
    try requireKeyring()
    let run = try vault(["--home", temporary.sub("home"), "init"])
    XCTAssertEqual(run.status, 0, run.error)
    XCTAssertTrue(run.error.contains("the Secret Service is available and unlocked"), run.error)
  }

  func testLockedKeyringIsReportedAndNoKeyIsMade() throws {
    try requireKeyring()
    let (home, sealed) = try secretServiceVaultWithASealedSecret()
    let manifest = try Data(contentsOf: URL(fileURLWithPath: home + "/manifest.json"))
    try TestKeyring.lock()
    defer { XCTAssertNoThrow(try TestKeyring.unlock()) }

    let open = try vault(["--home", home, "open", "--context", "c"], input: sealed)
    XCTAssertEqual(open.status, 1)
    XCTAssertTrue(open.error.contains("collection is locked"), open.error)
    XCTAssertTrue(open.output.isEmpty)
    let rotate = try vault(["--home", home, "rotate"])
    XCTAssertEqual(rotate.status, 1)
    XCTAssertTrue(rotate.error.contains("locked"), rotate.error)
    XCTAssertEqual(
      try Data(contentsOf: URL(fileURLWithPath: home + "/manifest.json")), manifest, "rotation refused cleanly")
    let doctor = try vault(["--home", home, "doctor"])
    XCTAssertEqual(doctor.status, 1)
    XCTAssertTrue(doctor.outputText.contains("locked"), doctor.outputText)
    // --verify could not open the vault: exit 2 (could not run), never 1 (findings).
    let scan = try vault(["--home", home, "scan", home, "--verify"])
    XCTAssertEqual(scan.status, 2, scan.error)
    XCTAssertTrue(scan.error.contains("locked"), scan.error)
    let auto = try vault(["--home", temporary.sub("other"), "init", "--keyfile", temporary.sub("k/k.keys")])
    XCTAssertEqual(auto.status, 0, auto.error)
    XCTAssertTrue(auto.error.contains("locked"), "auto says why it fell back: \(auto.error)")

    try TestKeyring.unlock()
    XCTAssertEqual(try vault(["--home", home, "open", "--context", "c"], input: sealed).output, secret)
  }

  func testHungProviderTimesOutInsteadOfBlocking() throws {
    try requireKeyring()
    let (home, sealed) = try secretServiceVaultWithASealedSecret()
    try TestKeyring.signalDaemon("STOP")
    defer { XCTAssertNoThrow(try TestKeyring.signalDaemon("CONT")) }
    let started = Date()
    let run = try vault(
      ["--home", home, "open", "--context", "c"], input: sealed,
      environment: environment(["VAULT_SECRET_SERVICE_TIMEOUT": "1"]))
    let elapsed = Date().timeIntervalSince(started)
    XCTAssertEqual(run.status, 1)
    XCTAssertTrue(run.error.contains("did not answer within 1 s"), run.error)
    XCTAssertLessThan(elapsed, 15, "bounded by the timeout, not D-Bus's 25–50 s default")
    // A rotation that meets it from the start (the vault cannot even be opened) changes nothing.
    let manifest = try Data(contentsOf: URL(fileURLWithPath: home + "/manifest.json"))
    let rotate = try vault(
      ["--home", home, "rotate"], environment: environment(["VAULT_SECRET_SERVICE_TIMEOUT": "1"]))
    XCTAssertEqual(rotate.status, 1)
    XCTAssertTrue(rotate.error.contains("did not answer within 1 s"), rotate.error)
    XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: home + "/manifest.json")), manifest)
    try TestKeyring.signalDaemon("CONT")
    XCTAssertEqual(try vault(["--home", home, "open", "--context", "c"], input: sealed).output, secret)
  }

  /// A keyring daemon that leaves the bus while a call to it waits (crashed, killed, replaced) is
  /// answered for by the bus with NoReply at once. It was reported as "did not answer within N s
  /// … may be hung" (after a fraction of a second), and the one retry on a new connection that a
  /// restarted daemon answers was not taken. Now it is retried: here nothing is there to answer
  /// (a bus without service files starts no daemon), so the error says no provider is running.
  func testADaemonThatDiesMidCallIsRetriedAndNotCalledHung() throws {
    try requireKeyring()
    let (home, sealed) = try secretServiceVaultWithASealedSecret()
    let started = Date()
    let run = try openWithFakeProvider("die", home: home, sealed: sealed, timeout: "30")
    XCTAssertEqual(run.status, 1, run.error)
    XCTAssertTrue(run.error.contains("no Secret Service provider on the session bus"), run.error)
    XCTAssertFalse(run.error.contains("did not answer"), run.error)
    XCTAssertLessThan(Date().timeIntervalSince(started), 20, "answered by the bus, not by vault's 30 s deadline")
    XCTAssertEqual(try vault(["--home", home, "open", "--context", "c"], input: sealed).output, secret)
  }

  /// The same provider, answering nothing: the command ends at its deadline and says the daemon
  /// may be hung, whether the search itself goes unanswered or the transfer of the secrets of the
  /// items it found. The second waited 25 s (D-Bus's default) past a 1 s deadline: libsecret's
  /// search loads secrets without the caller's cancellable; vault now loads them itself.
  func testAProviderThatStopsAnsweringTimesOutAtTheDeadline() throws {
    try requireKeyring()
    let (home, sealed) = try secretServiceVaultWithASealedSecret()
    for mode in ["hang", "hang-secrets"] {
      let started = Date()
      let run = try openWithFakeProvider(mode, home: home, sealed: sealed, timeout: "1")
      XCTAssertEqual(run.status, 1, mode + ": " + run.error)
      XCTAssertTrue(run.error.contains("did not answer within 1 s (search records)"), mode + ": " + run.error)
      XCTAssertLessThan(Date().timeIntervalSince(started), 15, mode + ": bounded by the deadline, not D-Bus's 25 s")
    }
  }

  /// `vault open` of `sealed` against tools/fake_secret_service.py in `mode`, on a bus of its own,
  /// with VAULT_SECRET_SERVICE_TIMEOUT `timeout`.
  private func openWithFakeProvider(_ mode: String, home: String, sealed: [UInt8], timeout: String) throws -> Spawned {
    try Spawn.run(
      "/usr/bin/python3",
      [
        packageRoot() + "/tools/fake_secret_service.py", mode, "--", vaultBinary(), "--home", home, "open",
        "--context", "c",
      ],
      input: sealed, environment: environment(["VAULT_SECRET_SERVICE_TIMEOUT": timeout]))
  }

  /// gnome-keyring's session collection is kept in memory only: keys stored there are gone at the
  /// next logout or daemon restart, with every record sealed under them. With it as the default
  /// collection, `init` refuses (`auto` falls back to a keyfile and says why), a rotation refuses
  /// before it makes a key, and doctor says why; keys already kept on disk still open records.
  func testADefaultCollectionKeptOnlyInMemoryIsRefused() throws {
    try requireKeyring()
    let (home, sealed) = try secretServiceVaultWithASealedSecret()
    let manifest = try Data(contentsOf: URL(fileURLWithPath: home + "/manifest.json"))
    XCTAssertTrue(try TestKeyring.isEmpty(TestKeyring.sessionCollection))
    try TestKeyring.setDefaultAlias(TestKeyring.sessionCollection)
    defer { XCTAssertNoThrow(try TestKeyring.setDefaultAlias(TestKeyring.loginCollection)) }

    let forced = try vault(["--home", temporary.sub("a"), "init", "--store", "secret-service"])
    XCTAssertEqual(forced.status, 1)
    XCTAssertTrue(forced.error.contains("session collection, which is kept in memory only"), forced.error)
    XCTAssertFalse(FileManager.default.fileExists(atPath: temporary.sub("a") + "/manifest.json"))
    let auto = try vault(["--home", temporary.sub("b"), "init", "--keyfile", temporary.sub("k/b.keys")])
    XCTAssertEqual(auto.status, 0, auto.error)
    XCTAssertTrue(auto.error.contains("session collection"), auto.error)
    XCTAssertTrue(auto.outputText.contains("Keys: keyfile"), auto.outputText)
    let rotate = try vault(["--home", home, "rotate"])
    XCTAssertEqual(rotate.status, 1)
    XCTAssertTrue(rotate.error.contains("session collection"), rotate.error)
    XCTAssertEqual(
      try Data(contentsOf: URL(fileURLWithPath: home + "/manifest.json")), manifest, "rotation refused cleanly")
    let doctor = try vault(["--home", home, "doctor"])
    XCTAssertEqual(doctor.status, 1)
    XCTAssertTrue(doctor.outputText.contains("session collection"), doctor.outputText)
    XCTAssertTrue(try TestKeyring.isEmpty(TestKeyring.sessionCollection), "no key or record went there")
    XCTAssertEqual(try vault(["--home", home, "open", "--context", "c"], input: sealed).output, secret)

    try TestKeyring.setDefaultAlias(TestKeyring.loginCollection)
    XCTAssertEqual(try vault(["--home", home, "rotate"]).status, 0)
    XCTAssertEqual(try vault(["--home", home, "open", "--context", "c"], input: sealed).output, secret)
  }

  /// An item another program put at the version a rotation is about to make is not this vault's
  /// key: the rotation refuses before it records anything, so every other command still works.
  /// (Recorded first, the pending version made every later command refuse that item too.)
  func testAStrayItemAtTheNextVersionFailsTheRotationOnly() throws {
    try requireKeyring()
    let (home, sealed) = try secretServiceVaultWithASealedSecret()
    let vaultID = try vaultIDClearedAfterTheTest(home: home)
    let stray = try storeStrayItem(vaultID: vaultID, version: 2, home: home)
    let manifest = try Data(contentsOf: URL(fileURLWithPath: home + "/manifest.json"))

    let rotate = try vault(["--home", home, "rotate"])
    XCTAssertEqual(rotate.status, 1)
    XCTAssertTrue(rotate.error.contains("key version 2 that this vault did not record"), rotate.error)
    XCTAssertEqual(
      try Data(contentsOf: URL(fileURLWithPath: home + "/manifest.json")), manifest, "nothing was recorded")
    XCTAssertEqual(try vault(["--home", home, "open", "--context", "c"], input: sealed).output, secret)
    XCTAssertEqual(try vault(["--home", home, "seal", "--context", "c"], input: secret).status, 0)

    _ = try Spawn.run("/usr/bin/secret-tool", ["clear"] + stray)
    XCTAssertEqual(try vault(["--home", home, "rotate"]).status, 0)
    XCTAssertEqual(try vault(["--home", home, "open", "--context", "c"], input: sealed).output, secret)
  }

  /// An item another program stored with this vault's attributes and another key, beside the key
  /// of a version in use: vault reads its own by the manifest's key-check value (before, every
  /// command refused the vault as ambiguous, with advice that could delete the wrong item), and
  /// doctor names the stray.
  func testAStrayItemWithAnotherKeyForAVersionInUseIsReadPastAndNamed() throws {
    try requireKeyring()
    let (home, sealed) = try secretServiceVaultWithASealedSecret()
    let vaultID = try vaultIDClearedAfterTheTest(home: home)
    // Another home attribute, so the keyring keeps both items rather than replacing vault's.
    try storeStrayItem(vaultID: vaultID, version: 1, home: home + "-elsewhere")

    let opened = try vault(["--home", home, "open", "--context", "c"], input: sealed)
    XCTAssertEqual(opened.status, 0, opened.error)
    XCTAssertEqual(opened.output, secret)
    let doctor = try vault(["--home", home, "doctor"])
    XCTAssertTrue(doctor.outputText.contains("2 items for key version 1"), doctor.outputText)
    XCTAssertTrue(doctor.outputText.contains("reads the one its manifest records"), doctor.outputText)
    XCTAssertFalse(doctor.outputText.contains("xxxx"), "no key bytes")
    let resealed = try vault(["--home", home, "seal", "--context", "c"], input: secret)
    XCTAssertEqual(resealed.status, 0, resealed.error)

    let rotate = try vault(["--home", home, "rotate"])
    XCTAssertEqual(rotate.status, 0, rotate.error)
    XCTAssertEqual(try vault(["--home", home, "open", "--context", "c"], input: sealed).output, secret)
    XCTAssertEqual(try vault(["--home", home, "open", "--context", "c"], input: resealed.output).output, secret)
  }

  /// A stray item whose material is not a 256-bit key, beside vault's own for a version in use:
  /// vault reads its own, and doctor names the stray as it names one with another key (review: it
  /// counted only well-formed keys, so this one went unmentioned).
  func testAStrayItemOfAnotherSizeIsNamedByDoctor() throws {
    try requireKeyring()
    let home = temporary.sub("home")
    XCTAssertEqual(try vault(["--home", home, "init", "--store", "secret-service"]).status, 0)
    let vaultID = try vaultIDClearedAfterTheTest(home: home)
    try storeStrayItem(vaultID: vaultID, version: 1, home: home + "-elsewhere", holding: Array("not a key".utf8))

    let sealed = try vault(["--home", home, "seal", "--context", "c"], input: secret)
    XCTAssertEqual(sealed.status, 0, sealed.error)
    let doctor = try vault(["--home", home, "doctor"])
    XCTAssertEqual(doctor.status, 0, doctor.outputText)
    XCTAssertTrue(doctor.outputText.contains("2 items for key version 1"), doctor.outputText)
    XCTAssertFalse(doctor.outputText.contains("not a key"), "no item bytes")
  }

  /// A key item in the session collection (moved there by hand, or stored by a release before
  /// storing there was refused) is read like any other, and lost with every record under it when
  /// the session ends: doctor says so and how to get it out, before that happens.
  func testDoctorWarnsOfAKeyKeptOnlyInTheSessionCollection() throws {
    try requireKeyring()
    let home = temporary.sub("home")
    XCTAssertEqual(try vault(["--home", home, "init", "--store", "secret-service"]).status, 0)
    let vaultID = try vaultIDClearedAfterTheTest(home: home)
    let before = try vault(["--home", home, "doctor"])
    XCTAssertEqual(before.status, 0, before.outputText)
    XCTAssertFalse(before.outputText.contains("session collection"), before.outputText)

    // Move key version 1 into the session collection: the same bytes and attributes.
    let attributes = ["xdg:schema", "org.vault.Key", "vault-id", vaultID, "version", "1", "home", home]
    let key = try Spawn.run("/usr/bin/secret-tool", ["lookup"] + attributes)
    XCTAssertEqual(key.output.count, 32, key.error)
    XCTAssertEqual(try Spawn.run("/usr/bin/secret-tool", ["clear"] + attributes).status, 0)
    let moved = try Spawn.run(
      "/usr/bin/secret-tool",
      ["store", "--label=vault key \(vaultID) version 1", "--collection=/org/freedesktop/secrets/aliases/session"]
        + attributes, input: key.output)
    XCTAssertEqual(moved.status, 0, moved.error)

    let doctor = try vault(["--home", home, "doctor"])
    XCTAssertEqual(doctor.status, 0, "the key is readable now: a warning, " + doctor.outputText)
    XCTAssertTrue(
      doctor.outputText.contains("key version 1 of this vault is kept only in the Secret Service's session"),
      doctor.outputText)
    XCTAssertFalse(doctor.outputText.contains("the integrity key"), doctor.outputText)
    XCTAssertTrue(doctor.outputText.contains("--store keyfile"), doctor.outputText)
    let json = try vault(["--home", home, "doctor", "--json"])
    XCTAssertTrue(json.outputText.contains("\"key persistence\""), json.outputText)
  }

  /// A restore into a new Secret Service home while the vault the bundle came from still keeps its
  /// keys in that keyring: refused with its own error naming the ways out (merge into that vault's
  /// home, or another store), not a bare "key version 1 already exists"; both ways work.
  func testARestoreBesideTheOriginalVaultsKeysNamesTheWaysOut() throws {
    try requireKeyring()
    let home = temporary.sub("home")
    XCTAssertEqual(try vault(["--home", home, "init", "--store", "secret-service"]).status, 0)
    _ = try vaultIDClearedAfterTheTest(home: home)
    XCTAssertEqual(try vault(["--home", home, "queue", "put", "--queue", "q"], input: secret).status, 0)
    let passphrase = temporary.sub("passphrase")
    try "a long passphrase\n".write(toFile: passphrase, atomically: true, encoding: .utf8)
    XCTAssertEqual(chmod(passphrase, 0o600), 0)
    let backups = temporary.sub("backups")
    try FileManager.default.createDirectory(atPath: backups, withIntermediateDirectories: true)
    let backup = try vault(["--home", home, "backup", "--to", backups, "--passphrase-file", passphrase, "--json"])
    XCTAssertEqual(backup.status, 0, backup.error)
    let bundle = try XCTUnwrap(
      (try JSONSerialization.jsonObject(with: Data(backup.output)) as? [String: Any])?["bundle"] as? String)

    let copy = temporary.sub("copy")
    let refused = try vault([
      "restore", bundle, "--passphrase-file", passphrase, "--into", copy, "--store", "secret-service",
    ])
    XCTAssertEqual(refused.status, 1)
    XCTAssertTrue(refused.error.contains("already holds key version 1 of this bundle's vault"), refused.error)
    XCTAssertTrue(refused.error.contains("with its home at \(home)"), refused.error)
    XCTAssertTrue(refused.error.contains("--into \(home)`, or --store keyfile"), refused.error)
    XCTAssertEqual((try? FileManager.default.contentsOfDirectory(atPath: copy)) ?? [], [], "nothing made")

    let merged = try vault(["restore", bundle, "--passphrase-file", passphrase, "--into", home])
    XCTAssertEqual(merged.status, 0, merged.error)
    let elsewhere = try vault([
      "restore", bundle, "--passphrase-file", passphrase, "--into", copy, "--store", "keyfile",
      "--keyfile", temporary.sub("k/copy.keys"),
    ])
    XCTAssertEqual(elsewhere.status, 0, elsewhere.error)
    XCTAssertEqual(try vault(["--home", copy, "queue", "stats"]).status, 0)
  }

  func testNoSessionBusIsExplained() throws {
    let runtime = temporary.sub("runtime")
    try FileManager.default.createDirectory(atPath: runtime, withIntermediateDirectories: true)
    let env = environment([
      "DBUS_SESSION_BUS_ADDRESS": nil, "DISPLAY": nil, "XDG_RUNTIME_DIR": runtime,
    ])
    let forced = try vault(["--home", temporary.sub("a"), "init", "--store", "secret-service"], environment: env)
    XCTAssertEqual(forced.status, 1)
    XCTAssertTrue(forced.error.contains("no D-Bus session bus"), forced.error)
    XCTAssertFalse(FileManager.default.fileExists(atPath: temporary.sub("a") + "/manifest.json"))

    let auto = try vault(
      ["--home", temporary.sub("b"), "init", "--keyfile", temporary.sub("k/b.keys")], environment: env)
    XCTAssertEqual(auto.status, 0, auto.error)
    XCTAssertTrue(auto.error.contains("no D-Bus session bus"), auto.error)
    XCTAssertTrue(auto.outputText.contains("Keys: keyfile"), auto.outputText)

    let doctor = try vault(["--home", temporary.sub("b"), "doctor"], environment: env)
    XCTAssertEqual(doctor.status, 0)
    XCTAssertTrue(doctor.outputText.contains("session bus:     not available"), doctor.outputText)
    XCTAssertTrue(doctor.outputText.contains("keyfile store:   usable"), doctor.outputText)
  }

  /// An existing Secret Service vault out of reach of its keyring (no session bus) is not told to
  /// make a keyfile vault (`vault init --store keyfile`, advice for a new vault that would open
  /// none of these records) but to run where its keyring is.
  func testAnExistingVaultWithoutItsSessionBusIsNotToldToInitAKeyfile() throws {
    try requireKeyring()
    let home = temporary.sub("home")
    XCTAssertEqual(try vault(["--home", home, "init", "--store", "secret-service"]).status, 0)
    let runtime = temporary.sub("runtime")
    try FileManager.default.createDirectory(atPath: runtime, withIntermediateDirectories: true)
    let env = environment(["DBUS_SESSION_BUS_ADDRESS": nil, "DISPLAY": nil, "XDG_RUNTIME_DIR": runtime])
    for arguments in [["queue", "put", "--queue", "q"], ["rotate"], ["seal", "--context", "c"]] {
      let run = try vault(["--home", home] + arguments, input: secret, environment: env)
      XCTAssertEqual(run.status, 1, "\(arguments): \(run.error)")
      let text = run.error + run.outputText
      XCTAssertTrue(text.contains("no D-Bus session bus"), "\(arguments): \(text)")
      XCTAssertTrue(text.contains("this vault's keys are in the Secret Service"), "\(arguments): \(text)")
      XCTAssertFalse(text.contains("vault init --store keyfile"), "\(arguments): \(text)")
    }
  }

  func testBusWithoutAProviderIsExplained() throws {
    let bus = try PrivateBus(directory: temporary.path)
    defer { bus.stop() }
    let env = environment(["DBUS_SESSION_BUS_ADDRESS": bus.address, "DISPLAY": nil])
    let forced = try vault(["--home", temporary.sub("a"), "init", "--store", "secret-service"], environment: env)
    XCTAssertEqual(forced.status, 1)
    XCTAssertTrue(forced.error.contains("no Secret Service provider"), forced.error)
    let doctor = try vault(["--home", temporary.sub("a"), "doctor"], environment: env)
    XCTAssertTrue(doctor.outputText.contains("session bus:     ok"), doctor.outputText)
    XCTAssertTrue(doctor.outputText.contains("no Secret Service provider"), doctor.outputText)
  }
}

/// A D-Bus session bus with no activatable services, so nothing provides org.freedesktop.secrets.
final class PrivateBus {
  let address: String
  private let child: Child

  init(directory: String) throws {
    let socket = directory + "/bus"
    let config = directory + "/bus.conf"
    let template = try String(contentsOfFile: packageRoot() + "/tools/private-bus.conf", encoding: .utf8)
    try template.replacingOccurrences(of: "@ADDRESS@", with: "unix:path=" + socket)
      .write(toFile: config, atomically: true, encoding: .utf8)
    child = try Spawn.start("/usr/bin/dbus-daemon", ["--config-file=\(config)", "--nofork"])
    address = "unix:path=\(socket)"
    for _ in 0..<100 where !FileManager.default.fileExists(atPath: socket) { Thread.sleep(forTimeInterval: 0.05) }
  }

  func stop() {
    child.kill(SIGTERM)
    _ = child.finish()
  }
}
