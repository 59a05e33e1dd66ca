import Foundation
import Vault
import VaultCrypto
import VaultKeys
import VaultTestSupport
import XCTest

@testable import VaultQueue

/// The queue against a real SQLite file on disk, with an in-memory key store and a test clock.
final class QueueContainerTests: XCTestCase {
  var temporary: TemporaryDirectory!
  var store: InMemoryKeyStore!
  var vault: Vault!
  var clock: TestClock!
  var path: String { temporary.sub("data/queue.sqlite") }

  override func setUpWithError() throws {
    temporary = TemporaryDirectory()
    store = InMemoryKeyStore()
    clock = TestClock()
    vault = try Vault.create(
      home: temporary.sub("home"), store: StoreDescriptor(kind: .memory), resolver: .fixed(store))
    try FileManager.default.createDirectory(atPath: temporary.sub("data"), withIntermediateDirectories: true)
  }

  override func tearDown() {
    vault = nil
    temporary = nil
  }

  /// A container at `path` (or at `file`), on the test's clock.
  func container(
    _ configuration: QueueConfiguration = QueueConfiguration(), random: Double = 0.5, at file: String? = nil
  )
    throws -> QueueContainer
  {
    try QueueContainer(
      path: file ?? path, vault: vault, configuration: configuration, clock: clock.function, random: { random },
      monotonic: { [clock] in MonotonicReading(boot: "b", milliseconds: clock!.milliseconds) })
  }

  /// A network change makes due what waited for the network, never what a server asked to wait:
  /// a wake on every route change (docker, a VPN) must not turn a Retry-After into a storm.
  func testMakeDueHurriesNetworkFailuresButNotServerAnswers() throws {
    let queue = try container()
    let offline = UUID()
    let throttled = UUID()
    let failing = UUID()
    for id in [offline, throttled, failing] { try queue.enqueue(Array("x".utf8), queue: "q", id: id) }
    XCTAssertEqual(try queue.claim(queue: "q", maxCount: 3).count, 3)
    _ = try queue.fail([offline], errorKind: "connect", serverAnswered: false)
    _ = try queue.fail([throttled], errorKind: "http-429", retryAfter: 3600)
    _ = try queue.fail([failing], errorKind: "http-503")
    XCTAssertEqual(try queue.makeDue(queue: "q"), 1)
    XCTAssertEqual(try queue.claim(queue: "q", maxCount: 3).map(\.id), [offline])
  }

  /// Each statement is prepared once per connection, where its SQL is written: repeating an
  /// enqueue, claim, fail, park, resend and ack prepares nothing new (preparing per call would slow enqueue).
  func testStatementsArePreparedOncePerConnection() throws {
    let queue = try container()
    func cycle() throws {
      try queue.enqueue(Array("x".utf8), queue: "q")
      let ids = try queue.claim(queue: "q").map(\.id)
      _ = try queue.fail(ids, errorKind: "http-503")
      try queue.park(ids, errorKind: "http-401")
      XCTAssertEqual(try queue.resend(ids), 1)
      try queue.ack(try queue.claim(queue: "q").map(\.id))
    }
    try cycle()
    let prepared = try queue.withStorage { $0.preparedStatementCount }
    XCTAssertGreaterThan(prepared, 5)
    for _ in 0..<3 { try cycle() }
    XCTAssertEqual(try queue.withStorage { $0.preparedStatementCount }, prepared)
    XCTAssertEqual(try queue.count(queue: "q", state: .pending), 0)
  }

  func testEnqueueClaimAckRoundTripsAndLeavesNoPlaintext() throws {
    let queue = try container()
    let id = UUID()
    XCTAssertEqual(try queue.enqueue(Array("canary-7f3a body of the memo".utf8), queue: "outbox", id: id), .stored)
    let claimed = try queue.claim(queue: "outbox")
    XCTAssertEqual(claimed.map(\.id), [id])
    XCTAssertEqual(claimed.first?.payloadBytes, Array("canary-7f3a body of the memo".utf8))
    XCTAssertEqual(claimed.first?.attempts, 1)
    XCTAssertFalse(directoryContains(temporary.sub("data"), "canary-7f3a"), "no plaintext in db, wal or shm")
    try queue.ack([id])
    XCTAssertEqual(try queue.stats().total, 0)
    XCTAssertEqual(try queue.stats().bytes, 0)
    XCTAssertEqual(try queue.claim(queue: "outbox"), [])
  }

  func testDuplicateIdIsReportedAndStoredOnce() throws {
    let queue = try container()
    let id = UUID()
    XCTAssertEqual(try queue.enqueue([1], queue: "q", id: id), .stored)
    XCTAssertEqual(try queue.enqueue([2], queue: "q", id: id), .duplicate)
    XCTAssertEqual(try queue.stats().total, 1)
    XCTAssertEqual(try queue.claim(queue: "q").first?.payloadBytes, [1], "the first record is kept, not replaced")
  }

