import Foundation
import VaultKeys
import VaultTestSupport
import XCTest

@testable import Vault

final class RotationCoordinatorTests: XCTestCase {
  func testRotationRaisesThenResealsThenCountsAndRetiresOnlyUnusedVersions() throws {
    let temporary = TemporaryDirectory()
    let store = InMemoryKeyStore()
    let vault = try Vault.create(
      home: temporary.sub("home"), store: StoreDescriptor(kind: .memory), resolver: .fixed(store))
    let container = RecordingContainer(name: "queue.db")
    for i in 0..<10 {
      container.records.append(
        (Array("id \(i)".utf8), try vault.sealRecord(Array("body \(i)".utf8), context: Array("id \(i)".utf8))))
    }
    let report = try vault.rotate([container])
    XCTAssertEqual(container.calls, ["raise 2", "reseal 2", "checkpoint", "count"])
    XCTAssertEqual(report.resealed, ["/memory/queue.db": 10])
    XCTAssertEqual(report.retired, [1])
    XCTAssertEqual(try store.storedVersions(keyring: vault.keyringID), [2], "retired material is deleted")
    XCTAssertEqual(vault.manifest.record(1)?.state, .retired)
    XCTAssertNotNil(vault.manifest.record(1)?.retiredAt)
    for (i, record) in container.records.enumerated() {
      XCTAssertEqual(try vault.open(record.envelope, context: record.context), Array("body \(i)".utf8))
    }
  }

  func testAVersionStillInUseIsNeverRetired() throws {
    let temporary = TemporaryDirectory()
    let store = InMemoryKeyStore()
    let vault = try Vault.create(
      home: temporary.sub("home"), store: StoreDescriptor(kind: .memory), resolver: .fixed(store))
    /// A container that cannot re-seal (for example, it failed part-way) still holds a v1 record.
    final class Stuck: SealedContainer {
      let name = "/memory/stuck.db"
      let containerID = "stuck"
      let envelope: [UInt8]
      init(_ envelope: [UInt8]) { self.envelope = envelope }
      func raiseMinimumSealVersion(to version: UInt32) throws {}
      func reseal(with vault: Vault, to version: UInt32) throws -> ResealResult { ResealResult(resealed: 0) }
      func recordCounts() throws -> RecordCounts {
        RecordCounts(byVersion: [try Envelope.header(of: envelope).version: 1])
      }
      func checkpointNow() throws -> Bool { true }
      func unopenableRecords(with vault: Vault) throws -> Int { 0 }
      func removeUnopenableRecords(with vault: Vault, keep: Bool) throws -> Int { 0 }
      func compact() throws {}
    }
    let stuck = Stuck(try vault.sealRecord([1, 2, 3], context: [0]))
    let report = try vault.rotate([stuck])
    XCTAssertEqual(report.retired, [])
    XCTAssertEqual(report.keptVersions, [1])
    XCTAssertEqual(try vault.open(stuck.envelope, context: [0]), [1, 2, 3])
    XCTAssertEqual(try store.storedVersions(keyring: vault.keyringID), [1, 2])
  }

  func testWithoutContainersNothingIsRetired() throws {
    let temporary = TemporaryDirectory()
    let store = InMemoryKeyStore()
    let vault = try Vault.create(
      home: temporary.sub("home"), store: StoreDescriptor(kind: .memory), resolver: .fixed(store))
    let report = try vault.rotate([])
    XCTAssertEqual(report.retired, [])
    XCTAssertEqual(try store.storedVersions(keyring: vault.keyringID), [1, 2])
  }

  func testRetiredVersionGivesItsOwnError() throws {
    let temporary = TemporaryDirectory()
    let store = InMemoryKeyStore()
    let vault = try Vault.create(
      home: temporary.sub("home"), store: StoreDescriptor(kind: .memory), resolver: .fixed(store))
    // A record sealed the way a container seals (nothing pinned) that no container counts: its
    // version is retired, and opening it says so.
    let lost = try vault.sealRecord(Array("held by no container".utf8), context: [5])
    _ = try vault.rotate([RecordingContainer(name: "empty.db")])
    XCTAssertThrowsError(try vault.open(lost, context: [5])) {
      XCTAssertEqual($0 as? EnvelopeError, .retiredKeyVersion(1))
    }
  }

  /// The public `seal` is safe by default: a record kept outside any container keeps its key
  /// through any number of rotations (the danger the test above shows needs the package API).
  func testAPublicSealKeepsItsKeyThroughRotations() throws {
    let temporary = TemporaryDirectory()
    let store = InMemoryKeyStore()
    let vault = try Vault.create(
      home: temporary.sub("home"), store: StoreDescriptor(kind: .memory), resolver: .fixed(store))
    let outside = try vault.seal(Data("kept outside any container".utf8), context: "notes/1")
    let container = RecordingContainer(name: "empty.db")
    for _ in 0..<3 { _ = try vault.rotate([container]) }
    XCTAssertEqual(try vault.open(outside, context: "notes/1"), Data("kept outside any container".utf8))
    XCTAssertEqual(vault.manifest.record(1)?.state, .decryptOnly)
    XCTAssertEqual(vault.manifest.externalSealVersions, [1])
  }
}

/// A container whose re-seal fails once, as a crash part-way through a rotation would.
final class FailingOnceContainer: SealedContainer, @unchecked Sendable {
  let inner: RecordingContainer
  var failNext = true
  var name: String { inner.name }
  var containerID: String { inner.containerID }
  init(_ inner: RecordingContainer) { self.inner = inner }
  func raiseMinimumSealVersion(to version: UInt32) throws { try inner.raiseMinimumSealVersion(to: version) }
  func reseal(with vault: Vault, to version: UInt32) throws -> ResealResult {
    if failNext {
      failNext = false
      throw VaultError.noActiveKey
    }
    return try inner.reseal(with: vault, to: version)
  }
  func recordCounts() throws -> RecordCounts { try inner.recordCounts() }
  func checkpointNow() throws -> Bool { try inner.checkpointNow() }
  func unopenableRecords(with vault: Vault) throws -> Int { try inner.unopenableRecords(with: vault) }
  func removeUnopenableRecords(with vault: Vault, keep: Bool) throws -> Int {
    try inner.removeUnopenableRecords(with: vault, keep: keep)
  }
  func compact() throws { try inner.compact() }
}

final class RotationResumeTests: XCTestCase {
  func testARerunFinishesAnInterruptedRotationWithoutANewVersion() throws {
    let temporary = TemporaryDirectory()
    let store = InMemoryKeyStore()
    let vault = try Vault.create(
      home: temporary.sub("home"), store: StoreDescriptor(kind: .memory), resolver: .fixed(store))
    let records = RecordingContainer(name: "q.db")
    records.records.append((Array("a".utf8), try vault.sealRecord(Array("body".utf8), context: Array("a".utf8))))
    let container = FailingOnceContainer(records)
    XCTAssertThrowsError(try vault.rotate([container]))
    XCTAssertEqual(vault.manifest.resealing, 2)
    XCTAssertEqual(vault.manifest.activeVersion, 2)
    let report = try Vault.open(home: vault.home, resolver: .fixed(store)).rotate([container])
    XCTAssertEqual(report.newVersion, 2, "resumed, not rotated again")
    XCTAssertEqual(report.previousVersion, 1, "from the version it rotated from, not \"2 -> 2\"")
    XCTAssertEqual(report.retired, [1])
    XCTAssertEqual(try ManifestFile.read(home: vault.home).manifest.resealing, nil)
    XCTAssertEqual(try vault.open(records.records[0].envelope, context: Array("a".utf8)), Array("body".utf8))
  }
}
