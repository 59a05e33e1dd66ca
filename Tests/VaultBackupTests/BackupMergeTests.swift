import Foundation
import Vault
import VaultBackup
import VaultCrypto
import VaultKeys
import VaultQueue
import VaultTestSupport
import XCTest

/// Issue 14's merge: a bundle merged into a home of the same vault, with real SQLite containers
/// and keyfile stores. The vault is restored on a "new machine" (another home and keyfile), both
/// copies go on working, and their bundles are merged back in either direction.
final class BackupMergeTests: XCTestCase {
  var temporary: TemporaryDirectory!
  let cheap = ScryptParameters(logN: 10, r: 8, p: 1)
  let resolver = KeyStoreResolver.system(secretServiceTimeout: 10)
  let passphrase = "correct horse"

  override func setUp() { temporary = TemporaryDirectory() }
  override func tearDown() { temporary = nil }

  private func makeVault(_ name: String) throws -> Vault {
    try Vault.create(
      home: temporary.sub(name), store: StoreDescriptor(kind: .keyfile, keyfile: temporary.sub("keys-\(name)/v.keys")),
      resolver: resolver)
  }

  private func backup(_ vault: Vault) throws -> String {
    let directory = temporary.sub("backups-\(UUID().uuidString)")
    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    return try Backup.create(
      vault: vault, to: directory, passphrase: try Passphrase(passphrase), keep: 5, toolVersion: "test",
      clock: Date.init, kdf: cheap
    ).bundle
  }

  private func restore(_ bundle: String, as name: String, store: StoreDescriptor? = nil) throws -> Vault {
    let report = try Backup.restore(
      bundle: bundle, passphrase: try Passphrase(passphrase), into: temporary.sub(name),
      store: store ?? StoreDescriptor(kind: .keyfile, keyfile: temporary.sub("keys-\(name)/v.keys")),
      resolver: resolver)
    return try Vault.open(home: report.home, resolver: resolver)
  }

  private func merge(_ bundle: String, into vault: Vault) throws -> MergeReport {
    try Backup.merge(bundle: bundle, passphrase: try Passphrase(passphrase), into: vault)
  }

  private func container(_ vault: Vault, _ name: String) throws -> QueueContainer {
    try QueueContainer(path: vault.home + "/" + name, vault: vault)
  }

  /// Every record of `name` in `vault`: id → (state, error kind).
  private func states(_ vault: Vault, _ name: String) throws -> [UUID: (RecordState, String?)] {
    let list = try QueueContainer(path: vault.home + "/" + name, vault: vault, mode: .existing).list()
    return Dictionary(uniqueKeysWithValues: list.map { ($0.id, ($0.state, $0.errorKind)) })
  }

  /// The payload of record `id`, read by resending it if needed and claiming it (every claimed
  /// record is given back).
  private func payload(_ vault: Vault, _ name: String, _ id: UUID) throws -> String? {
    let queue = try container(vault, name)
    try queue.resend([id])
    let claimed = try queue.claim(queue: "q", maxCount: 10_000)
    try queue.release(claimed.map(\.id))  // back to pending, for the next look
    return claimed.first { $0.id == id }.map { String(decoding: $0.payload, as: UTF8.self) }
  }

  /// Waits a few milliseconds, so the next change is strictly later than the last (times are ms).
  private func tick() { usleep(5_000) }