  func testGroupCommitStoresAllInOrder() throws {
    let queue = try container()
    let records = (0..<50).map { (id: UUID(), payload: Array("r\($0)".utf8)) }
    let outcomes = try queue.enqueue(contentsOf: records, queue: "q")
    XCTAssertEqual(outcomes, Array(repeating: .stored, count: 50))
    let claimed = try queue.claim(queue: "q", maxCount: 100)
    XCTAssertEqual(claimed.map(\.id), records.map(\.id))
  }

  func testQueuesAreSeparateAndRecordsCannotMoveBetweenThem() throws {
    let queue = try container()
    let id = UUID()
    try queue.enqueue([7], queue: "a", id: id)
    XCTAssertEqual(try queue.claim(queue: "b"), [])
    // Move the row to queue "b" behind vault's back: its context no longer matches, so it must not open.
    try sqlite(path, "UPDATE records SET queue = 'b'")
    XCTAssertEqual(try queue.claim(queue: "b"), [])
    XCTAssertEqual(try queue.list(state: .review).map(\.errorKind), ["undecryptable"])
  }

  func testExpiredLeaseReturnsTheRecordAfterACrash() throws {
    let queue = try container()
    let id = UUID()
    try queue.enqueue([1], queue: "q", id: id)
    XCTAssertEqual(try queue.claim(queue: "q", lease: 30).count, 1)
    XCTAssertEqual(try queue.claim(queue: "q", lease: 30), [], "leased records are not handed out twice")
    clock.advance(31)
    let again = try queue.claim(queue: "q", lease: 30)
    XCTAssertEqual(again.map(\.id), [id])
    XCTAssertEqual(again.first?.attempts, 2)
  }

  /// A claim's ack deletes only what the claim still holds: not a record it never claimed
  /// (pending, parked, in review), nor one it lost when its lease ran out and another deliverer
  /// claimed it. The container's own ack is not fenced (it acts on the ids given).
  func testAClaimsAckDeletesOnlyWhatTheClaimStillHolds() throws {
    let queue = try container()
    let ids = (0..<4).map { _ in UUID() }
    for id in ids { try queue.enqueue([1], queue: "q", id: id) }
    let mine = Claim(container: queue, records: try queue.claim(queue: "q", maxCount: 2, lease: 30), lease: 30)
    XCTAssertEqual(mine.records.map(\.id), [ids[0], ids[1]])
    try queue.park([ids[3]], errorKind: "http-401")
    XCTAssertEqual(try mine.ack([ids[0], ids[2], ids[3]]), [ids[0]], "not the pending or the parked record")
    XCTAssertFalse(mine.holds(ids[0]))
    clock.advance(31)
    let other = try queue.claim(queue: "q", maxCount: 1, lease: 30)
    XCTAssertEqual(other.map(\.id), [ids[1]], "the lease ran out: claimed by another deliverer")
    XCTAssertEqual(try mine.ack([ids[1]]), [], "lost: the other deliverer's now")
    XCTAssertEqual(Set(try queue.list().map(\.id)), [ids[1], ids[2], ids[3]])
    try queue.ack([ids[3]])
    XCTAssertEqual(Set(try queue.list().map(\.id)), [ids[1], ids[2]], "the container's ack is not fenced")
  }

  /// A claimed record holds plaintext: printing or dumping it shows its metadata only.
  func testAClaimedRecordPrintsNoPayload() throws {
    let queue = try container()
    try queue.enqueue(Array("canary-7Qz-payload".utf8), queue: "q")
    let record = try XCTUnwrap(try queue.claim(queue: "q").first)
    var dumped = ""
    dump(record, to: &dumped)
    for text in ["\(record)", String(reflecting: record), dumped] {
      XCTAssertFalse(text.contains("canary"), text)
      XCTAssertFalse(text.contains("99, 97, 110"), text)  // "can" as dumped bytes
    }
    XCTAssertTrue("\(record)".contains("payload: 18 bytes"), "\(record)")
  }

