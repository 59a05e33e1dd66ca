import Foundation
import VaultKeys
import VaultTestSupport
import XCTest

@testable import Vault
@testable import VaultQueue

/// Format 2 in queue containers: contexts carry the container id, and a vault whose key versions
/// are from before format 2 seals format 1 until its next rotation, which converts every record.
final class EnvelopeFormatTwoQueueTests: XCTestCase {
  var temporary: TemporaryDirectory!
  var store: InMemoryKeyStore!

  override func setUpWithError() throws {
    temporary = TemporaryDirectory()
    store = InMemoryKeyStore()
  }

  override func tearDown() { temporary = nil }

  private func makeVault(suiteOne: Bool) throws -> Vault {
    let home = temporary.sub("home")
    let vault = try Vault.create(home: home, store: StoreDescriptor(kind: .memory), resolver: .fixed(store))
    guard suiteOne else { return vault }
    // What the release before format 2 wrote: versions without a suite (suite 1), manifest format 2.
    try vault.withManifestLock {
      var manifest = vault.manifest
      manifest.versions[0].suite = nil
      try vault.save(manifest)
    }
    let reopened = try Vault.open(home: home, resolver: .fixed(store))
    XCTAssertEqual(try ManifestFile.read(home: home).manifest.format, 2)
    return reopened
  }

  private func sqlite(_ path: String, _ sql: String) throws {
    let run = try Spawn.run("/usr/bin/sqlite3", [path, sql])
    XCTAssertEqual(run.status, 0, run.error)
  }

  func testARowCopiedIntoAnotherContainerOfTheSameVaultDoesNotOpenThere() throws {
    let vault = try makeVault(suiteOne: false)
    let first = try QueueContainer(path: temporary.sub("a.sqlite"), vault: vault)
    let second = try QueueContainer(path: temporary.sub("b.sqlite"), vault: vault)
    XCTAssertNotEqual(first.containerID, second.containerID)
    let id = UUID()
    try first.enqueue(Array("moved record".utf8), queue: "outbox", id: id)
    try sqlite(
      temporary.sub("b.sqlite"),
      "ATTACH '\(temporary.sub("a.sqlite"))' AS a; INSERT INTO records SELECT * FROM a.records;")
    XCTAssertEqual(try second.claim(queue: "outbox"), [], "the copied row is not handed out")
    XCTAssertEqual(try second.stats().byState["review"], 1, "it is kept for review, counted undecryptable")
    XCTAssertEqual(try first.claim(queue: "outbox").map(\.payloadBytes), [Array("moved record".utf8)])
  }

  func testAVaultFromBeforeFormatTwoSealsFormatOneUntilRotationConvertsEveryRecord() throws {
    let vault = try makeVault(suiteOne: true)
    XCTAssertFalse(Vault.warnings(vault.manifest).isEmpty, "status and doctor say to rotate")
    let path = temporary.sub("queue.sqlite")
    let queue = try QueueContainer(path: path, vault: vault, configuration: QueueConfiguration(resealBatch: 3))
    var ids: [UUID] = []
    for i in 0..<10 {
      let id = UUID()
      ids.append(id)
      try queue.enqueue(Array("record \(i)".utf8), queue: i % 2 == 0 ? "outbox" : "telemetry", id: id)
    }
    let external = try vault.seal(Array("outside".utf8), context: Array("file|1".utf8))
    XCTAssertEqual(external[3], 1)
    XCTAssertEqual(try formats(path), Array(repeating: 1, count: 10))

    let report = try vault.rotate(containers: QueueContainerProvider())
    XCTAssertEqual(report.resealed[path], 10)
    XCTAssertEqual(vault.manifest.record(2)?.suite, 2)
    XCTAssertTrue(Vault.warnings(vault.manifest).isEmpty)
    XCTAssertEqual(try formats(path), Array(repeating: 2, count: 10))
    XCTAssertEqual(try queue.recordCounts().byVersion, [2: 10])
    var payloads: [UUID: [UInt8]] = [:]
    for name in ["outbox", "telemetry"] {
      for record in try queue.claim(queue: name) { payloads[record.id] = record.payloadBytes }
    }
    XCTAssertEqual(
      payloads, Dictionary(uniqueKeysWithValues: ids.enumerated().map { ($1, Array("record \($0)".utf8)) }))
    XCTAssertEqual(try vault.open(external, context: Array("file|1".utf8)), Array("outside".utf8), "version 1 kept")
    XCTAssertEqual(try vault.seal(Array("new".utf8), context: Array("c".utf8))[3], 2)
  }