  func testRestoredElsewhereBothGoOnAndTheNewCopyIsMergedBackNewerWinsLosersKept() throws {
    // Machine A: a vault with two containers.
    let a = try makeVault("a")
    let queueA = try container(a, "q.sqlite")
    var r: [UUID] = []
    for index in 0..<6 {
      let id = UUID()
      try queueA.enqueue(Array("record \(index)".utf8), queue: "q", id: id)
      r.append(id)
    }
    // A writer keeps enqueueing into the other container while the backup is taken.
    let other = try container(a, "other.sqlite")
    let confirmed = LockedValue<[UUID]>([])
    let stop = LockedValue(false)
    let writer = Thread {
      while !stop.withLock({ $0 }) {
        let id = UUID()
        guard (try? other.enqueue(Array("other".utf8), queue: "q", id: id)) != nil else { continue }
        confirmed.withLock { $0.append(id) }
      }
    }
    writer.start()
    while confirmed.withLock({ $0.count }) < 20 { usleep(1_000) }
    let beforeBackup = confirmed.withLock { $0 }
    let first = try backup(a)
    stop.withLock { $0 = true }
    while !writer.isFinished { usleep(1_000) }

    // Machine B: restored from that bundle into another home and another key store (the Secret
    // Service where the test keyring runs).
    let service = TestKeyring.isAvailable
    let b = try restore(first, as: "b", store: service ? StoreDescriptor(kind: .secretService) : nil)
    defer {
      if service, let store = try? resolver.store(for: StoreDescriptor(kind: .secretService), home: b.home) {
        for version in (try? store.storedVersions(keyring: b.keyringID)) ?? [] {
          _ = try? store.deleteKey(keyring: b.keyringID, version: version)
        }
      }
    }
    let otherB = try Set(states(b, "other.sqlite").keys)
    XCTAssertTrue(otherB.isSuperset(of: beforeBackup), "every record confirmed before the backup is in it")
    let queueB = try container(b, "q.sqlite")
    tick()
    // Both go on: each delivers, parks or rejects some records, both rotate their keys (each makes
    // its own version 2), and both store a record under one id with different payloads.
    try queueA.ack([r[0]])
    _ = try queueA.claim(queue: "q", maxCount: 10)  // everything in flight on A, then given back
    try queueA.release(r)
    try queueA.park([r[1]], errorKind: "http-401")
    try queueB.ack([r[2]])
    tick()
    try queueB.reject([r[3]], errorKind: "http-400")
    let conflicting = UUID()
    try queueA.enqueue(Array("A's payload".utf8), queue: "q", id: conflicting)
    tick()
    try queueB.enqueue(Array("B's payload".utf8), queue: "q", id: conflicting)
    let fresh = UUID()
    try queueB.enqueue(Array("new on B".utf8), queue: "q", id: fresh)
    try container(b, "only-b.sqlite").enqueue(Array("a container only B has".utf8), queue: "q")
    try a.rotate(options: RotationOptions(retireUnused: false))
    try b.rotate(options: RotationOptions(retireUnused: false))
    let fromB = try backup(b)

    let report = try merge(fromB, into: a)
    let merged = try XCTUnwrap(report.containers.first { $0.from.hasSuffix("/q.sqlite") })
    XCTAssertEqual(merged.action, "merged")
    XCTAssertEqual(merged.path, a.home + "/q.sqlite")
    XCTAssertEqual(merged.goneHere, 1, "r0, delivered on A after the fork, is not brought back")
    XCTAssertEqual(merged.restored, 1, "the record new on B")
    XCTAssertEqual(merged.updated, 2, "r3, rejected on B later, and the conflicting id, stored later on B")
    XCTAssertEqual(merged.undetermined, 0)
    XCTAssertEqual(merged.keptForReview.count, 1)
    XCTAssertEqual(merged.keptForReview.first?.id, conflicting.uuidString.lowercased())
    XCTAssertEqual(merged.keptForReview.first?.from, "home")
    XCTAssertEqual(report.containers.first { $0.from.hasSuffix("/only-b.sqlite") }?.action, "added")

    let after = try states(a, "q.sqlite")
    XCTAssertNil(after[r[0]], "delivered on A: not back")
    XCTAssertEqual(after[r[1]]?.0, .parked, "parked on A, unchanged on B: A's copy is newer")
    XCTAssertEqual(after[r[2]]?.0, .pending, "delivered on B only: A keeps it (merging never deletes)")
    XCTAssertEqual(after[r[3]]?.0, .review, "rejected on B after A last touched it: B's copy wins")
    XCTAssertEqual(after[r[3]]?.1, "http-400")
    XCTAssertEqual(after[fresh]?.0, .pending)
    let keptAs = try XCTUnwrap(UUID(uuidString: merged.keptForReview[0].keptAs))
    XCTAssertEqual(after[keptAs]?.0, .review)
    XCTAssertEqual(after[keptAs]?.1, QueueContainer.supersededKind)
    // Every record opens under A's keys: B's version 2 was never A's, so merged records were re-sealed.
    XCTAssertEqual(try payload(a, "q.sqlite", conflicting), "B's payload")
    XCTAssertEqual(try payload(a, "q.sqlite", keptAs), "A's payload", "the losing copy, returned with resend")
    XCTAssertEqual(try payload(a, "q.sqlite", fresh), "new on B")
    let addedPath = try XCTUnwrap(report.containers.first { $0.action == "added" }?.path)
    let added = try QueueContainer(path: addedPath, vault: a, mode: .existing)
    XCTAssertEqual(
      try added.claim(queue: "q").map { String(decoding: $0.payload, as: UTF8.self) }, ["a container only B has"])
    XCTAssertTrue(a.manifest.containers.contains { $0.path == addedPath }, "the added container is registered")

    // The same bundle again changes nothing.
    let before = try states(a, "q.sqlite").mapValues { $0.0 }
    let again = try merge(fromB, into: a)
    let second = try XCTUnwrap(again.containers.first { $0.from.hasSuffix("/q.sqlite") })
    XCTAssertEqual(second.restored + second.updated + second.undetermined + second.keptForReview.count, 0)
    XCTAssertEqual(try states(a, "q.sqlite").mapValues { $0.0 }, before)
    XCTAssertEqual(again.containers.first { $0.from.hasSuffix("/only-b.sqlite") }?.action, "merged")
  }

