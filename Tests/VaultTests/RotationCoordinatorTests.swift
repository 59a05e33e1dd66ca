import Foundation
import VaultKeys
import VaultTestSupport
import XCTest

@testable import Vault

/// An in-memory container that records the order of the protocol's calls.
final class RecordingContainer: SealedContainer, @unchecked Sendable {
  let name: String
  var records: [(context: [UInt8], envelope: [UInt8])] = []
  var calls: [String] = []
  var minimumSealVersion: UInt32 = 0

  init(name: String) { self.name = name }

  func raiseMinimumSealVersion(to version: UInt32) throws {
    calls.append("raise \(version)")
    minimumSealVersion = version
  }

  func reseal(with vault: Vault, to version: UInt32) throws -> Int {
    calls.append("reseal \(version)")
    var count = 0
    for index in records.indices where try Envelope.header(of: records[index].envelope).version < version {
      let plaintext = try vault.open(records[index].envelope, context: records[index].context)
      records[index].envelope = try vault.seal(plaintext, context: records[index].context)
      count += 1
    }
    return count
  }

  func recordCounts() throws -> [UInt32: Int] {
    calls.append("count")
    var counts: [UInt32: Int] = [:]
    for record in records { counts[try Envelope.header(of: record.envelope).version, default: 0] += 1 }
    return counts
  }
}

final class RotationCoordinatorTests: XCTestCase {
  func testRotationRaisesThenResealsThenCountsAndRetiresOnlyUnusedVersions() throws {
    let temporary = TemporaryDirectory()
    let store = InMemoryKeyStore()
    let vault = try Vault.create(
      home: temporary.sub("home"), store: StoreDescriptor(kind: .memory), resolver: .fixed(store))
    let container = RecordingContainer(name: "queue.db")
    for i in 0..<10 {
      container.records.append(
        (Array("id \(i)".utf8), try vault.seal(Array("body \(i)".utf8), context: Array("id \(i)".utf8))))
    }
    let report = try vault.rotate(containers: [container], retireUnused: true)
    XCTAssertEqual(container.calls, ["raise 2", "reseal 2", "count"])
    XCTAssertEqual(report.resealed, ["queue.db": 10])
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
      let name = "stuck.db"
      let envelope: [UInt8]
      init(_ envelope: [UInt8]) { self.envelope = envelope }
      func raiseMinimumSealVersion(to version: UInt32) throws {}
      func reseal(with vault: Vault, to version: UInt32) throws -> Int { 0 }
      func recordCounts() throws -> [UInt32: Int] { [try Envelope.header(of: envelope).version: 1] }
    }
    let stuck = Stuck(try vault.seal([1, 2, 3], context: [0]))
    let report = try vault.rotate(containers: [stuck], retireUnused: true)
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
    let report = try vault.rotate(containers: [], retireUnused: true)
    XCTAssertEqual(report.retired, [])
    XCTAssertEqual(try store.storedVersions(keyring: vault.keyringID), [1, 2])
  }

  func testRetiredVersionGivesItsOwnError() throws {
    let temporary = TemporaryDirectory()
    let store = InMemoryKeyStore()
    let vault = try Vault.create(
      home: temporary.sub("home"), store: StoreDescriptor(kind: .memory), resolver: .fixed(store))
    let outside = try vault.seal(Array("kept outside any container".utf8), context: [5])
    _ = try vault.rotate(containers: [RecordingContainer(name: "empty.db")], retireUnused: true)
    XCTAssertThrowsError(try vault.open(outside, context: [5])) {
      XCTAssertEqual($0 as? EnvelopeError, .retiredKeyVersion(1))
    }
  }
}

/// A container whose re-seal fails once, as a crash part-way through a rotation would.
final class FailingOnceContainer: SealedContainer, @unchecked Sendable {
  let inner: RecordingContainer
  var failNext = true
  var name: String { inner.name }
  init(_ inner: RecordingContainer) { self.inner = inner }
  func raiseMinimumSealVersion(to version: UInt32) throws { try inner.raiseMinimumSealVersion(to: version) }
  func reseal(with vault: Vault, to version: UInt32) throws -> Int {
    if failNext {
      failNext = false
      throw VaultError.noActiveKey
    }
    return try inner.reseal(with: vault, to: version)
  }
  func recordCounts() throws -> [UInt32: Int] { try inner.recordCounts() }
}

final class RotationResumeTests: XCTestCase {
  func testARerunFinishesAnInterruptedRotationWithoutANewVersion() throws {
    let temporary = TemporaryDirectory()
    let store = InMemoryKeyStore()
    let vault = try Vault.create(
      home: temporary.sub("home"), store: StoreDescriptor(kind: .memory), resolver: .fixed(store))
    let records = RecordingContainer(name: "q.db")
    records.records.append((Array("a".utf8), try vault.seal(Array("body".utf8), context: Array("a".utf8))))
    let container = FailingOnceContainer(records)
    XCTAssertThrowsError(try vault.rotate(containers: [container], retireUnused: true))
    XCTAssertEqual(vault.manifest.resealing, 2)
    XCTAssertEqual(vault.manifest.activeVersion, 2)
    let report = try Vault.open(home: vault.home, resolver: .fixed(store)).rotate(
      containers: [container], retireUnused: true)
    XCTAssertEqual(report.newVersion, 2, "resumed, not rotated again")
    XCTAssertEqual(report.retired, [1])
    XCTAssertEqual(try ManifestFile.load(home: vault.home).resealing, nil)
    XCTAssertEqual(try vault.open(records.records[0].envelope, context: Array("a".utf8)), Array("body".utf8))
  }
}
