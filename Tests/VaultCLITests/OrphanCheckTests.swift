import Foundation
import Vault
import VaultKeys
import VaultTestSupport
import XCTest

/// Issue 8, item 16: `init` looks for keys a lost manifest left behind whatever store the new
/// vault uses: a keyfile chosen by hand, or `auto` falling back to one because the collection
/// is locked. Without a bus or provider the look is skipped, and a note says so.
final class OrphanCheckTests: XCTestCase {
  var temporary: TemporaryDirectory!
  override func setUp() { temporary = TemporaryDirectory() }
  override func tearDown() { temporary = nil }

  private func requireKeyring() throws {
    try XCTSkipUnless(TestKeyring.isAvailable, "no private Secret Service; run the tests via tools/test.sh")
  }

  /// Makes a Secret Service vault in `home`, then loses the home (manifest, container and all),
  /// as a deleted or unrestored data directory would; its keys stay in the Secret Service.
  private func vaultWithLostHome(_ home: String) throws -> String {
    let created = try vault(["--home", home, "init", "--store", "secret-service"])
    XCTAssertEqual(created.status, 0, created.error)
    let manifest = try ManifestFile.read(home: home).manifest
    try FileManager.default.removeItem(atPath: home)
    return manifest.vaultID
  }

  func testInitWithAKeyfileRefusesAHomeWhoseSecretServiceKeysRemain() throws {
    try requireKeyring()
    let home = temporary.sub("home")
    let id = try vaultWithLostHome(home)
    let keyfile = temporary.sub("keys/new.keys")
    let run = try vault(["--home", home, "init", "--store", "keyfile", "--keyfile", keyfile])
    XCTAssertEqual(run.status, 1, run.error)
    XCTAssertTrue(run.error.contains("already holds keys for a vault at \(home)"), run.error)
    XCTAssertTrue(run.error.contains(id), run.error)
    XCTAssertFalse(ManifestFile.exists(home: home), "nothing was created")
    XCTAssertFalse(FileManager.default.fileExists(atPath: keyfile), "no keyfile was made")

    // The library refuses the same way, whatever resolver the app passes for real stores.
    XCTAssertThrowsError(
      try Vault.create(home: home, store: StoreDescriptor(kind: .keyfile, keyfile: keyfile))
    ) { XCTAssertEqual($0 as? VaultError, .orphanedKeys(home: home, vaultIDs: [id])) }
  }

  func testAutoFallingBackBecauseTheCollectionIsLockedStillRefuses() throws {
    try requireKeyring()
    let home = temporary.sub("home")
    let id = try vaultWithLostHome(home)
    try TestKeyring.lock()
    defer { XCTAssertNoThrow(try TestKeyring.unlock()) }
    let keyfile = temporary.sub("keys/new.keys")
    let run = try vault(["--home", home, "init", "--keyfile", keyfile])
    XCTAssertEqual(run.status, 1, run.error)
    XCTAssertTrue(run.error.contains("locked"), "auto says why it would fall back: \(run.error)")
    XCTAssertTrue(run.error.contains("already holds keys for a vault at \(home)"), run.error)
    XCTAssertTrue(run.error.contains(id), run.error)
    XCTAssertFalse(ManifestFile.exists(home: home))
    XCTAssertFalse(FileManager.default.fileExists(atPath: keyfile))
  }

  func testAnotherHomesKeysDoNotBlockInit() throws {
    try requireKeyring()
    _ = try vaultWithLostHome(temporary.sub("lost"))
    let run = try vault(
      ["--home", temporary.sub("fresh"), "init", "--store", "keyfile", "--keyfile", temporary.sub("k/k.keys")])
    XCTAssertEqual(run.status, 0, run.error)
    XCTAssertFalse(run.error.contains("skipped"), run.error)
  }

  func testWithoutASessionBusTheCheckIsSkippedWithANote() throws {
    let runtime = temporary.sub("runtime")
    try FileManager.default.createDirectory(atPath: runtime, withIntermediateDirectories: true)
    let env = environment(["DBUS_SESSION_BUS_ADDRESS": nil, "DISPLAY": nil, "XDG_RUNTIME_DIR": runtime])
    let run = try vault(
      ["--home", temporary.sub("home"), "init", "--store", "keyfile", "--keyfile", temporary.sub("k/k.keys")],
      environment: env)
    XCTAssertEqual(run.status, 0, run.error)
    XCTAssertTrue(run.error.contains("skipped the check for keys a lost manifest left"), run.error)
    XCTAssertTrue(run.error.contains("no D-Bus session bus"), run.error)
  }

  func testWithoutAProviderTheCheckIsSkippedWithANote() throws {
    let bus = try PrivateBus(directory: temporary.path)
    defer { bus.stop() }
    let env = environment(["DBUS_SESSION_BUS_ADDRESS": bus.address, "DISPLAY": nil])
    let run = try vault(
      ["--home", temporary.sub("home"), "init", "--keyfile", temporary.sub("k/k.keys")], environment: env)
    XCTAssertEqual(run.status, 0, run.error)
    XCTAssertTrue(run.error.contains("skipped the check for keys a lost manifest left"), run.error)
  }
}
