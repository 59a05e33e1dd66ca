import Foundation
import Vault
import VaultCrypto
import VaultKeys
import VaultQueue
import VaultTestSupport
import XCTest

@testable import VaultBackup

/// A bundle whose passphrase, manifest and hashes all check out but whose container snapshot is
/// not a readable container: what a writer with a bug, or anyone holding the passphrase, could
/// make. Found by the bundle fuzz target (`tools/fuzz.sh bundle`): verification threw the
/// container's own `QueueError.corrupt`, whose advice, "restore it from a backup", sends the user
/// back to this very bundle, and which `verify`'s documentation did not list.
final class BundleSnapshotTests: XCTestCase {
  var temporary: TemporaryDirectory!
  let cheap = ScryptParameters(logN: 10, r: 8, p: 1)

  override func setUp() { temporary = TemporaryDirectory() }
  override func tearDown() { temporary = nil }

  /// A real bundle of one container with records, then the same bundle with that snapshot
  /// replaced by `replacement` (same size), its SHA-256 in the manifest, the manifest's in the
  /// header and the key section sealed again over the new header: everything authentic.
  private func bundle(
    replacingSnapshotWith replacement: ([UInt8]) -> [UInt8],
    changingManifest change: (inout BackupManifest) -> Void = {
      _ in
    }
  ) throws -> String {
    let vault = try Vault.create(
      home: temporary.sub("home"), store: StoreDescriptor(kind: .keyfile, keyfile: temporary.sub("keys/v.keys")))
    let container = try QueueContainer(path: temporary.sub("a.sqlite"), vault: vault)
    for index in 0..<3 { _ = try container.enqueue(Array("record \(index)".utf8), queue: "q") }
    try FileManager.default.createDirectory(atPath: temporary.sub("backups"), withIntermediateDirectories: true)
    let written = try Backup.create(
      vault: vault, to: temporary.sub("backups"), passphrase: try Passphrase("pass"), keep: 1, toolVersion: "test",
      clock: Date.init, kdf: cheap
    ).bundle
    let bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: written)))

    let header = BundleLayout.Header(parsing: Array(bytes[0..<BundleLayout.headerCount]))
    let manifestEnd = BundleLayout.headerCount + Int(header.manifestCount)
    let keyEnd = manifestEnd + Int(header.keySectionCount)
    var manifest = try JSONDecoder().decode(
      BackupManifest.self, from: Data(bytes[BundleLayout.headerCount..<manifestEnd]))
    let section = Array(bytes[manifestEnd..<keyEnd])
    let prefix = BundleLayout.KeyPrefix(parsing: Array(section.prefix(BundleLayout.keyPrefixCount)))
    let derived = try BundleLayout.passphraseKeys(
      try Passphrase("pass"), salt: prefix.salt, parameters: prefix.parameters)
    let body = Array(section[BundleLayout.keyPrefixCount...])
    var plaintext = [UInt8](repeating: 0, count: body.count - AESGCMKey.tagByteCount)
    try seal(derived.wrap, prefix, aad: header.bytes + prefix.bytes, body, into: &plaintext, opening: true)

    XCTAssertEqual(manifest.containers.count, 1)
    let snapshot = replacement(Array(bytes[keyEnd...]))
    manifest.containers[0].size = UInt64(snapshot.count)
    manifest.containers[0].sha256 = try SHA256.hash(snapshot).map { String(format: "%02x", $0) }.joined()
    change(&manifest)
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
    let manifestBytes = Array(try encoder.encode(manifest))
    let newHeader = BundleLayout.Header(
      manifestCount: UInt32(manifestBytes.count), keySectionCount: header.keySectionCount,
      manifestHash: try SHA256.hash(manifestBytes))
    var sealed = [UInt8](repeating: 0, count: body.count)
    try seal(derived.wrap, prefix, aad: newHeader.bytes + prefix.bytes, plaintext, into: &sealed, opening: false)
    let path = temporary.sub("changed-\(UUID().uuidString).vaultbackup")
    try Data(newHeader.bytes + manifestBytes + prefix.bytes + sealed + snapshot).write(to: URL(fileURLWithPath: path))
    return path
  }

  private func seal(
    _ key: SymmetricKey, _ prefix: BundleLayout.KeyPrefix, aad: [UInt8], _ input: [UInt8], into output: inout [UInt8],
    opening: Bool
  ) throws {
    try input.withUnsafeBytes { input in
      try prefix.nonce.withUnsafeBytes { nonce in
        try aad.withUnsafeBytes { aad in
          try output.withUnsafeMutableBytes {
            if opening {
              try AESGCMKey(key).open(input, nonce: nonce, authenticating: aad, into: $0)
            } else {
              try AESGCMKey(key).seal(input, nonce: nonce, authenticating: aad, into: $0)
            }
          }
        }
      }
    }
  }

  func testAnAuthenticSnapshotThatIsNoDatabaseIsADamagedSnapshotOfTheBundle() throws {
    let path = try bundle { snapshot in [UInt8](repeating: 0x42, count: snapshot.count) }
    XCTAssertThrowsError(try Backup.verify(bundle: path, passphrase: try Passphrase("pass"))) { error in
      guard case .damagedSnapshot(path, 1, _, "queue.corrupt") = error as? BackupError else {
        return XCTFail("\(error)")
      }
      XCTAssertTrue("\(error)".contains("restore from another bundle"), "\(error)")
    }
  }

  func testAnAuthenticSnapshotWithoutTheContainersTablesIsADamagedSnapshot() throws {
    // A valid SQLite database with no `records` or `meta` table.
    let empty = temporary.sub("empty.sqlite")
    let made = try Spawn.run("/usr/bin/sqlite3", [empty, "CREATE TABLE t(x); INSERT INTO t VALUES (1);"])
    XCTAssertEqual(made.status, 0, made.error)
    let database = [UInt8](try Data(contentsOf: URL(fileURLWithPath: empty)))
    let path = try bundle { _ in database }
    XCTAssertThrowsError(try Backup.verify(bundle: path, passphrase: try Passphrase("pass"))) { error in
      guard case .damagedSnapshot(path, 1, _, "queue.not-a-queue-container") = error as? BackupError else {
        return XCTFail("\(error)")
      }
    }
  }

  /// The untouched bundle, rebuilt the same way, still verifies: the helper above changes only
  /// what each test replaces.
  func testTheRebuiltBundleVerifiesWhenTheSnapshotIsUnchanged() throws {
    let path = try bundle { $0 }
    XCTAssertEqual(try Backup.verify(bundle: path, passphrase: try Passphrase("pass")).records, 3)
  }

  /// An authentic bundle whose manifest records a container at "/" (or at another path that
  /// cannot be a container file) passed `backup --verify`, and `restore` then failed half-way,
  /// naming the new container after "/" (outside attacker review). Verification, the
  /// passphrase-less check and restore now refuse it with one error, and restore makes no home.
  func testAContainerPathThatCannotBeAFileIsRefusedByCheckVerifyAndRestoreAlike() throws {
    var made = false
    for hostile in ["/", "", "relative.sqlite", "/data/", "/data/..", "/data/../a.sqlite", "/data/./a.sqlite", "/a\0b"]
    {
      if made {
        // One vault per bundle: the helper makes it in the same home.
        temporary = TemporaryDirectory()
      }
      made = true
      let path = try bundle(replacingSnapshotWith: { $0 }, changingManifest: { $0.containers[0].path = hostile })
      let expected = BackupError.damagedManifest(path: path, reason: "container 1's path is not a file path")
      XCTAssertThrowsError(try Backup.check(bundle: path), hostile.debugDescription) {
        XCTAssertEqual($0 as? BackupError, expected, hostile.debugDescription)
      }
      XCTAssertThrowsError(try Backup.verify(bundle: path, passphrase: try Passphrase("pass"))) {
        XCTAssertEqual($0 as? BackupError, expected, hostile.debugDescription)
      }
      let home = temporary.sub("restored")
      XCTAssertThrowsError(
        try Backup.restore(
          bundle: path, passphrase: try Passphrase("pass"), into: home,
          store: StoreDescriptor(kind: .keyfile, keyfile: temporary.sub("keys2/v.keys")))
      ) {
        XCTAssertEqual($0 as? BackupError, expected, hostile.debugDescription)
      }
      XCTAssertFalse(FileManager.default.fileExists(atPath: home), hostile.debugDescription)
    }
  }
}