  func testTheOriginalsBundleMergedIntoTheRestoredCopyBringsBackOnlyWhatIsNewThere() throws {
    let a = try makeVault("a")
    let queueA = try container(a, "q.sqlite")
    let kept = UUID()
    let deliveredOnB = UUID()
    try queueA.enqueue(Array("kept".utf8), queue: "q", id: kept)
    try queueA.enqueue(Array("delivered on B".utf8), queue: "q", id: deliveredOnB)
    let b = try restore(try backup(a), as: "b")
    try container(b, "q.sqlite").ack([deliveredOnB])
    let newOnA = UUID()
    try queueA.enqueue(Array("new on A".utf8), queue: "q", id: newOnA)

    let report = try merge(try backup(a), into: b)
    XCTAssertEqual(report.containers.map(\.goneHere), [1])
    XCTAssertEqual(report.containers.map(\.restored), [1])
    XCTAssertEqual(report.containers.map(\.unchanged), [1])
    let after = try states(b, "q.sqlite")
    XCTAssertEqual(Set(after.keys), [kept, newOnA])
    XCTAssertEqual(try payload(b, "q.sqlite", newOnA), "new on A")
  }

  func testAHomesOwnBundleBringsBackNothingDeliveredSinceAndKeepsNewerStates() throws {
    let a = try makeVault("a")
    let queue = try container(a, "q.sqlite")
    let ids = (0..<5).map { _ in UUID() }
    for (index, id) in ids.enumerated() { try queue.enqueue(Array("r\(index)".utf8), queue: "q", id: id) }
    let bundle = try backup(a)
    tick()
    try queue.ack([ids[0], ids[1]])
    try queue.park([ids[2]], errorKind: "http-401")

    let report = try merge(bundle, into: a)
    XCTAssertEqual(report.containers.map(\.goneHere), [2])
    XCTAssertEqual(report.containers.map(\.unchanged), [3])
    XCTAssertEqual(report.containers.map(\.restored), [0])
    XCTAssertEqual(report.containers.map(\.updated), [0])
    let after = try states(a, "q.sqlite")
    XCTAssertEqual(Set(after.keys), Set(ids[2...]))
    XCTAssertEqual(after[ids[2]]?.0, .parked, "parked after the backup: the home's copy is newer")
  }