  /// Parked once refused `attemptCeiling` times and for `parkAfter` since the first refusal: a
  /// server failing for a few seconds (or hours, by default) parks nothing; resend starts both over.
  func testFailSchedulesBackoffWithFullJitterAndParksAtTheCeiling() throws {
    let configuration = QueueConfiguration(attemptCeiling: 3, backoff: BackoffPolicy(base: 2, cap: 60), parkAfter: 3600)
    let queue = try container(configuration, random: 0.5)
    let id = UUID()
    try queue.enqueue([1], queue: "q", id: id)
    var delays: [TimeInterval] = []
    for _ in 0..<2 {
      let start = clock.now
      _ = try queue.claim(queue: "q")
      guard case .retryAt(let due)? = try queue.fail([id], errorKind: "http-500")[id] else { return XCTFail() }
      delays.append(due.timeIntervalSince(start))
      XCTAssertEqual(try queue.claim(queue: "q"), [], "not due before its time")
      clock.advance(due.timeIntervalSince(clock.now) + 0.001)
    }
    XCTAssertEqual(delays, [1, 2], "half of 2 s, then half of 4 s")
    _ = try queue.claim(queue: "q")
    guard case .retryAt(let due)? = try queue.fail([id], errorKind: "http-503")[id] else {
      return XCTFail("the third refusal, 3 s after the first: not parked before an hour")
    }
    clock.advance(due.timeIntervalSince(clock.now) + 3600 - 3)
    _ = try queue.claim(queue: "q")
    XCTAssertEqual(try queue.fail([id], errorKind: "http-500")[id], .parked)
    XCTAssertEqual(try queue.list(state: .parked).map(\.id), [id])
    XCTAssertEqual(try queue.stats().dropped["parked"], 1)
    clock.advance(3600)
    XCTAssertEqual(try queue.claim(queue: "q"), [], "parked records are never retried automatically")
    XCTAssertEqual(try queue.resend([id]), 1)
    let resent = try queue.claim(queue: "q")
    XCTAssertEqual(resent.first?.attempts, 1, "resend starts a fresh attempt count")
    for _ in 0..<3 {
      guard case .retryAt(let due)? = try queue.fail([id], errorKind: "http-500")[id] else {
        return XCTFail("resend starts the refusal span over: not parked within the hour")
      }
      clock.advance(due.timeIntervalSince(clock.now) + 0.001)
      _ = try queue.claim(queue: "q")
    }
  }

  /// The drop ledger keeps counting every record that ever left the flow; the resend ledger and
  /// `by_state` tell those still parked or in review from those resent (and delivered) since.
  func testTheLedgerTellsRecordsStillParkedFromThoseResentAndDelivered() throws {
    let queue = try container()
    let ids = (0..<3).map { _ in UUID() }
    for id in ids { try queue.enqueue([1], queue: "q", id: id) }
    try queue.park(Array(ids[0..<2]), errorKind: "http-401")
    try queue.reject([ids[2]], errorKind: "http-400")
    XCTAssertEqual(try queue.resend([ids[0], ids[2], UUID()]), 2, "an unknown id moves nothing and counts nothing")
    XCTAssertEqual(try queue.resend([ids[0]]), 0, "already pending: not counted twice")
    XCTAssertEqual(try queue.claim(queue: "q", maxCount: 3).map(\.id), [ids[0], ids[2]])
    try queue.ack([ids[0], ids[2]])
    let stats = try queue.stats()
    XCTAssertEqual(stats.dropped["parked"], 2, "the ledger: every record ever parked")
    XCTAssertEqual(stats.dropped["rejected"], 1)
    XCTAssertEqual(stats.resent, ["parked": 1, "review": 1])
    XCTAssertEqual(stats.byState["parked"], 1, "still parked now")
    XCTAssertEqual(Set(stats.dropped.keys), Set(DropReason.allCases.map(\.rawValue)), "no resend rows among drops")
    XCTAssertEqual(try queue.resendAll(), 1)
    XCTAssertEqual(try queue.stats().resent, ["parked": 2, "review": 1])
  }

  func testRetryAfterIsHonouredAndCapped() throws {
    let queue = try container(QueueConfiguration(maximumRetryAfter: 120))
    let id = UUID()
    try queue.enqueue([1], queue: "q", id: id)
    _ = try queue.claim(queue: "q")
    let start = clock.now
    XCTAssertEqual(try queue.fail([id], errorKind: "http-429", retryAfter: 30)[id], .retryAt(start + 30))
    clock.advance(31)
    _ = try queue.claim(queue: "q")
    XCTAssertEqual(try queue.fail([id], errorKind: "http-503", retryAfter: 86_400)[id], .retryAt(clock.now + 120))
  }

  func testBackoffCeilingGrowsAndIsCapped() {
    let policy = BackoffPolicy(base: 1, cap: 300)
    XCTAssertEqual((1...10).map { policy.ceiling(afterAttempts: $0) }, [1, 2, 4, 8, 16, 32, 64, 128, 256, 300])
    // Any count, however absurd, gives a delay rather than a trap (an outside review: Int.min did).
    XCTAssertEqual([Int.min, -1, 0, Int.max].map { policy.ceiling(afterAttempts: $0) }, [1, 1, 1, 300])
    XCTAssertEqual(policy.delay(afterAttempts: 50, unit: 0.999_999), 300 * 0.999_999, accuracy: 1e-9)
    XCTAssertEqual(policy.delay(afterAttempts: 3, unit: 0), 0)
    // Never below 0, as documented: a negative or NaN base or cap returned a negative or NaN
    // delay (an outside review).
    for odd in [BackoffPolicy(base: -1, cap: 300), BackoffPolicy(base: .nan), BackoffPolicy(cap: -5), .init(cap: .nan)]
    {
      XCTAssertEqual(odd.ceiling(afterAttempts: 3), 0, "\(odd)")
      XCTAssertEqual(odd.delay(afterAttempts: 3, unit: 0.5), 0, "\(odd)")
    }
  }

