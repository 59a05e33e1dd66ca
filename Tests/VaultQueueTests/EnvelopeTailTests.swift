import Foundation
import Vault
import VaultKeys
import VaultTestSupport
import XCTest

@testable import VaultQueue

/// Long envelopes keep their header in their records row and the rest in `envelope_tails`
/// (migration 7), so that the state changes of a delivery rewrite a page, not the record. Before,
/// every claim, failure, release and `makeDue` rewrote the whole row: one delivery attempt of an
/// 18.7 MB memo wrote 150 MB, a claim and release of a 1 GB record 8 GB (outside review).
extension QueueContainerTests {
  /// The file's own view of record `id`: the length of its row's envelope column, its tail's
  /// length (nil: none) and the row's size column.
  func layout(_ id: UUID, in file: String? = nil) throws -> (inline: Int, tail: Int?, size: Int)? {
    var found: (inline: Int, tail: Int?, size: Int)?
    try reading(file) { connection in
      try connection.prepare(
        """
        SELECT length(CAST(envelope AS BLOB)), (SELECT length(tail) FROM envelope_tails t WHERE t.seq = records.seq), size
        FROM records WHERE id = ?
        """
      ).query([.text(id.recordText)]) { row in
        found = (Int(row.int(0)), row.isNull(1) ? nil : Int(row.int(1)), Int(row.int(2)))
      }
    }
    return found
  }

  /// `body`'s answer from a read-only connection to the container file (kept alive while it runs:
  /// its statements do not own it).
  func reading<T>(_ file: String? = nil, _ body: (Connection) throws -> T) throws -> T {
    let connection = try Connection(path: file ?? path, readOnly: true, live: true)
    return try withExtendedLifetime(connection) { try body(connection) }
  }

  func tailCount(in file: String? = nil) throws -> Int64? {
    try reading(file) { try $0.prepare("SELECT count(*) FROM envelope_tails").scalar() }
  }

  /// The bytes in the WAL file now (frames of every commit since the last checkpoint reset it).
  func walBytes() throws -> Int {
    (try FileManager.default.attributesOfItem(atPath: path + "-wal")[.size] as? Int) ?? 0
  }

  func testALongEnvelopeKeepsItsHeaderInItsRowAndTheRestApart() throws {
    let queue = try container(QueueConfiguration(byteCap: 1 << 30))
    let limit = Storage.inlineEnvelopeLimit
    let overhead = Envelope.overhead(format: Envelope.format2)
    let (whole, split, large) = (UUID(), UUID(), UUID())
    let payloads: [UUID: [UInt8]] = [
      whole: [UInt8](repeating: 1, count: limit - overhead),
      split: [UInt8](repeating: 2, count: limit - overhead + 1),
      large: (0..<(3 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 7) },
    ]
    for id in [whole, split, large] { try queue.enqueue(payloads[id]!, queue: "q", id: id) }

    let atLimit = try XCTUnwrap(try layout(whole))
    XCTAssertEqual(atLimit.size, limit, "the record's envelope is exactly at the limit")
    XCTAssertEqual(atLimit.inline, limit, "an envelope at the limit stays whole in its row")
    XCTAssertNil(atLimit.tail)
    for id in [split, large] {
      let parts = try XCTUnwrap(try layout(id))
      XCTAssertEqual(parts.inline, Storage.headCount, "the row keeps the header")
      XCTAssertEqual(parts.tail, parts.size - Storage.headCount, "the tail holds the rest")
    }
    XCTAssertEqual(try queue.recordCounts().byVersion, [vault.activeVersion: 3], "counted by the header in the row")

    // Every reader joins the parts: a claim, and the scanner's `--verify` reader.
    let descriptor = open(path, O_RDONLY)
    defer { close(descriptor) }
    let reader = try ContainerReader(descriptor: descriptor, path: path, live: true)
    var opened: [UUID: Bool] = [:]
    try reader.forEachEnvelope { id, queueName, _, envelope in
      let uuid = UUID(uuidString: id)!
      let payload = try vault.open(
        envelope, context: .queue(containerID: reader.containerID ?? "", queue: queueName, id: id))
      opened[uuid] = payload == payloads[uuid]
    }
    XCTAssertEqual(opened, [whole: true, split: true, large: true])
    let claimed = try queue.claim(queue: "q", maxCount: 10, maxBytes: 1 << 30)
    XCTAssertEqual(claimed.map(\.id), [whole, split, large])
    for record in claimed { XCTAssertTrue(record.payloadBytes == payloads[record.id], "payload of \(record.id)") }
  }