  /// A home put back from a file-system copy older than a bundle (tar, rsync, a VM snapshot)
  /// shares the bundle's instance id but not what came after the copy: a record stored after it
  /// is not taken for delivered here. It cannot be told whether the rolled-back home delivered
  /// it, so it comes back in review; a record the bundle lacks stays as it is.
  func testAHomePutBackFromAnOlderFileCopyGetsBackWhatCameAfterIt() throws {
    let a = try makeVault("a")
    let path = a.home + "/q.sqlite"
    let old = UUID()
    let deliveredBefore = UUID()
    var queue: QueueContainer? = try container(a, "q.sqlite")
    try queue?.enqueue(Array("old".utf8), queue: "q", id: old)
    try queue?.enqueue(Array("delivered".utf8), queue: "q", id: deliveredBefore)
    let copy = temporary.sub("file-copy")
    try FileManager.default.createDirectory(atPath: copy, withIntermediateDirectories: true)
    for suffix in ["", "-wal"] where FileManager.default.fileExists(atPath: path + suffix) {
      try FileManager.default.copyItem(atPath: path + suffix, toPath: copy + "/q.sqlite" + suffix)
    }
    let later = UUID()
    try queue?.enqueue(Array("after the copy".utf8), queue: "q", id: later)
    try queue?.ack([deliveredBefore])
    let bundle = try backup(a)
    queue = nil

    for suffix in ["", "-wal", "-shm"] { unlink(path + suffix) }
    for suffix in ["", "-wal"] where FileManager.default.fileExists(atPath: copy + "/q.sqlite" + suffix) {
      try FileManager.default.copyItem(atPath: copy + "/q.sqlite" + suffix, toPath: path + suffix)
    }
    XCTAssertEqual(Set(try states(a, "q.sqlite").keys), [old, deliveredBefore], "the home as the file copy had it")

    let report = try merge(bundle, into: a)
    XCTAssertEqual(report.containers.map(\.undetermined), [1], "stored after the copy: not taken for delivered")
    XCTAssertEqual(report.containers.map(\.goneHere), [0])
    let after = try states(a, "q.sqlite")
    XCTAssertEqual(after[later]?.0, .review)
    XCTAssertEqual(after[later]?.1, QueueContainer.maybeDeliveredKind)
    XCTAssertEqual(after[deliveredBefore]?.0, .pending, "delivered only on the lost disk: the home's copy stays")
    XCTAssertEqual(try payload(a, "q.sqlite", later), "after the copy", "returned with resend")
  }

  /// Giving a claim back (either way) is a state change: a merge keeps the home's copy over a
  /// change made on the other copy between the claim and the give-back.
  func testAClaimGivenBackAfterTheOtherCopysChangeKeepsTheHomesState() throws {
    let a = try makeVault("a")
    let queueA = try container(a, "q.sqlite")
    let ids = [UUID(), UUID()]
    for id in ids { try queueA.enqueue(Array("r".utf8), queue: "q", id: id) }
    let b = try restore(try backup(a), as: "b")
    let claimed = try queueA.claim(queue: "q", maxCount: 10)
    XCTAssertEqual(Set(claimed.map(\.id)), Set(ids))
    tick()
    try container(b, "q.sqlite").park(ids, errorKind: "http-401")
    tick()
    try queueA.release([ids[0]])
    let claim = Claim(container: queueA, records: claimed.filter { $0.id == ids[1] }, lease: 60)
    XCTAssertEqual(try claim.releaseUnsettled(), 1)

    let report = try merge(try backup(b), into: a)
    XCTAssertEqual(report.containers.map(\.unchanged), [2])
    XCTAssertEqual(report.containers.map(\.updated), [0])
    let after = try states(a, "q.sqlite")
    XCTAssertEqual(after[ids[0]]?.0, .pending, "given back after the park on B: the home's copy is newer")
    XCTAssertEqual(after[ids[1]]?.0, .pending, "given back after the park on B: the home's copy is newer")
  }

  /// A record a merge adds is stamped on the home container's age clock with the age the wall
  /// clock gives it. The home's wall clock ran two hours ahead while its container was made and
  /// filled, then was set right: its age clock (time that really passed, from the wall clock it
  /// started at) is two hours ahead of the wall clock. A record made on the other copy minutes
  /// ago must not look two hours old to a one-hour maximum age.
  func testARecordAddedByAMergeIsAgedByTheWallClockNotByTheHomesAgeClock() throws {
    let a = try makeVault("a")
    let queueA = try container(a, "q.sqlite")
    let seed = UUID()
    try queueA.enqueue(Array("seed".utf8), queue: "q", id: seed)
    let b = try restore(try backup(a), as: "b")
    let added = UUID()
    try container(b, "q.sqlite").enqueue(Array("added on B".utf8), queue: "q", id: added)
    let bundle = try backup(b)
    let twoHours = 7_200_000
    try SQLiteScript.run(
      a.home + "/q.sqlite",
      """
      UPDATE meta SET value = CAST(CAST(value AS INTEGER) + \(twoHours) AS TEXT) WHERE key = 'age_clock';
      UPDATE records SET born = born + \(twoHours);
      """)

    let report = try merge(bundle, into: a)
    XCTAssertEqual(report.containers.map(\.restored), [1])
    let aged = try QueueContainer(
      path: a.home + "/q.sqlite", vault: a, configuration: QueueConfiguration(maximumAge: 3600))
    XCTAssertEqual(Set(try aged.claim(queue: "q", maxCount: 10).map(\.id)), [seed, added])
    XCTAssertEqual(try aged.stats().dropped["age"] ?? 0, 0, "nothing here is an hour old")
  }

