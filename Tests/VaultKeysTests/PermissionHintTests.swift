import Foundation
import VaultCrypto
import VaultTestSupport
import XCTest

@testable import VaultKeys

/// Issue 8, item 17: a permission hint names the real fix. It never asks to `chmod` a shared
/// directory such as /tmp, nor root to `chown` another user's file or directory to root.
final class PermissionHintTests: XCTestCase {
  var temporary: TemporaryDirectory!
  var keyring: KeyringID!

  override func setUpWithError() throws {
    temporary = TemporaryDirectory()
    keyring = try KeyringID.random()
  }

  override func tearDown() { temporary = nil }

  private func refusal(_ path: String, file: StaticString = #filePath, line: UInt = #line) -> String {
    do {
      try KeyfileStore(path: path).storeKey(try .generate(), keyring: keyring, version: 1)
      XCTFail("expected a refusal", file: file, line: line)
      return ""
    } catch {
      XCTAssertNotNil(error as? KeyStoreError, "\(error)", file: file, line: line)
      return String(describing: error)
    }
  }

  func testASharedDirectoryIsNeverToBeChmodded() throws {
    let shared = temporary.sub("shared")
    XCTAssertEqual(mkdir(shared, 0o700), 0)
    XCTAssertEqual(chmod(shared, 0o1777), 0)
    let text = refusal(shared + "/v.keys")
    XCTAssertFalse(text.contains("chmod"), text)
    XCTAssertTrue(text.contains("shared"), text)
    XCTAssertTrue(text.contains("private directory"), text)
    XCTAssertFalse(FileManager.default.fileExists(atPath: shared + "/v.keys"), "nothing was written")
    var info = stat()
    XCTAssertEqual(stat(shared, &info), 0)
    XCTAssertEqual(UInt32(info.st_mode) & 0o7777, 0o1777, "the shared directory is left as it was")
  }

  func testAKeyfileInTmpItselfGetsNoChmodOrChownOfTmp() throws {
    let path = "/tmp/vault-hint-\(keyring.hex).keys"
    defer { unlink(path) }
    let text = refusal(path)
    XCTAssertFalse(text.contains("chmod 700 /tmp"), text)
    XCTAssertFalse(text.contains("chown"), text)
    XCTAssertTrue(text.contains("private directory"), text)
    XCTAssertFalse(FileManager.default.fileExists(atPath: path), "nothing was written")
  }

  func testAWorldWritableDirectoryWithoutStickyBitIsSharedToo() throws {
    let shared = temporary.sub("open")
    XCTAssertEqual(mkdir(shared, 0o700), 0)
    XCTAssertEqual(chmod(shared, 0o777), 0)
    let text = refusal(shared + "/v.keys")
    XCTAssertFalse(text.contains("chmod"), text)
    XCTAssertTrue(text.contains("private directory"), text)
  }

  func testAPrivateDirectoryOfYoursThatIsMerelyReadableStillSaysChmod700() throws {
    let mine = temporary.sub("mine")
    XCTAssertEqual(mkdir(mine, 0o750), 0)
    XCTAssertEqual(chmod(mine, 0o750), 0)
    let text = refusal(mine + "/v.keys")
    XCTAssertTrue(text.contains("chmod 700 \(mine)"), text)
  }

  func testRootIsNeverToldToTakeAnotherUsersDirectory() throws {
    try XCTSkipUnless(geteuid() == 0, "changing a directory's owner needs root (CI runs as root)")
    let theirs = temporary.sub("theirs")
    XCTAssertEqual(mkdir(theirs, 0o700), 0)
    XCTAssertEqual(chown(theirs, 4242, 4242), 0)
    let text = refusal(theirs + "/v.keys")
    XCTAssertFalse(text.contains("chown"), text)
    XCTAssertTrue(text.contains("run as uid 4242"), text)
  }

  func testRootIsNeverToldToTakeAnotherUsersKeyfile() throws {
    try XCTSkipUnless(geteuid() == 0, "changing a file's owner needs root (CI runs as root)")
    let store = KeyfileStore(path: temporary.sub("keys/v.keys"))
    try store.storeKey(try .generate(), keyring: keyring, version: 1)
    XCTAssertEqual(chown(store.path, 4242, 4242), 0)
    XCTAssertEqual(chown(temporary.sub("keys"), 4242, 4242), 0)
    XCTAssertThrowsError(try store.loadKey(keyring: keyring, version: 1)) { error in
      let text = String(describing: error)
      XCTAssertFalse(text.contains("chown"), text)
      XCTAssertTrue(text.contains("run as uid 4242"), text)
    }
  }

  /// Another user's keyfile in a directory of one's own was written there by vault run as that
  /// user: it is given back with chown (an operator review was sent to run as uid 1001, who was
  /// then told to run as uid 0, since the directory is root's).
  func testAKeyfileOfAnotherUserInOnesOwnDirectoryIsGivenBack() throws {
    try XCTSkipUnless(geteuid() == 0, "changing a file's owner needs root (CI runs as root)")
    let store = KeyfileStore(path: temporary.sub("keys/v.keys"))
    try store.storeKey(try .generate(), keyring: keyring, version: 1)
    XCTAssertEqual(chown(store.path, 4242, 4242), 0)
    XCTAssertThrowsError(try store.loadKey(keyring: keyring, version: 1)) { error in
      let text = String(describing: error)
      XCTAssertTrue(text.contains("while its directory is yours (uid 0)"), text)
      XCTAssertTrue(text.contains("give it back: chown 0 \(store.path)"), text)
      XCTAssertFalse(text.contains("run as uid 4242, its owner"), text)
    }
  }
}