  func testRejectedRecordsGoToReviewAndAreCounted() throws {
    let queue = try container()
    let id = UUID()
    try queue.enqueue([1], queue: "q", id: id)
    _ = try queue.claim(queue: "q")
    try queue.reject([id], errorKind: "http-400")
    XCTAssertEqual(try queue.list(state: .review).first?.errorKind, "http-400")
    XCTAssertEqual(try queue.stats().dropped["rejected"], 1)
    clock.advance(86_400)
    XCTAssertEqual(try queue.claim(queue: "q"), [])
  }

  func testByteCapDropsTheOldestInsideTheEnqueueAndCountsThem() throws {
    let record = [UInt8](repeating: 0xAA, count: 911)  // 1000 bytes sealed
    let queue = try container(QueueConfiguration(byteCap: 10_000))
    var ids: [UUID] = []
    for _ in 0..<25 {
      let id = UUID()
      ids.append(id)
      try queue.enqueue(record, queue: "q", id: id)
      XCTAssertLessThanOrEqual(try queue.stats().bytes, 10_000)
    }
    let stats = try queue.stats()
    XCTAssertEqual(stats.total, 10)
    XCTAssertEqual(stats.bytes, 10_000)
    XCTAssertEqual(stats.dropped["cap"], 15)
    XCTAssertEqual(try queue.dropped(), stats.dropped, "the ledger alone, as stats gives it")
    XCTAssertEqual(try queue.list().map(\.id), Array(ids.suffix(10)), "the newest are kept")
    XCTAssertThrowsError(try queue.enqueue([UInt8](repeating: 0, count: 20_000), queue: "q")) {
      XCTAssertEqual($0 as? QueueError, .recordTooLarge(bytes: 20_089, cap: 10_000))
    }
  }

  /// An outside review: with the cap raised past a gigabyte, a record larger than one SQLite row
  /// may hold was sealed (twice its size in memory) and then refused by SQLite with a generic
  /// "string or blob too big". It is refused first now, as too large, nothing sealed or stored.
  func testARecordLargerThanASQLiteRowIsTooLargeWhateverTheCap() throws {
    let queue = try container(QueueConfiguration(byteCap: 1 << 31))
    let limit = 1_000_000_000 - 1024
    // A payload of 1,000,000,000 bytes, past SQLite's own limit once sealed. The check comes before
    // the seal, so nothing else of its size is made.
    let payload = [UInt8](repeating: 0, count: 1_000_000_000)
    XCTAssertThrowsError(try queue.enqueue(payload, queue: "q")) {
      XCTAssertEqual($0 as? QueueError, .recordTooLarge(bytes: 1_000_000_089, cap: limit))
    }
    XCTAssertThrowsError(try queue.enqueue(contentsOf: [(UUID(), payload)], queue: "q")) {
      XCTAssertEqual($0 as? QueueError, .recordTooLarge(bytes: 1_000_000_089, cap: limit))
    }
    XCTAssertEqual(try queue.stats().total, 0)
  }

  /// An enqueue that stores nothing (every id already there) drops nothing and cannot fail on the
  /// cap, even when the container holds more than this writer's cap (a smaller cap than the
  /// writer before it, a merged backup): its records are already stored, and an error would
  /// send the caller retrying a record that is safe.
  func testADuplicateOnlyEnqueueNeitherDropsNorFailsOnTheCap() throws {
    let record = [UInt8](repeating: 0xA5, count: 911)  // 1000 bytes sealed
    let ids = (0..<6).map { _ in UUID() }
    let roomy = try container(QueueConfiguration(byteCap: 100_000))
    for id in ids { try roomy.enqueue(record, queue: "q", id: id) }
    XCTAssertEqual(try roomy.claim(queue: "q", maxCount: 2).count, 2)

    let tight = try container(QueueConfiguration(byteCap: 3_000))
    XCTAssertEqual(try tight.enqueue(record, queue: "q", id: ids[5]), .duplicate)
    XCTAssertEqual(
      try tight.enqueue(contentsOf: [(ids[0], record), (ids[3], record)], queue: "q"), [.duplicate, .duplicate])
    var stats = try tight.stats()
    XCTAssertEqual(stats.total, 6, "nothing dropped by an enqueue that stored nothing")
    XCTAssertEqual(stats.dropped["cap"] ?? 0, 0)

    // A record that is stored brings the cap back: the oldest not in flight go first.
    XCTAssertEqual(try tight.enqueue(record, queue: "q", id: UUID()), .stored)
    stats = try tight.stats()
    XCTAssertEqual(stats.total, 3)
    XCTAssertEqual(stats.dropped["cap"], 4)
    XCTAssertEqual(try tight.count(queue: "q", state: .inFlight), 2)

    // Every record in flight: a new record finds no room, a duplicate is still just a duplicate.
    XCTAssertEqual(try tight.claim(queue: "q").count, 1)
    let tighter = try container(QueueConfiguration(byteCap: 1_500))
    XCTAssertThrowsError(try tighter.enqueue(record, queue: "q")) {
      XCTAssertEqual($0 as? QueueError, .capExceeded(cap: 1_500))
    }
    XCTAssertEqual(try tighter.enqueue(record, queue: "q", id: ids[0]), .duplicate)
    XCTAssertEqual(try tighter.stats().total, 3)
  }

