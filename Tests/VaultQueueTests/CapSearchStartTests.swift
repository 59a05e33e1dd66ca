import Foundation
import XCTest

@testable import VaultQueue

/// The byte cap's search for records to drop starts where the last search on the connection found
/// the first record it may drop (before, it read from the oldest record on every enqueue: telemetry
/// events behind 100,000 memos, with only events droppable, took 22 ms each). Whatever it skips, it
/// must still drop the oldest record it may: these are the cases where a record it may drop comes
/// before that start.
extension QueueContainerTests {
  /// 911 bytes: 1,000 sealed.
  private var thousandSealed: [UInt8] { [UInt8](repeating: 0xAA, count: 911) }

  private func eventsOnly(_ records: Int) -> QueueConfiguration {
    QueueConfiguration(byteCap: records * 1_000, capVictims: .only(["events"]))
  }

  func testTheCapStillDropsTheOldestEventOnceItIsNoLongerInFlight() throws {
    let queue = try container(eventsOnly(5))
    let memos = [UUID(), UUID()]
    for id in memos { try queue.enqueue(thousandSealed, queue: "memo", id: id) }
    let events = [UUID(), UUID(), UUID()]
    for id in events { try queue.enqueue(thousandSealed, queue: "events", id: id) }
    XCTAssertEqual(try queue.claim(queue: "events", maxCount: 1).map(\.id), [events[0]])
    let fourth = UUID()
    try queue.enqueue(thousandSealed, queue: "events", id: fourth)
    XCTAssertEqual(try queue.list().map(\.id), memos + [events[0], events[2], fourth], "the oldest not in flight")
    try queue.release([events[0]])
    let fifth = UUID()
    try queue.enqueue(thousandSealed, queue: "events", id: fifth)
    XCTAssertEqual(
      try queue.list().map(\.id), memos + [events[2], fourth, fifth], "the oldest, given back since it was skipped")
    XCTAssertEqual(try queue.stats().dropped["cap"], 2)
  }

  /// A row numbered Int64.max (an edited file: SQLite never gives that number) ends the search
  /// instead of overflowing past it (an outside review: every enqueue at the cap trapped), and the
  /// rows SQLite then numbers at random, below it, are not the cap's victims in the transaction
  /// that stores them (before, the new record could be dropped and reported stored).
  func testARowNumberedInt64MaxEndsTheCapsSearch() throws {
    let queue = try container(QueueConfiguration(byteCap: 3_000))
    let ids = (0..<3).map { _ in UUID() }
    for id in ids { try queue.enqueue(thousandSealed, queue: "q", id: id) }
    try sqlite(path, "UPDATE records SET seq = 9223372036854775807 WHERE id = '\(ids[2].recordText)'")
    let fourth = UUID()
    try queue.enqueue(thousandSealed, queue: "q", id: fourth)
    XCTAssertEqual(Set(try queue.list().map(\.id)), [ids[1], ids[2], fourth], "the oldest dropped")
    XCTAssertEqual(try queue.claim(queue: "q", maxCount: 10).count, 3)
    XCTAssertThrowsError(try queue.enqueue(thousandSealed, queue: "q")) {
      XCTAssertEqual($0 as? QueueError, .capExceeded(cap: 3_000), "all in flight: nothing to drop, and no trap")
    }
  }

  /// Records deleted down to below where the search started, then a record stored there again
  /// (SQLite numbers a new row one past the newest): by this connection, or by another.
  func testAnEventStoredBeforeWhereTheCapsSearchStartedIsStillTheFirstDropped() throws {
    for other in [false, true] {
      let file = temporary.sub("data/reuse-\(other).sqlite")
      let queue = try container(eventsOnly(5), at: file)
      let writer = other ? try container(eventsOnly(5), at: file) : queue
      let memos = [UUID(), UUID()]
      for id in memos { try queue.enqueue(thousandSealed, queue: "memo", id: id) }
      let events = (0..<4).map { _ in UUID() }
      for id in events { try queue.enqueue(thousandSealed, queue: "events", id: id) }
      // The fourth event dropped the first: the search found it third, after the two memos.
      XCTAssertEqual(try queue.list().map(\.id), memos + events.suffix(3))
      try writer.ack(Array(events.suffix(3)) + [memos[1]])
      let again = (0..<4).map { _ in UUID() }
      for id in again { try writer.enqueue(thousandSealed, queue: "events", id: id) }
      XCTAssertEqual(try queue.list().map(\.id), [memos[0]] + again, "stored second, before the search's start")
      let last = UUID()
      try queue.enqueue(thousandSealed, queue: "events", id: last)
      XCTAssertEqual(
        try queue.list().map(\.id), [memos[0]] + again.suffix(3) + [last],
        "the oldest event dropped, \(other ? "stored by another connection" : "stored by this one")")
    }
  }
}