  func testAMissingRegisteredContainerIsRestoredFromTheBundle() throws {
    let a = try makeVault("a")
    let queue = try container(a, "q.sqlite")
    for index in 0..<4 { try queue.enqueue(Array("r\(index)".utf8), queue: "q") }
    let bundle = try backup(a)
    for suffix in ["", "-wal", "-shm"] { unlink(a.home + "/q.sqlite" + suffix) }
    XCTAssertThrowsError(try QueueContainer(path: a.home + "/q.sqlite", vault: a)) { error in
      XCTAssertEqual((error as? QueueError)?.code, "queue.registered-container-missing")
    }

    let report = try merge(bundle, into: a)
    XCTAssertEqual(report.containers.map(\.action), ["restored"])
    XCTAssertEqual(report.containers.map(\.restored), [4])
    let restored = try QueueContainer(path: a.home + "/q.sqlite", vault: a, mode: .existing)
    XCTAssertEqual(
      try restored.claim(queue: "q", maxCount: 10).map { String(decoding: $0.payload, as: UTF8.self) }.sorted(),
      ["r0", "r1", "r2", "r3"])
  }

  /// A merge takes records in transactions of 256 records or 4 MiB of envelopes (it took 256
  /// whatever their size): records of 1 MiB go a few at a time, and every one arrives whole.
  func testLargeRecordsAreMergedWholeAcrossTransactions() throws {
    let a = try makeVault("a")
    let queue = try container(a, "q.sqlite")
    let sizes = Array(repeating: 1 << 20, count: 9) + [1, 300, 5_000]
    for (index, size) in sizes.enumerated() {
      try queue.enqueue([UInt8](repeating: UInt8(index), count: size), queue: "q", id: nil)
    }
    let bundle = try backup(a)
    for suffix in ["", "-wal", "-shm"] { unlink(a.home + "/q.sqlite" + suffix) }

    let report = try merge(bundle, into: a)
    XCTAssertEqual(report.containers.map(\.restored), [sizes.count])
    let restored = try QueueContainer(path: a.home + "/q.sqlite", vault: a, mode: .existing)
    // Each payload as (its byte, its length, whether every byte is that one): a failure prints
    // these, not megabytes.
    let payloads = try restored.claim(queue: "q", maxCount: 100, maxBytes: 1 << 30).map(\.payloadBytes)
      .map { payload in [Int(payload.first ?? 0), payload.count, payload.allSatisfy { $0 == payload.first } ? 1 : 0] }
    XCTAssertEqual(
      payloads.sorted { $0[0] < $1[0] }, sizes.enumerated().map { [$0.offset, $0.element, 1] })
  }

  /// Of two long copies of one record (their envelopes split between row and `envelope_tails`),
  /// the one stored later on the other copy replaces the home's whole, tail included, and the
  /// home's is kept for review whole.
  func testALongRecordStoredLaterOnTheOtherCopyReplacesTheHomesWhole() throws {
    let a = try makeVault("a")
    try container(a, "q.sqlite").enqueue([1], queue: "q", id: nil)
    let b = try restore(try backup(a), as: "b")
    let conflicting = UUID()
    let long = { (fill: UInt8) in [UInt8](repeating: fill, count: 1 << 20) }
    try container(a, "q.sqlite").enqueue(long(0x41), queue: "q", id: conflicting)
    tick()
    try container(b, "q.sqlite").enqueue(long(0x42), queue: "q", id: conflicting)

    let report = try merge(try backup(b), into: a)
    let merged = try XCTUnwrap(report.containers.first { $0.from.hasSuffix("/q.sqlite") })
    XCTAssertEqual(merged.updated, 1)
    XCTAssertEqual(merged.keptForReview.map(\.from), ["home"])
    let keptAs = try XCTUnwrap(UUID(uuidString: merged.keptForReview.first?.keptAs ?? ""))
    let queue = try container(a, "q.sqlite")
    XCTAssertEqual(try queue.resend([keptAs]), 1)
    // Each payload as (its byte, its length, whether every byte is that one), not megabytes.
    let claimed = try queue.claim(queue: "q", maxCount: 100, maxBytes: 1 << 30)
    let summary = Dictionary(
      uniqueKeysWithValues: claimed.map { record in
        let bytes = record.payloadBytes
        return (record.id, [Int(bytes.first ?? 0), bytes.count, bytes.allSatisfy { $0 == bytes.first } ? 1 : 0])
      })
    XCTAssertEqual(summary[conflicting], [0x42, 1 << 20, 1], "the other copy's, stored later")
    XCTAssertEqual(summary[keptAs], [0x41, 1 << 20, 1], "the home's, kept for review")
  }