  /// Claims, failures, releases and `makeDue` of a 4 MiB record write a few pages: the WAL, emptied
  /// before, stays under 128 KiB after ten of them (each wrote the record twice before, over
  /// 8 MiB: freed overflow pages zeroed, the new ones written).
  func testADeliveryAttemptOnALongRecordRewritesItsRowNotTheRecord() throws {
    let queue = try container(QueueConfiguration(byteCap: 1 << 30))
    let id = UUID()
    let payload = (0..<(4 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 13) }
    try queue.enqueue(payload, queue: "q", id: id)
    XCTAssertTrue(try queue.checkpoint())
    XCTAssertEqual(try walBytes(), 0)

    for _ in 0..<2 {
      XCTAssertEqual(try queue.claim(queue: "q", maxBytes: 1 << 30).map(\.id), [id])
      XCTAssertNotEqual(try queue.fail([id], errorKind: "network", serverAnswered: false)[id], .parked)
      XCTAssertEqual(try queue.makeDue(queue: "q"), 1)
      XCTAssertEqual(try queue.claim(queue: "q", maxBytes: 1 << 30).map(\.id), [id])
      try queue.release([id])
    }
    XCTAssertLessThan(try walBytes(), 128 << 10, "bytes written for ten state changes of a 4 MiB record")
    let claimed = try queue.claim(queue: "q", maxBytes: 1 << 30)
    XCTAssertTrue(claimed.first?.payloadBytes == payload, "the record still opens whole")
  }

  /// A record's tail goes with it, whatever removes it: delivered, dropped by the cap or by its
  /// age, deleted as unopenable. And the bytes of a delivered one are gone from the file.
  func testATailIsDeletedWithItsRecord() throws {
    let queue = try container(QueueConfiguration(byteCap: 9 << 20, maximumAge: 3600))
    let record = { (fill: UInt8) in [UInt8](repeating: fill, count: 4 << 20) }
    let delivered = UUID()
    try queue.enqueue(record(1), queue: "q", id: delivered)
    let tail = try tail(of: delivered)
    XCTAssertEqual(tail.count, try XCTUnwrap(try layout(delivered)).size - Storage.headCount)
    XCTAssertEqual(try queue.claim(queue: "q", maxBytes: 1 << 30).map(\.id), [delivered])
    try queue.ack([delivered])
    XCTAssertEqual(try tailCount(), 0, "delivered")
    XCTAssertTrue(try queue.checkpoint())
    XCTAssertNil(
      try Data(contentsOf: URL(fileURLWithPath: path)).range(of: Data(tail[(1 << 20)..<((1 << 20) + 64)])),
      "the delivered record's ciphertext is not left in the file")

    let (old, newer, newest) = (UUID(), UUID(), UUID())
    try queue.enqueue(record(2), queue: "q", id: old)
    try queue.enqueue(record(3), queue: "q", id: newer)
    try queue.enqueue(record(4), queue: "q", id: newest)
    XCTAssertEqual(try queue.stats().dropped["cap"], 1)
    XCTAssertNil(try layout(old))
    XCTAssertEqual(try tailCount(), 2, "dropped for the cap")

    clock.advance(7200)
    let young = UUID()
    try queue.enqueue([1], queue: "q", id: young)
    XCTAssertEqual(try queue.claim(queue: "q").map(\.id), [young])
    XCTAssertEqual(try queue.stats().dropped["age"], 2)
    XCTAssertEqual(try tailCount(), 0, "dropped for their age")

    let broken = UUID()
    try queue.enqueue(record(5), queue: "q", id: broken)
    try sqlite(path, "UPDATE envelope_tails SET tail = zeroblob(length(tail))")
    XCTAssertEqual(try queue.removeUnopenableRecords(with: vault, keep: false), 1)
    XCTAssertEqual(try tailCount(), 0, "deleted as unopenable")
  }

  /// A tail changed or removed by someone who can write the file makes its record fail to open
  /// (kept for review, counted), never a crash or another record's payload; the record is still
  /// counted under the version its header names, so rotation keeps that key.
  func testATamperedOrMissingTailSendsItsRecordToReview() throws {
    let queue = try container(QueueConfiguration(byteCap: 1 << 30))
    let ids = (0..<3).map { _ in UUID() }
    for (index, id) in ids.enumerated() {
      try queue.enqueue([UInt8](repeating: UInt8(index), count: 1 << 20), queue: "q", id: id)
    }
    let seq = { (id: UUID) in "(SELECT seq FROM records WHERE id = '\(id.recordText)')" }
    try sqlite(
      path,
      """
      UPDATE envelope_tails SET tail = CAST(
          substr(tail, 1, 99) || (CASE substr(tail, 100, 1) WHEN x'00' THEN x'01' ELSE x'00' END) || substr(tail, 101)
          AS BLOB)
        WHERE seq = \(seq(ids[0]));
      DELETE FROM envelope_tails WHERE seq = \(seq(ids[1]));
      """)
    XCTAssertEqual(try queue.recordCounts().byVersion, [vault.activeVersion: 3])
    XCTAssertEqual(try queue.claim(queue: "q", maxCount: 10, maxBytes: 1 << 30).map(\.id), [ids[2]])
    XCTAssertEqual(Set(try queue.list(state: .review).map(\.id)), [ids[0], ids[1]])
    XCTAssertEqual(try queue.stats().dropped["undecryptable"], 2)
  }

