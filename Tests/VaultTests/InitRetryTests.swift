import Foundation
import VaultCrypto
import VaultKeys
import VaultTestSupport
import XCTest

@testable import Vault

/// An `init` killed part-way sealed nothing, and running it again must not be refused over what
/// it left. What could be someone's data is still refused. (Tests/VaultCLITests/InitKillTests.swift
/// kills the real binary at each point.)
final class InitRetryTests: XCTestCase {
  var temporary: TemporaryDirectory!

  override func setUp() { temporary = TemporaryDirectory() }
  override func tearDown() { temporary = nil }

  /// Writes `name` in `home` (made 0700 if missing) with mode 0600.
  private func plant(_ name: String, in home: String) throws {
    try FileManager.default.createDirectory(atPath: home, withIntermediateDirectories: true)
    let path = home + "/" + name
    XCTAssertTrue(FileManager.default.createFile(atPath: path, contents: Data("{\n".utf8)))
    XCTAssertEqual(chmod(path, 0o600), 0)
  }

  func testAHomeHoldingOnlyTheLockAndManifestTemporariesIsEmptyAndTheyAreRemoved() throws {
    let home = temporary.sub("home")
    try plant("vault.lock", in: home)
    try plant("manifest.json.tmp-0123456789ab", in: home)
    try plant("manifest.json.tmp-ffffffffffff", in: home)
    let vault = try Vault.create(home: home, store: StoreDescriptor(kind: .keyfile, keyfile: temporary.sub("k/v.keys")))
    XCTAssertEqual(vault.manifest.versions.map(\.state), [.active])
    XCTAssertEqual(
      try FileManager.default.contentsOfDirectory(atPath: home).sorted(), ["manifest.json", "vault.lock"])
  }

  func testOnlyExactManifestTemporaryNamesOfRegularFilesCount() throws {
    for name in [
      "manifest.json.tmp-0123456789AB", "manifest.json.tmp-0123456789a", "manifest.json.tmp-0123456789abc",
      "manifest.json.tmp-", "manifest.json.tmp-0123456789ag", "manifest.json.tmp-12345",
      "queue.sqlite.tmp-0123456789ab",
    ] {
      let home = temporary.sub("home-\(name)")
      try plant(name, in: home)
      XCTAssertThrowsError(
        try Vault.create(home: home, store: StoreDescriptor(kind: .keyfile, keyfile: temporary.sub("k/\(name).keys")))
      ) { XCTAssertEqual($0 as? VaultError, .homeNotEmpty(home: home), name) }
      XCTAssertTrue(FileManager.default.fileExists(atPath: home + "/" + name), "\(name) is left alone")
    }
    // A symlink with the right name is not a file a killed write left, and is never followed.
    let home = temporary.sub("linked")
    try FileManager.default.createDirectory(atPath: home, withIntermediateDirectories: true)
    try plant("target", in: temporary.sub("elsewhere"))
    XCTAssertEqual(symlink(temporary.sub("elsewhere/target"), home + "/manifest.json.tmp-0123456789ab"), 0)
    XCTAssertThrowsError(
      try Vault.create(home: home, store: StoreDescriptor(kind: .keyfile, keyfile: temporary.sub("k/l.keys")))
    ) { XCTAssertEqual($0 as? VaultError, .homeNotEmpty(home: home)) }
    XCTAssertTrue(FileManager.default.fileExists(atPath: temporary.sub("elsewhere/target")))
  }

  func testManifestTemporariesBesideOtherFilesStillMakeTheHomeNotEmpty() throws {
    let home = temporary.sub("home")
    try plant("manifest.json.tmp-0123456789ab", in: home)
    try plant("queue.sqlite", in: home)
    XCTAssertThrowsError(
      try Vault.create(home: home, store: StoreDescriptor(kind: .keyfile, keyfile: temporary.sub("k/v.keys")))
    ) { XCTAssertEqual($0 as? VaultError, .homeNotEmpty(home: home)) }
    XCTAssertTrue(FileManager.default.fileExists(atPath: home + "/manifest.json.tmp-0123456789ab"), "nothing changed")
  }
}