  func testCopiesWithUnrelatedHistoriesPutWhatMayHaveBeenDeliveredInReview() throws {
    let a = try makeVault("a")
    let queueA = try container(a, "q.sqlite")
    let delivered = UUID()
    try queueA.enqueue(Array("delivered on B".utf8), queue: "q", id: delivered)
    // B is restored from A's first bundle, C from a later one: neither is the other's origin.
    let b = try restore(try backup(a), as: "b")
    let later = UUID()
    let parked = UUID()
    try queueA.enqueue(Array("later".utf8), queue: "q", id: later)
    try queueA.enqueue(Array("parked".utf8), queue: "q", id: parked)
    try queueA.park([parked], errorKind: "http-401")
    let c = try restore(try backup(a), as: "c")
    try container(b, "q.sqlite").ack([delivered])

    let report = try merge(try backup(c), into: b)
    XCTAssertEqual(report.containers.map(\.goneHere), [1], "B started with it and delivered it")
    XCTAssertEqual(report.containers.map(\.undetermined), [1], "B may have had it from elsewhere and delivered it")
    XCTAssertEqual(report.containers.map(\.restored), [1], "a parked record is never sent by itself: as it was")
    let after = try states(b, "q.sqlite")
    XCTAssertNil(after[delivered])
    XCTAssertEqual(after[later]?.0, .review)
    XCTAssertEqual(after[later]?.1, QueueContainer.maybeDeliveredKind)
    XCTAssertEqual(after[parked]?.0, .parked)
    XCTAssertEqual(try payload(b, "q.sqlite", later), "later", "returned with resend")
  }

