import Foundation
import VaultCrypto
import VaultTestSupport
import XCTest

@testable import VaultKeys

final class ManifestTests: XCTestCase {
  private func sample() throws -> Manifest {
    var manifest = Manifest(
      vaultID: try KeyringID.random(), store: StoreDescriptor(kind: .keyfile, keyfile: "/k"), createdAt: "t")
    manifest.setState(.active, of: 1)
    return manifest
  }

  func testSignedManifestRoundTripsAndIs0600() throws {
    let temporary = TemporaryDirectory()
    let key = try SymmetricKey.generate()
    let manifest = try sample()
    try ManifestFile.write(try ManifestFile.sign(manifest, key: key), home: temporary.path)
    let read = try ManifestFile.read(home: temporary.path)
    XCTAssertEqual(read.manifest, manifest)
    XCTAssertFalse(read.isLegacy)
    XCTAssertTrue(try read.isAuthentic(under: key))
    XCTAssertFalse(try read.isAuthentic(under: try SymmetricKey.generate()), "another key does not verify")
    var info = stat()
    stat(ManifestFile.path(home: temporary.path), &info)
    XCTAssertEqual(info.st_mode & 0o777, 0o600)
    // The file stays JSON an older release can read far enough to see the format.
    let object = try JSONSerialization.jsonObject(with: Data(read.bytes)) as? [String: Any]
    XCTAssertEqual(object?["format"] as? Int, 3, "a version of suite 2 makes it format 3")
    XCTAssertEqual((object?["mac"] as? String)?.count, 64)
  }

  /// Until a version of suite 2 exists the manifest stays format 2, which the release before
  /// suites reads; from then on format 3, which that release refuses rather than seal format 1
  /// under a suite-2 key.
  func testTheFormatFollowsTheSuitesInIt() throws {
    let key = try SymmetricKey.generate()
    var manifest = try sample()
    for index in manifest.versions.indices { manifest.versions[index].suite = nil }
    let old = try ManifestFile.parse(try ManifestFile.sign(manifest, key: key), path: "m")
    XCTAssertEqual(old.manifest.format, 2)
    XCTAssertEqual(old.manifest.versions.map(\.effectiveSuite), manifest.versions.map { _ in 1 })
    manifest.versions[0].suite = 2
    XCTAssertEqual(try ManifestFile.parse(try ManifestFile.sign(manifest, key: key), path: "m").manifest.format, 3)
    manifest.versions[0].suite = 7
    XCTAssertThrowsError(try ManifestFile.parse(try ManifestFile.sign(manifest, key: key), path: "m")) {
      XCTAssertEqual($0 as? ManifestFile.Failure, .corrupt(path: "m", reason: "key version 1 has unknown suite 7"))
    }
  }

  func testAnyChangedByteFailsTheMAC() throws {
    let key = try SymmetricKey.generate()
    let bytes = try ManifestFile.sign(try sample(), key: key)
    // Flip the active version's digit and a byte of the MAC: both are refused.
    let text = String(decoding: bytes, as: UTF8.self)
    let edited = Array(text.replacingOccurrences(of: "\"active_version\" : 1", with: "\"active_version\" : 2").utf8)
    XCTAssertNotEqual(edited, bytes)
    if let parsed = try? ManifestFile.parse(edited, path: "m") {
      XCTAssertFalse(try parsed.isAuthentic(under: key))
    }
    var macFlipped = bytes
    macFlipped[macFlipped.count - 10] =
      macFlipped[macFlipped.count - 10] == UInt8(ascii: "a") ? UInt8(ascii: "b") : UInt8(ascii: "a")
    XCTAssertFalse(try ManifestFile.parse(macFlipped, path: "m").isAuthentic(under: key))
  }