  /// The byte total is cached per connection; writes through another connection (another
  /// process) must still be counted exactly.
  func testByteCapHoldsAcrossTwoConnections() throws {
    let record = [UInt8](repeating: 0xAB, count: 911)  // 1000 bytes sealed
    let first = try container(QueueConfiguration(byteCap: 10_000))
    let second = try container(QueueConfiguration(byteCap: 10_000))
    for round in 0..<30 {
      try (round % 3 == 0 ? first : second).enqueue(record, queue: "q")
      if round % 7 == 0 { try first.ack(try first.claim(queue: "q", maxCount: 1).map(\.id)) }
      XCTAssertEqual(try first.stats().bytes, try second.stats().bytes)
      XCTAssertEqual(try first.stats().bytes, try first.stats().total * 1000)
      XCTAssertLessThanOrEqual(try second.stats().bytes, 10_000)
    }
    XCTAssertEqual(try first.stats().total, 10)
  }

  /// While the file is smaller than the cap the total is not summed at all (it cannot pass the
  /// cap); once the file grows past it, the cap holds exactly, with writes from two connections.
  func testByteCapHoldsWhenTheFileGrowsPastItFromTwoConnections() throws {
    let record = [UInt8](repeating: 0xAC, count: 911)  // 1000 bytes sealed
    let cap = 150_000
    let first = try container(QueueConfiguration(byteCap: cap))
    let second = try container(QueueConfiguration(byteCap: cap))
    for round in 0..<400 {
      try (round % 2 == 0 ? first : second).enqueue(record, queue: "q")
      let stats = try (round % 3 == 0 ? first : second).stats()
      XCTAssertLessThanOrEqual(stats.bytes, cap, "round \(round)")
      XCTAssertEqual(stats.bytes, stats.total * 1000)
      XCTAssertEqual(stats.total + (stats.dropped["cap"] ?? 0), round + 1, "every record kept or counted")
    }
    XCTAssertEqual(try first.stats().total, cap / 1000, "the cap is filled, not undershot")
  }

  /// One connection alone keeps a bound on its total while the file is below the cap (its size
  /// when read, plus what it added and less what it removed since) and asks the file again only
  /// once the bound passes the cap: the cap still holds exactly, with deliveries removing records.
  func testByteCapHoldsWhenTheFileGrowsPastItFromOneConnection() throws {
    let record = [UInt8](repeating: 0xAD, count: 911)  // 1000 bytes sealed
    let cap = 150_000
    let queue = try container(QueueConfiguration(byteCap: cap))
    // Counted through another connection: the writer's own `stats()` would sum its total exactly.
    let observer = try container(QueueConfiguration(byteCap: cap))
    var acked = 0
    for round in 0..<400 {
      try queue.enqueue(record, queue: "q")
      if round % 5 == 0 {
        let claimed = try queue.claim(queue: "q", maxCount: 1).map(\.id)
        try queue.ack(claimed)
        acked += claimed.count
      }
      let stats = try observer.stats()
      XCTAssertLessThanOrEqual(stats.bytes, cap, "round \(round)")
      XCTAssertEqual(stats.bytes, stats.total * 1000)
      XCTAssertEqual(stats.total + (stats.dropped["cap"] ?? 0) + acked, round + 1, "every record kept or counted")
    }
    XCTAssertEqual(try observer.stats().total, cap / 1000, "the cap is filled, not undershot")
  }

  /// Listing's errors are `CodedError`s like the rest: a sentence for people, a stable code.
  func testListingErrorsHaveCodesAndSentences() throws {
    let queue = try container()
    let id = UUID()
    try queue.enqueue([1], queue: "q", id: id)
    XCTAssertEqual(try queue.forEachRecord(after: id) { _ in }, 0)
    let missing = UUID()
    XCTAssertThrowsError(try queue.forEachRecord(after: missing) { _ in }) { error in
      XCTAssertEqual(error as? ListingError, .unknownRecord(missing))
      XCTAssertEqual((error as? any CodedError)?.code, "listing.unknown-record")
      XCTAssertTrue(error.localizedDescription.hasPrefix("no record \(missing.recordText)"), error.localizedDescription)
    }
    XCTAssertThrowsError(try queue.forEachRecord(limit: -1) { _ in }) { error in
      XCTAssertEqual((error as? any CodedError)?.code, "listing.negative-limit")
      XCTAssertEqual(error.localizedDescription, "the limit must not be negative")
    }
  }