  func testABundleOfAnotherVaultIsRefusedAndNothingChanges() throws {
    let a = try makeVault("a")
    try container(a, "q.sqlite").enqueue(Array("mine".utf8), queue: "q")
    let other = try makeVault("other")
    try container(other, "q.sqlite").enqueue(Array("theirs".utf8), queue: "q")
    let bundle = try backup(other)
    let manifest = try Data(contentsOf: URL(fileURLWithPath: a.home + "/manifest.json"))
    XCTAssertThrowsError(try merge(bundle, into: a)) { error in
      guard case .anotherVault(let home, _, _)? = error as? BackupError else {
        return XCTFail("\(error)")
      }
      XCTAssertEqual(home, a.home)
      XCTAssertTrue("\(error)".contains("--into NEW_HOME"), "\(error)")
    }
    XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: a.home + "/manifest.json")), manifest)
    XCTAssertEqual(try states(a, "q.sqlite").count, 1)
  }

  func testAWrongPassphraseOrADamagedBundleMergesNothing() throws {
    let a = try makeVault("a")
    let queue = try container(a, "q.sqlite")
    let id = UUID()
    try queue.enqueue(Array("r".utf8), queue: "q", id: id)
    let bundle = try backup(a)
    try queue.ack([id])
    XCTAssertThrowsError(try Backup.merge(bundle: bundle, passphrase: try Passphrase("wrong"), into: a)) {
      XCTAssertEqual($0 as? BackupError, .wrongPassphrase(path: bundle))
    }
    var bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: bundle)))
    bytes[bytes.count - 64] ^= 0x01
    try Data(bytes).write(to: URL(fileURLWithPath: bundle))
    XCTAssertThrowsError(try merge(bundle, into: a)) {
      guard case .containerHashMismatch? = $0 as? BackupError else { return XCTFail("\($0)") }
    }
    XCTAssertEqual(try states(a, "q.sqlite").count, 0, "nothing merged")
  }

  /// Review 14: a record a merge added, delivered here since, came back pending (and was sent
  /// again) when the same bundle was merged again, as a merge that failed part way is told to be.
  func testMergingAgainDoesNotBringBackWhatTheFirstMergeAddedAndWasDeliveredSince() throws {
    let a = try makeVault("a")
    let queueA = try container(a, "q.sqlite")
    try queueA.enqueue(Array("before".utf8), queue: "q")
    let b = try restore(try backup(a), as: "b")
    let newOnA = UUID()
    try queueA.enqueue(Array("new on A".utf8), queue: "q", id: newOnA)
    let bundle = try backup(a)
    XCTAssertEqual(try merge(bundle, into: b).containers.map(\.restored), [1])
    let queueB = try container(b, "q.sqlite")
    let claimed = try queueB.claim(queue: "q", maxCount: 10).map(\.id)
    XCTAssertTrue(claimed.contains(newOnA))
    try queueB.ack(claimed)

    let again = try merge(bundle, into: b)
    XCTAssertEqual(again.containers.map(\.restored), [0])
    XCTAssertEqual(again.containers.map(\.undetermined), [0])
    XCTAssertEqual(try states(b, "q.sqlite").count, 0, "nothing delivered here comes back")
  }

  /// Review 14: a losing copy kept for review, resent and delivered, was kept again by the next
  /// merge of the same bundle.
  func testAKeptCopyDeliveredSinceIsNotKeptAgain() throws {
    let a = try makeVault("a")
    let queueA = try container(a, "q.sqlite")
    try queueA.enqueue(Array("seed".utf8), queue: "q")
    let c = try restore(try backup(a), as: "c")
    let id = UUID()
    try container(c, "q.sqlite").enqueue(Array("older, on C".utf8), queue: "q", id: id)
    tick()
    try queueA.enqueue(Array("newer, on A".utf8), queue: "q", id: id)
    let bundle = try backup(c)
    let report = try merge(bundle, into: a)
    XCTAssertEqual(report.containers.first?.keptForReview.map(\.from), ["bundle"])
    let keptAs = try XCTUnwrap(report.containers.first?.keptForReview.first.flatMap { UUID(uuidString: $0.keptAs) })
    try queueA.resend([keptAs])
    let claimed = try queueA.claim(queue: "q", maxCount: 10).map(\.id)
    XCTAssertTrue(claimed.contains(keptAs))
    try queueA.ack(claimed)

    let again = try merge(bundle, into: a)
    XCTAssertEqual(again.containers.first?.keptForReview, [])
    XCTAssertEqual(try states(a, "q.sqlite").count, 0, "the kept copy was delivered: not kept again")
  }

  func testAHomeCopyThatDoesNotOpenStaysAndTheBundlesCopyIsKeptForReview() throws {
    let a = try makeVault("a")
    let queue = try container(a, "q.sqlite")
    let damaged = UUID()
    let other = UUID()
    try queue.enqueue(Array("damaged here".utf8), queue: "q", id: damaged)
    try queue.enqueue(Array("fine".utf8), queue: "q", id: other)
    let bundle = try backup(a)
    // One byte of the home's envelope changed: it no longer opens (claim moves it to review).
    let script = """
      import sqlite3,sys; c=sqlite3.connect(sys.argv[1])
      c.execute("UPDATE records SET envelope = substr(envelope, 1, 40) || (CASE substr(envelope, 41, 1) WHEN x'00' THEN x'01' ELSE x'00' END) || substr(envelope, 42) WHERE id = ?", \
      (sys.argv[2],)); c.commit(); c.close()
      """
    let tampered = try Spawn.run(
      "/usr/bin/env", ["python3", "-c", script, a.home + "/q.sqlite", damaged.uuidString.lowercased()])
    XCTAssertEqual(tampered.status, 0, tampered.error)
    _ = try queue.claim(queue: "q")
    try queue.release([other])

    let report = try merge(bundle, into: a)
    XCTAssertEqual(report.containers.first?.keptForReview.map(\.id), [damaged.uuidString.lowercased()])
    let keptAs = try XCTUnwrap(UUID(uuidString: report.containers.first?.keptForReview.first?.keptAs ?? ""))
    let after = try states(a, "q.sqlite")
    XCTAssertEqual(after[damaged]?.1, "undecryptable", "the home's copy stays as it was")
    XCTAssertEqual(after[other]?.0, .pending)
    XCTAssertEqual(try payload(a, "q.sqlite", keptAs), "damaged here", "the bundle's copy opens, in review")
  }
}
