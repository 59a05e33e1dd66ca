import Foundation
import VaultKeys
import VaultTestSupport
import XCTest

@testable import Vault
@testable import VaultQueue

/// Containers of the two main-branch builds that numbered schemas 5 and 6 their own way (commits
/// 0c6199f and 7cee1da): 0c6199f stored schema 5 without the table `merged`; 7cee1da added that
/// table as schema 6, the number migration 6 (`refused_since`) took later. Both are rebuilt here
/// from a current container by removing what they lacked. Before, a writer took their numbers at
/// face value and never added what was missing: on a 7cee1da container every refusal and resend
/// failed with "no such column: refused_since" (and `vault telemetry flush` against a collector
/// answering 500 sent the same batch again and again without end).
final class RenumberedSchemaTests: XCTestCase {
  var temporary: TemporaryDirectory!
  var vault: Vault!
  var path: String { temporary.sub("home/queue.sqlite") }

  override func setUpWithError() throws {
    temporary = TemporaryDirectory()
    vault = try Vault.create(
      home: temporary.sub("home"), store: StoreDescriptor(kind: .memory), resolver: .fixed(InMemoryKeyStore()))
  }

  override func tearDown() {
    vault = nil
    temporary = nil
  }

  /// A container holding one record, then changed by `edit` on a connection of its own.
  private func container(editedBy edit: (Connection) throws -> Void) throws -> UUID {
    let id = UUID()
    do { try QueueContainer(path: path, vault: vault).enqueue(Array("kept".utf8), queue: "q", id: id) }
    let connection = try Connection(path: path)
    try edit(connection)
    return id
  }

  private func columns(_ connection: Connection) throws -> [String] {
    var names: [String] = []
    try connection.prepare("SELECT name FROM pragma_table_info('records')").query { names.append($0.text(0) ?? "") }
    return names
  }

  private func hasMergedTable(_ connection: Connection) throws -> Bool {
    try connection.prepare("SELECT count(*) FROM sqlite_master WHERE name = 'merged'").scalar() == 1
  }

  /// Refuses the record, parks it, resends it and claims it again: every statement that names
  /// `refused_since` or `merged`'s neighbours runs.
  private func refuseParkAndResend(_ id: UUID) throws {
    let container = try QueueContainer(
      path: path, vault: vault, configuration: QueueConfiguration(attemptCeiling: 1, parkAfter: 0), mode: .existing)
    XCTAssertEqual(try container.claim(queue: "q").map(\.id), [id])
    XCTAssertEqual(try container.fail([id], errorKind: "http-500")[id], .parked)
    XCTAssertEqual(try container.resend([id]), 1)
    let claimed = try container.claim(queue: "q")
    XCTAssertEqual(claimed.map(\.id), [id])
    XCTAssertEqual(claimed.first.map { String(decoding: $0.payload, as: UTF8.self) }, "kept")
  }

  func testAContainerOfTheBuildThatNumberedMergedAsSchema6GetsRefusedSince() throws {
    let id = try container { connection in
      try connection.execute("ALTER TABLE records DROP COLUMN refused_since")
      try connection.execute("DROP TABLE envelope_tails")
      try connection.execute("PRAGMA user_version = 6")
    }
    try refuseParkAndResend(id)
    let connection = try Connection(path: path, readOnly: true)
    XCTAssertTrue(try columns(connection).contains("refused_since"))
    XCTAssertTrue(try hasMergedTable(connection))
    XCTAssertEqual(try connection.prepare("PRAGMA user_version").scalar(), Int64(Storage.migrations.count))
  }

  func testAContainerOfTheBuildWhoseSchema5LackedMergedGetsIt() throws {
    let id = try container { connection in
      try connection.execute("ALTER TABLE records DROP COLUMN refused_since")
      try connection.execute("DROP TABLE merged")
      try connection.execute("DROP TABLE envelope_tails")
      try connection.execute("PRAGMA user_version = 5")
    }
    try refuseParkAndResend(id)
    let connection = try Connection(path: path, readOnly: true)
    XCTAssertTrue(try columns(connection).contains("refused_since"))
    XCTAssertTrue(try hasMergedTable(connection))
    XCTAssertEqual(try connection.prepare("PRAGMA user_version").scalar(), Int64(Storage.migrations.count))
  }
}
