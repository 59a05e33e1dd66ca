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

  // MARK: - A keyfile a killed init left

  private struct Killed: Error {}

  /// Runs a `create` into `home` with the keyfile `keyfile` that stops as a process killed at the
  /// first `storeKey` (or at the first manifest copy) would: the store throws there and, not being
  /// a `KeyfileStore`, gets none of the clean-up `create` does for a failure it sees. Then removes
  /// the manifest, as a kill before it was renamed into place would leave the home.
  private func killedCreate(home: String, keyfile: String, atManifestCopy: Bool) {
    let resolver = KeyStoreResolver { descriptor, _ in
      InterposedKeyStore(KeyfileStore(path: descriptor.keyfile ?? "")) { call in
        if case .storeKey = call { throw Killed() }
        if atManifestCopy, call == .storeRecord(.manifestMirror) { throw Killed() }
        return .forward
      }
    }
    XCTAssertThrowsError(
      try Vault.create(home: home, store: StoreDescriptor(kind: .keyfile, keyfile: keyfile), resolver: resolver))
    unlink(ManifestFile.path(home: home))
    XCTAssertTrue(FileManager.default.fileExists(atPath: keyfile), "the killed init left its keyfile")
  }

  func testAKeyfileWithOnlyTheIntegrityKeyIsReplaced() throws {
    let keyfile = temporary.sub("keys/v.keys")
    killedCreate(home: temporary.sub("home"), keyfile: keyfile, atManifestCopy: true)
    XCTAssertTrue(Vault.isKeyfileLeftByKilledInit(keyfile))
    let vault = try Vault.create(home: temporary.sub("home"), store: StoreDescriptor(kind: .keyfile, keyfile: keyfile))
    XCTAssertEqual(try KeyfileStore(path: keyfile).storedVersions(keyring: vault.keyringID), [1])
    var info = stat()
    XCTAssertEqual(stat(keyfile, &info), 0)
    XCTAssertEqual(info.st_mode & 0o7777, 0o600)
  }

  func testAKeyfileWithAPendingOnlyManifestCopyAndNoKeyIsReplaced() throws {
    let keyfile = temporary.sub("keys/v.keys")
    killedCreate(home: temporary.sub("home"), keyfile: keyfile, atManifestCopy: false)
    XCTAssertTrue(Vault.isKeyfileLeftByKilledInit(keyfile))
    // Another home may take it over too: it protects nothing anywhere.
    let vault = try Vault.create(home: temporary.sub("other"), store: StoreDescriptor(kind: .keyfile, keyfile: keyfile))
    XCTAssertEqual(try KeyfileStore(path: keyfile).storedVersions(keyring: vault.keyringID), [1])
  }

  func testAKeyfileOfAVaultThatLostItsKeyIsStillRefused() throws {
    let keyfile = temporary.sub("keys/v.keys")
    let vault = try Vault.create(home: temporary.sub("home"), store: StoreDescriptor(kind: .keyfile, keyfile: keyfile))
    XCTAssertTrue(try KeyfileStore(path: keyfile).deleteKey(keyring: vault.keyringID, version: 1))
    // No key, but its manifest copy has an active version: records were sealed under it.
    XCTAssertFalse(Vault.isKeyfileLeftByKilledInit(keyfile))
    let before = try Data(contentsOf: URL(fileURLWithPath: keyfile))
    XCTAssertThrowsError(
      try Vault.create(home: temporary.sub("new"), store: StoreDescriptor(kind: .keyfile, keyfile: keyfile))
    ) { XCTAssertEqual($0 as? VaultError, .keyfileExists(path: keyfile)) }
    XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: keyfile)), before)
  }

  func testAKeyfileWithAnyKeyOrAnUnknownRecordOrBadModeIsStillRefused() throws {
    let keyring = try KeyringID.random()
    let withKey = temporary.sub("a/with-key.keys")
    try KeyfileStore(path: withKey).storeKey(try SymmetricKey.generate(), keyring: keyring, version: 7)
    let unknownRecord = temporary.sub("b/unknown.keys")
    var contents = KeyfileContents(keyring: keyring)
    contents.records["integrity-key"] = [UInt8](repeating: 1, count: 32).withUnsafeBytes { SecureBytes(copying: $0) }
    contents.records["from-a-newer-release"] = [UInt8]([0]).withUnsafeBytes { SecureBytes(copying: $0) }
    try FileManager.default.createDirectory(atPath: temporary.sub("b"), withIntermediateDirectories: true)
    XCTAssertEqual(chmod(temporary.sub("b"), 0o700), 0)
    try contents.serialized(path: unknownRecord).withUnsafeBytes {
      try SecureFile.atomicWrite(unknownRecord, bytes: $0, mode: 0o600)
    }
    let readable = temporary.sub("c/readable.keys")
    killedCreate(home: temporary.sub("home"), keyfile: readable, atManifestCopy: true)
    XCTAssertEqual(chmod(readable, 0o644), 0)
    let linked = temporary.sub("d/linked.keys")
    killedCreate(home: temporary.sub("home2"), keyfile: temporary.sub("d/target.keys"), atManifestCopy: true)
    XCTAssertEqual(symlink(temporary.sub("d/target.keys"), linked), 0)
    // Never followed here; `create` itself resolves a keyfile path's links, and judges the target.
    XCTAssertFalse(Vault.isKeyfileLeftByKilledInit(linked))
    let garbage = temporary.sub("e/garbage.keys")
    try FileManager.default.createDirectory(atPath: temporary.sub("e"), withIntermediateDirectories: true)
    XCTAssertTrue(
      FileManager.default.createFile(atPath: garbage, contents: Data(), attributes: [.posixPermissions: 0o600]))

    for keyfile in [withKey, unknownRecord, readable, garbage] {
      XCTAssertFalse(Vault.isKeyfileLeftByKilledInit(keyfile), keyfile)
      XCTAssertThrowsError(
        try Vault.create(home: temporary.sub("new"), store: StoreDescriptor(kind: .keyfile, keyfile: keyfile))
      ) { XCTAssertEqual($0 as? VaultError, .keyfileExists(path: keyfile), keyfile) }
      XCTAssertFalse(ManifestFile.exists(home: temporary.sub("new")), keyfile)
    }
  }
}