  func testMaximumAgeDropsOldRecords() throws {
    let queue = try container(QueueConfiguration(maximumAge: 3600))
    try queue.enqueue([1], queue: "q")
    clock.advance(1800)
    let fresh = UUID()
    try queue.enqueue([2], queue: "q", id: fresh)
    clock.advance(1801)
    XCTAssertEqual(try queue.claim(queue: "q").map(\.id), [fresh])
    XCTAssertEqual(try queue.stats().dropped["age"], 1)
  }

  /// An expired record's envelope does not linger in the WAL after the claim that dropped it: the
  /// claim checkpoints, as an ack does (an outside review found it there, every byte).
  func testTheAgeLimitsDropEmptiesTheWAL() throws {
    let queue = try container(QueueConfiguration(maximumAge: 60))
    let old = UUID()
    try queue.enqueue((0..<20_000).map { _ in UInt8.random(in: 0...255) }, queue: "q", id: old)
    let tail = try queue.withStorage { storage in
      var tail: [UInt8] = []
      try storage.statement("SELECT tail FROM envelope_tails JOIN records USING (seq) WHERE id = ?")
        .query([.text(old.recordText)]) { row in tail = row.withBlob(0) { [UInt8]($0) } }
      return tail
    }
    let part = Data(tail[10_000..<10_064])
    XCTAssertNotNil(FileManager.default.contents(atPath: path + "-wal")?.range(of: part), "written to the WAL")
    clock.advance(120)

    XCTAssertEqual(try queue.claim(queue: "another").count, 0)

    XCTAssertEqual(try queue.dropped()["age"], 1)
    XCTAssertNil(FileManager.default.contents(atPath: path + "-wal")?.range(of: part), "no frame holds it")
    XCTAssertNil(FileManager.default.contents(atPath: path)?.range(of: part), "nor the database")
  }

  func testTamperedRecordIsQuarantinedAndTheRestFlow() throws {
    let queue = try container()
    let ids = (0..<3).map { _ in UUID() }
    for id in ids { try queue.enqueue(Array("payload".utf8), queue: "q", id: id) }
    try sqlite(
      path,
      "UPDATE records SET envelope = substr(envelope, 1, 40) || (CASE substr(envelope, 41, 1) WHEN x'00' THEN x'01' ELSE x'00' END) || substr(envelope, 42) WHERE id = '\(ids[1].uuidString.lowercased())'"
    )
    let claimed = try queue.claim(queue: "q")
    XCTAssertEqual(claimed.map(\.id), [ids[0], ids[2]])
    let review = try queue.list(state: .review)
    XCTAssertEqual(review.map(\.id), [ids[1]])
    XCTAssertEqual(review.first?.errorKind, "undecryptable")
    XCTAssertEqual(try queue.stats().dropped["undecryptable"], 1)
    XCTAssertEqual(try queue.stats().total, 3, "the tampered row is kept for review, not deleted")
  }

  /// The search for records that do not open reads them in batches of 256 records or 4 MiB of
  /// envelopes (256 whatever their size before): with records of 1 MiB, three a batch, the two
  /// that do not open on either side of a batch's end are both found, and only they.
  func testRecordsThatDoNotOpenAreFoundAcrossBatchesOfLargeRecords() throws {
    let queue = try container(QueueConfiguration(byteCap: 1 << 30))
    let ids = (0..<9).map { _ in UUID() }
    for (index, id) in ids.enumerated() {
      try queue.enqueue([UInt8](repeating: UInt8(index), count: 1 << 20), queue: "q", id: id)
    }
    for id in [ids[2], ids[3]] {
      // A byte of the tail: a record of 1 MiB keeps only its header in its row.
      try sqlite(
        path,
        "UPDATE envelope_tails SET tail = CAST(substr(tail, 1, 40) || (CASE substr(tail, 41, 1) WHEN x'00' THEN x'01' ELSE x'00' END) || substr(tail, 42) AS BLOB) WHERE seq = (SELECT seq FROM records WHERE id = '\(id.uuidString.lowercased())')"
      )
    }
    XCTAssertEqual(try queue.unopenableRecords(with: vault), 2)
    XCTAssertEqual(try queue.removeUnopenableRecords(with: vault, keep: true), 2)
    XCTAssertEqual(Set(try queue.list(state: .review).map(\.id)), [ids[2], ids[3]])
    XCTAssertEqual(try queue.claim(queue: "q", maxCount: 100, maxBytes: 1 << 30).count, 7)
  }