  /// A suite-1 version compacted out of the manifest whose key is still stored and whose record a
  /// container still holds is listed again as suite 1 (what its envelopes say), never as the
  /// current suite: then the record opens and the next rotation re-seals it.
  func testAVersionListedAgainKeepsTheSuiteItsEnvelopesUse() throws {
    let vault = try makeVault(suiteOne: true)
    let path = temporary.sub("queue.sqlite")
    let queue = try QueueContainer(path: path, vault: vault)
    let id = UUID()
    try queue.enqueue(Array("sealed under version 1".utf8), queue: "outbox", id: id)
    // A new active version without re-sealing, then version 1 compacted away (as after many
    // rotations) while its key stays in the store and its record in a restored container.
    try vault.withManifestLock {
      try vault.addPendingVersion()
      try vault.completePendingVersion()
      var manifest = vault.manifest
      manifest.versions.removeAll { $0.version == 1 }
      try vault.save(manifest)
    }
    XCTAssertNil(vault.manifest.record(1))
    // Rotation takes a container below a compacted version for an older copy of itself; the way
    // out it names: forget it while it is away, put it back, open it (registered anew).
    XCTAssertThrowsError(try vault.rotate(containers: QueueContainerProvider())) { error in
      guard case .olderCopy? = error as? RotationError else { return XCTFail("\(error)") }
    }
    XCTAssertEqual(rename(path, path + ".away"), 0)
    _ = try vault.forgetContainer(at: path)
    XCTAssertEqual(rename(path + ".away", path), 0)
    let reopened = try QueueContainer(path: path, vault: vault)
    let first = try vault.rotate(containers: QueueContainerProvider())
    XCTAssertEqual(first.keptBecause["1"]?.isEmpty, false, "version 1 is kept: a record needs it")
    XCTAssertEqual(vault.manifest.record(1)?.effectiveSuite, 1)
    let second = try vault.rotate(containers: QueueContainerProvider())
    XCTAssertEqual(second.resealed[path], 1)
    XCTAssertEqual(try reopened.claim(queue: "outbox").map(\.payloadBytes), [Array("sealed under version 1".utf8)])
  }

  /// Re-sealing a format-1 record into format 2 makes it 44 bytes longer. The container that
  /// re-sealed (an app's own, handed to rotation) must count the new sizes as a fresh connection
  /// does; a total cached from before the rotation lets an enqueue pass the byte cap unnoticed.
  func testResealingIntoFormatTwoKeepsTheCachedByteTotalExact() throws {
    let vault = try makeVault(suiteOne: true)
    let path = temporary.sub("queue.sqlite")
    let plain = try QueueContainer(path: path, vault: vault)
    for i in 0..<10 { try plain.enqueue(Array("record \(i)".utf8), queue: "outbox") }
    let before = try plain.stats().bytes
    // Above the records now, below them once re-sealed (10 × 44 bytes more).
    let cap = before + 100
    let queue = try QueueContainer(path: path, vault: vault, configuration: QueueConfiguration(byteCap: cap))
    XCTAssertEqual(try queue.stats().bytes, before)
    struct Handing: ContainerProvider {
      let container: QueueContainer
      let inner = QueueContainerProvider()
      func probe(path: String) throws -> ContainerProbe { try inner.probe(path: path) }
      func open(path: String, vault: Vault) throws -> any SealedContainer { container }
      func minimumSealVersion(path: String, vault: Vault) throws -> UInt32? {
        try inner.minimumSealVersion(path: path, vault: vault)
      }
    }
    XCTAssertEqual(try vault.rotate(containers: Handing(container: queue)).resealed[path], 10)
    XCTAssertEqual(try formats(path), Array(repeating: 2, count: 10))
    let resealed = try QueueContainer(path: path, vault: vault).stats().bytes
    XCTAssertEqual(resealed, before + 10 * 44)
    XCTAssertEqual(try queue.stats().bytes, resealed, "the re-sealing connection's total")
    try queue.enqueue(Array("one more".utf8), queue: "outbox")
    XCTAssertLessThanOrEqual(try QueueContainer(path: path, vault: vault).stats().bytes, cap, "the cap holds")
  }

  private func formats(_ path: String) throws -> [UInt8] {
    let fd = open(path, O_RDONLY)
    defer { close(fd) }
    let reader = try ContainerReader(descriptor: fd, path: path, live: true)
    var formats: [UInt8] = []
    try reader.forEachEnvelope { _, _, _, envelope in formats.append(envelope[3]) }
    return formats
  }
}
