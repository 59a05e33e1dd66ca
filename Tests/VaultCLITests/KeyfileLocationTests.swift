import Foundation
import Vault
import VaultKeys
import VaultTestSupport
import XCTest

/// Issue 8, item 18: a keyfile inside the vault home, or beside a registered container, would
/// travel with every copy of the data it protects; vault refuses it and says where it belongs.
final class KeyfileLocationTests: XCTestCase {
  var temporary: TemporaryDirectory!
  override func setUp() { temporary = TemporaryDirectory() }
  override func tearDown() { temporary = nil }

  func testInitRefusesAKeyfileInsideTheHome() throws {
    let home = temporary.sub("home")
    for keyfile in [home + "/vault.keys", home + "/keys/vault.keys"] {
      let run = try vault(["--home", home, "init", "--store", "keyfile", "--keyfile", keyfile])
      XCTAssertEqual(run.status, 1, run.error)
      XCTAssertTrue(run.error.contains("is inside \(home)"), run.error)
      XCTAssertTrue(run.error.contains("outside"), run.error)
      XCTAssertFalse(ManifestFile.exists(home: home), "no vault was left behind")
      XCTAssertFalse(FileManager.default.fileExists(atPath: keyfile), "no key was written into the data")
    }
  }

  func testAKeyfileBesideARegisteredContainerIsRefused() throws {
    let home = temporary.sub("home")
    let shared = temporary.sub("shared")
    let keyfile = shared + "/vault.keys"
    XCTAssertEqual(try vault(["--home", home, "init", "--store", "keyfile", "--keyfile", keyfile]).status, 0)
    let sealed = try vault(["--home", home, "seal", "--context", "c"], input: Array("x".utf8))
    XCTAssertEqual(sealed.status, 0, sealed.error)

    // A container in the keyfile's directory would make the keys travel with it: it is refused
    // before anything is created or registered, and the vault keeps working.
    let put = try vault(
      ["--home", home, "queue", "put", "--queue", "outbox", "--container", shared + "/queue.sqlite"],
      input: Array("payload".utf8))
    XCTAssertEqual(put.status, 1, put.error)
    XCTAssertTrue(put.error.contains("beside the vault's keyfile \(keyfile)"), put.error)
    XCTAssertFalse(FileManager.default.fileExists(atPath: shared + "/queue.sqlite"))
    XCTAssertFalse(
      try ManifestFile.read(home: home).manifest.containers.contains { $0.path == shared + "/queue.sqlite" })
    let open = try vault(["--home", home, "open", "--context", "c"], input: sealed.output)
    XCTAssertEqual(open.status, 0, open.error)
    XCTAssertEqual(open.output, Array("x".utf8))
  }
}