  /// A tail row left by a writer that bypassed the cascade (foreign keys off), under the seq a
  /// new short record reuses, is not joined to that record's envelope.
  func testAStaleTailIsNotJoinedToAShortRecord() throws {
    let queue = try container()
    let first = UUID()
    try queue.enqueue(Array("first".utf8), queue: "q", id: first)
    try sqlite(path, "INSERT INTO envelope_tails (seq, tail) VALUES (2, randomblob(5000))")
    let second = UUID()
    try queue.enqueue(Array("second".utf8), queue: "q", id: second)
    XCTAssertEqual(try XCTUnwrap(try layout(second)).tail, 5000, "the stale row shares the new record's seq")
    XCTAssertEqual(try queue.claim(queue: "q").map(\.payloadBytes), [Array("first".utf8), Array("second".utf8)])
  }

  /// Rotation re-seals a long record into a new head and tail (the old ciphertext replaced), and
  /// counts it under the new version, so the old key is retired.
  func testRotationResealsALongRecordIntoANewHeadAndTail() throws {
    let queue = try container(QueueConfiguration(byteCap: 1 << 30))
    let id = UUID()
    let payload = (0..<(2 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 31) }
    try queue.enqueue(payload, queue: "q", id: id)
    let oldTail = try tail(of: id)
    let report = try vault.rotate(
      containers: QueueContainerProvider(configuration: QueueConfiguration(byteCap: 1 << 30)))
    XCTAssertEqual(report.resealed[path], 1)
    XCTAssertEqual(report.retired, [1])
    XCTAssertEqual(try queue.recordCounts().byVersion, [2: 1])
    let parts = try XCTUnwrap(try layout(id))
    XCTAssertEqual(parts.inline, Storage.headCount)
    XCTAssertEqual(parts.tail, parts.size - Storage.headCount)
    XCTAssertEqual(try tailCount(), 1)
    XCTAssertTrue(try queue.checkpoint())
    XCTAssertNil(
      try Data(contentsOf: URL(fileURLWithPath: path)).range(of: Data(oldTail[(1 << 20)..<((1 << 20) + 64)])),
      "the tail under the retired key is overwritten")
    XCTAssertTrue(try queue.claim(queue: "q", maxBytes: 1 << 30).first?.payloadBytes == payload)
  }

  /// A container whose rows hold long envelopes whole (schema 6, before migration 7) is read as
  /// it is, upgraded on its first writable open, and each such envelope split at its first claim,
  /// after which a failure rewrites the row alone.
  func testALongEnvelopeStoredWholeBeforeMigration7IsSplitAtItsFirstClaim() throws {
    let id = UUID()
    let payload = (0..<(2 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 17) }
    do { try container(QueueConfiguration(byteCap: 1 << 30)).enqueue(payload, queue: "q", id: id) }
    try sqlite(
      path,
      """
      UPDATE records SET envelope = CAST(envelope || (SELECT tail FROM envelope_tails t WHERE t.seq = records.seq) AS BLOB);
      DROP TABLE envelope_tails;
      PRAGMA user_version = 6;
      """)
    let stored = try XCTUnwrap(try layoutBeforeMigration7(id))
    XCTAssertEqual(stored, payload.count + Envelope.overhead(format: Envelope.format2), "the row holds it whole")

    let descriptor = open(path, O_RDONLY)
    defer { close(descriptor) }
    let reader = try ContainerReader(descriptor: descriptor, path: path, live: true)
    var read = 0
    try reader.forEachEnvelope { _, _, _, envelope in read = envelope.count }
    XCTAssertEqual(read, stored, "a reader of the old schema reads the row's envelope whole")

    let queue = try container(QueueConfiguration(byteCap: 1 << 30))
    XCTAssertEqual(try XCTUnwrap(try layout(id)).inline, stored, "upgraded, not split yet")
    XCTAssertTrue(try queue.claim(queue: "q", maxBytes: 1 << 30).first?.payloadBytes == payload)
    let parts = try XCTUnwrap(try layout(id))
    XCTAssertEqual(parts.inline, Storage.headCount, "split at its claim")
    XCTAssertEqual(parts.tail, stored - Storage.headCount)
    XCTAssertTrue(try queue.checkpoint())
    XCTAssertNotEqual(try queue.fail([id], errorKind: "network", serverAnswered: false)[id], .parked)
    XCTAssertLessThan(try walBytes(), 64 << 10, "a failure after the split rewrites the row alone")
    XCTAssertEqual(try queue.makeDue(queue: "q"), 1)
    XCTAssertTrue(try queue.claim(queue: "q", maxBytes: 1 << 30).first?.payloadBytes == payload)
  }

  private func layoutBeforeMigration7(_ id: UUID) throws -> Int? {
    try reading {
      try $0.prepare("SELECT length(CAST(envelope AS BLOB)) FROM records WHERE id = ?").scalar([.text(id.recordText)])
        .map(Int.init)
    }
  }

  private func tail(of id: UUID) throws -> [UInt8] {
    var tail: [UInt8] = []
    try reading {
      try $0.prepare("SELECT tail FROM envelope_tails WHERE seq = (SELECT seq FROM records WHERE id = ?)")
        .query([.text(id.recordText)]) { tail = $0.blob(0) }
    }
    return tail
  }
}