  func testAFormat2ManifestWithoutItsMACIsRefused() throws {
    let key = try SymmetricKey.generate()
    let text = String(decoding: try ManifestFile.sign(try sample(), key: key), as: UTF8.self)
    let stripped = text.replacingOccurrences(
      of: #",\n  "mac" : "[0-9a-f]{64}"\n\}\n$"#, with: "\n}\n", options: .regularExpression)
    XCTAssertNotEqual(stripped, text)
    XCTAssertThrowsError(try ManifestFile.parse(Array(stripped.utf8), path: "m")) {
      XCTAssertEqual($0 as? ManifestFile.Failure, .unauthenticated(path: "m"))
    }
  }

  func testFieldsFromANewerReleaseSurviveARewrite() throws {
    let key = try SymmetricKey.generate()
    var text = String(decoding: try ManifestFile.sign(try sample(), key: key), as: UTF8.self)
    text = text.replacingOccurrences(
      of: "\"format\" : 3,", with: "\"format\" : 3,\n  \"future_guard\" : {\"keep\" : [1, 2]},")
    text = text.replacingOccurrences(of: "\"version\" : 1", with: "\"version\" : 1, \"future_flag\" : true")
    let parsed = try ManifestFile.parse(Array(text.utf8), path: "m")
    let rewritten = String(decoding: try ManifestFile.sign(parsed.manifest, key: key), as: UTF8.self)
    XCTAssertTrue(rewritten.contains("\"future_guard\""), rewritten)
    XCTAssertTrue(rewritten.contains("\"future_flag\" : true"), rewritten)
    let again = try ManifestFile.parse(Array(rewritten.utf8), path: "m")
    XCTAssertTrue(try again.isAuthentic(under: key))
  }

  func testMissingCorruptFutureAndOversizedManifestsAreDistinctAndNamedAsManifests() throws {
    let temporary = TemporaryDirectory()
    XCTAssertThrowsError(try ManifestFile.read(home: temporary.path)) {
      XCTAssertEqual($0 as? ManifestFile.Failure, .missing(home: temporary.path))
    }
    let path = ManifestFile.path(home: temporary.path)
    func write(_ text: String) throws {
      unlink(path)
      XCTAssertTrue(
        FileManager.default.createFile(atPath: path, contents: Data(text.utf8), attributes: [.posixPermissions: 0o600]))
    }
    try write("{\"format\": 1, \"vault_id\": ")
    XCTAssertThrowsError(try ManifestFile.read(home: temporary.path)) {
      XCTAssertEqual($0 as? ManifestFile.Failure, .corrupt(path: path, reason: "not valid manifest JSON"))
    }
    try write(
      """
      {"format": 9, "vault_id": "0011223344556677", "store": {"kind": "keyfile", "keyfile": "/k"},
       "active_version": 1, "versions": [], "containers": []}
      """)
    XCTAssertThrowsError(try ManifestFile.read(home: temporary.path)) {
      XCTAssertEqual($0 as? ManifestFile.Failure, .unsupportedFormat(path: path, format: 9))
    }
    try write(String(repeating: " ", count: ManifestFile.byteLimit + 1))
    XCTAssertThrowsError(try ManifestFile.read(home: temporary.path)) { error in
      XCTAssertEqual(error as? ManifestFile.Failure, .tooLarge(path: path, bytes: ManifestFile.byteLimit + 1))
      XCTAssertTrue(String(describing: error).contains("vault manifest"))
      XCTAssertFalse(String(describing: error).contains("keyfile"))
    }
  }

  func testAManifestOthersCanWriteIsRefused() throws {
    let temporary = TemporaryDirectory()
    try ManifestFile.write(try ManifestFile.sign(try sample(), key: try SymmetricKey.generate()), home: temporary.path)
    let path = ManifestFile.path(home: temporary.path)
    chmod(path, 0o666)
    XCTAssertThrowsError(try ManifestFile.read(home: temporary.path)) { error in
      XCTAssertTrue(String(describing: error).contains("chmod 600"), "\(error)")
    }
    chmod(path, 0o600)
    XCTAssertNoThrow(try ManifestFile.read(home: temporary.path))
    let other = temporary.sub("other")
    mkdir(other, 0o700)
    symlink(path, other + "/" + Manifest.fileName)
    XCTAssertThrowsError(try ManifestFile.read(home: other), "a symlinked manifest is refused")
  }

  func testDuplicateVersionsAndBadActiveVersionsAreCorrupt() throws {
    var manifest = try sample()
    manifest.versions.append(KeyVersionRecord(version: 1, state: .decryptOnly, createdAt: "t"))
    XCTAssertNotNil(manifest.invariantViolation())
    manifest = try sample()
    manifest.setState(.retired, of: 1)
    XCTAssertNotNil(manifest.invariantViolation())
    manifest = try sample()
    manifest.versions.append(KeyVersionRecord(version: 7, state: .decryptOnly, createdAt: "t"))
    XCTAssertEqual(manifest.invariantViolation(), "key version 7 is above highest_version 1")
  }

  func testRetiredHistoryIsCompactedButVersionsAreNeverReused() throws {
    var manifest = try sample()
    for version in UInt32(2)...UInt32(100) {
      manifest.setState(.retired, of: manifest.activeVersion)
      manifest.versions.append(KeyVersionRecord(version: version, state: .active, createdAt: "t"))
      manifest.activeVersion = version
      manifest.highestVersion = version
      manifest.externalSealVersions.append(version - 1)
      manifest.compactRetiredHistory()
    }
    XCTAssertEqual(manifest.versions.count, Manifest.retiredHistoryLimit + 1)
    XCTAssertTrue(manifest.isRetired(1), "a compacted version is still known as retired")
    XCTAssertTrue(manifest.isRetired(91))
    XCTAssertFalse(manifest.isRetired(100))
    XCTAssertFalse(manifest.isRetired(101), "a version never made is not retired")
    XCTAssertEqual(manifest.externalSealVersions, [], "pins of retired versions are dropped")
  }

  func testFileLockExcludesASecondHolder() throws {
    let temporary = TemporaryDirectory()
    let path = temporary.sub("lock")
    let first = try FileLock(path: path)
    // flock locks belong to the open file description, so a second open in this process contends.
    let fd = open(path, O_RDWR)
    defer { close(fd) }
    XCTAssertNotEqual(flock(fd, LOCK_EX | LOCK_NB), 0, "held lock must exclude others")
    first.release()
    XCTAssertEqual(flock(fd, LOCK_EX | LOCK_NB), 0)
  }
}