  /// A compromise rotation's "keep them for review" moved records that do not open to review
  /// without counting them, though `DropReason.undecryptable` counts every record that leaves
  /// delivery that way (API review); deleting them counted them. Both count now.
  func testUnopenableRecordsAreCountedWhetherKeptForReviewOrDeleted() throws {
    let queue = try container()
    let ids = (0..<3).map { _ in UUID() }
    for id in ids { try queue.enqueue(Array("payload".utf8), queue: "q", id: id) }
    for id in ids.prefix(2) {
      try sqlite(
        path,
        "UPDATE records SET envelope = substr(envelope, 1, 40) || (CASE substr(envelope, 41, 1) WHEN x'00' THEN x'01' ELSE x'00' END) || substr(envelope, 42) WHERE id = '\(id.uuidString.lowercased())'"
      )
    }
    XCTAssertEqual(try queue.removeUnopenableRecords(with: vault, keep: true), 2)
    XCTAssertEqual(Set(try queue.list(state: .review).map(\.id)), Set(ids.prefix(2)))
    XCTAssertEqual(try queue.stats().dropped["undecryptable"], 2, "kept for review, and counted")
    XCTAssertEqual(try queue.removeUnopenableRecords(with: vault, keep: false), 2)
    XCTAssertEqual(try queue.stats().dropped["undecryptable"], 4, "then deleted, and counted again as they go")
    XCTAssertEqual(try queue.stats().total, 1)
  }

  /// Re-sealing must put every record back in its own row (one swapped would not open under the
  /// other row's context), and count and leave as it was each record that does not open, wherever
  /// it falls in a batch: batches of 500 and of 7 records, and of 0 and -1 (taken as 500: a batch of
  /// 0 re-sealed nothing, and -1 everything in one transaction).
  func testResealingKeepsEveryRecordInItsRowAndLeavesTheOnesThatDoNotOpen() throws {
    for batch in [500, 7, 0, -1] {
      let path = temporary.sub("data/batch-\(batch).sqlite")
      let queue = try QueueContainer(path: path, vault: vault, configuration: QueueConfiguration(resealBatch: batch))
      XCTAssertEqual(queue.configuration.resealBatch, batch < 1 ? 500 : batch)
      let sealedUnder = vault.activeVersion
      let ids = (0..<100).map { _ in UUID() }
      for (index, id) in ids.enumerated() {
        try queue.enqueue([UInt8](repeating: UInt8(index), count: index + 1), queue: "q", id: id)
      }
      let tampered = [3, 50, 77]
      for index in tampered {
        // One byte of the ciphertext changed: the envelope still names version 1 and no longer opens.
        try sqlite(
          path,
          "UPDATE records SET envelope = substr(envelope, 1, 80) || (CASE substr(envelope, 81, 1) WHEN x'00' THEN x'01' ELSE x'00' END) || substr(envelope, 82) WHERE id = '\(ids[index].uuidString.lowercased())'"
        )
      }
      let report = try vault.rotate(
        containers: QueueContainerProvider(configuration: QueueConfiguration(resealBatch: batch)))
      XCTAssertEqual(report.resealed[path], 97, "batch \(batch)")
      XCTAssertTrue(report.keptVersions.contains(sealedUnder), "the records that did not open still need their version")
      let claimed = try queue.claim(queue: "q", maxCount: 200)
      XCTAssertEqual(claimed.count, 97)
      for record in claimed {
        let index = try XCTUnwrap(ids.firstIndex(of: record.id))
        XCTAssertFalse(tampered.contains(index))
        XCTAssertEqual(record.payloadBytes, [UInt8](repeating: UInt8(index), count: index + 1))
      }
      XCTAssertEqual(Set(try queue.list(state: .review).map(\.id)), Set(tampered.map { ids[$0] }))
    }
  }

  func testAContainerOfAnotherVaultIsRefused() throws {
    _ = try container()
    let other = try Vault.create(
      home: temporary.sub("other"), store: StoreDescriptor(kind: .memory), resolver: .fixed(InMemoryKeyStore()))
    XCTAssertThrowsError(try QueueContainer(path: path, vault: other)) {
      XCTAssertEqual(
        $0 as? QueueError,
        .foreignContainer(path: path, found: vault.keyringID.hex, expected: other.keyringID.hex))
    }
  }

  func testCorruptAndForeignDatabasesAreDistinctErrors() throws {
    try Data((0..<8192).map { UInt8(truncatingIfNeeded: $0 &* 97) }).write(to: URL(fileURLWithPath: path))
    XCTAssertThrowsError(try container()) { XCTAssertEqual($0 as? QueueError, .corrupt(path: path)) }
    unlink(path)
    try sqlite(path, "CREATE TABLE notes (body TEXT)")
    XCTAssertThrowsError(try container()) { XCTAssertEqual($0 as? QueueError, .notAQueueContainer(path: path)) }
  }

  func testRotationResealsEveryStateAndRetiresTheOldKey() throws {
    let queue = try container(QueueConfiguration(attemptCeiling: 1, resealBatch: 7, parkAfter: 0))
    var ids: [UUID] = []
    for i in 0..<40 {
      let id = UUID()
      ids.append(id)
      try queue.enqueue(Array("record \(i)".utf8), queue: "q", id: id)
    }
    _ = try queue.claim(queue: "q", maxCount: 2)  // two in flight
    _ = try queue.claim(queue: "q", maxCount: 1).map { try queue.fail([$0.id], errorKind: "x") }  // one parked
    let report = try vault.rotate(containers: QueueContainerProvider())
    XCTAssertEqual(report.resealed[path], 40)
    XCTAssertEqual(report.retired, [1])
    XCTAssertEqual(try queue.recordCounts().byVersion, [2: 40])
    XCTAssertEqual(try store.storedVersions(keyring: vault.keyringID), [2])
    XCTAssertEqual(try queue.stats().minimumSealVersion, 2)
    XCTAssertEqual(try queue.resend([ids[2]]), 1)
    clock.advance(120)
    let all = try queue.claim(queue: "q", maxCount: 100)
    XCTAssertEqual(Set(all.map(\.id)), Set(ids))
    for record in all { XCTAssertEqual(record.payloadBytes, Array("record \(ids.firstIndex(of: record.id)!)".utf8)) }
  }

  /// A writer whose vault was loaded before another process rotated must not seal under the old key.
  func testAStaleWriterReloadsBeforeSealingAfterARotation() throws {
    let stale = try Vault.open(home: vault.home, resolver: .fixed(store))
    let writer = try QueueContainer(path: path, vault: stale, clock: clock.function)
    try writer.enqueue([1], queue: "q")
    _ = try vault.rotate(containers: QueueContainerProvider())
    XCTAssertEqual(stale.activeVersion, 1, "the writer has not noticed yet")
    try writer.enqueue([2], queue: "q")
    XCTAssertEqual(try writer.recordCounts().byVersion, [2: 2], "its new record was sealed under version 2")
    XCTAssertEqual(stale.activeVersion, 2)
  }

  func testConcurrentEnqueueFromManyThreadsLosesNothing() throws {
    let queue = try container()
    let ids = (0..<400).map { _ in UUID() }
    DispatchQueue.concurrentPerform(iterations: 4) { worker in
      for index in stride(from: worker, to: ids.count, by: 4) {
        XCTAssertEqual(try? queue.enqueue(Array("n\(index)".utf8), queue: "q", id: ids[index]), .stored)
      }
    }
    XCTAssertEqual(Set(try queue.claim(queue: "q", maxCount: 1000).map(\.id)), Set(ids))
  }

  func testSecondConnectionSeesCommittedRecords() throws {
    let first = try container()
    let second = try container()
    let id = UUID()
    try first.enqueue([9], queue: "q", id: id)
    XCTAssertEqual(try second.claim(queue: "q").map(\.id), [id])
    XCTAssertEqual(try first.claim(queue: "q"), [], "the lease is shared through the file")
  }
}

/// Runs SQL against a database with Python's sqlite3 module (`SQLiteScript`).
func sqlite(_ path: String, _ sql: String) throws { try SQLiteScript.run(path, sql) }

extension QueueContainerTests {
  /// The pending records of a queue taken together, as `Outbox.start` (the earliest wait) and
  /// `memo relay` (the largest envelope) read them instead of listing every record: only pending
  /// records of that queue count, and one due now waits for nothing.
  func testThePendingAggregateCountsOnlyPendingRecordsOfItsQueue() throws {
    let queue = try container(QueueConfiguration(attemptCeiling: 1, parkAfter: 0))
    XCTAssertEqual(
      try queue.pendingAggregate(queue: "q"), PendingAggregate(count: 0, largestEnvelope: 0, earliestWait: nil))
    let (small, large, retried, parked) = (UUID(), UUID(), UUID(), UUID())
    try queue.enqueue([UInt8](repeating: 1, count: 10), queue: "q", id: small)
    try queue.enqueue([UInt8](repeating: 2, count: 5_000), queue: "q", id: large)
    try queue.enqueue([UInt8](repeating: 3, count: 9_000), queue: "other", id: UUID())
    XCTAssertEqual(
      try queue.pendingAggregate(queue: "q"),
      PendingAggregate(count: 2, largestEnvelope: 5_000 + Envelope.overhead, earliestWait: nil), "both due now")
    try queue.enqueue([UInt8](repeating: 4, count: 100), queue: "q", id: retried)
    try queue.enqueue([UInt8](repeating: 5, count: 7_000), queue: "q", id: parked)
    let claimed = try queue.claim(queue: "q", maxCount: 10, maxBytes: 1 << 20).map(\.id)
    XCTAssertEqual(claimed, [small, large, retried, parked])
    try queue.release([small, large])
    let retry = try queue.fail([retried], errorKind: "network", serverAnswered: false)[retried]
    XCTAssertEqual(try queue.fail([parked], errorKind: "http-500")[parked], .parked)
    guard case .retryAt(let when)? = retry else { return XCTFail("\(String(describing: retry))") }
    let aggregate = try queue.pendingAggregate(queue: "q")
    XCTAssertEqual(aggregate.count, 3)
    XCTAssertEqual(aggregate.largestEnvelope, 5_000 + Envelope.overhead, "the parked one is not pending")
    XCTAssertEqual(
      aggregate.earliestWait.map { ($0.timeIntervalSince1970 * 1000).rounded() },
      (when.timeIntervalSince1970 * 1000).rounded())
  }
}
