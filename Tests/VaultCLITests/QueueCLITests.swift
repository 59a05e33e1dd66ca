import Foundation
import Vault
import VaultQueue
import VaultTestSupport
import XCTest

/// `vault queue …` and rotation of queued records, through the real binary and a real SQLite file.
final class QueueCLITests: XCTestCase {
  var temporary: TemporaryDirectory!
  var home: String { temporary.sub("home") }

  override func setUpWithError() throws {
    temporary = TemporaryDirectory()
    try initKeyfileVault(home: home, keyfile: temporary.sub("keys/v.keys"))
  }

  override func tearDown() { temporary = nil }

  private func json(_ arguments: [String]) throws -> [String: Any] {
    let run = try vault(["--home", home] + arguments)
    XCTAssertEqual(run.status, 0, run.error)
    return try JSONSerialization.jsonObject(with: Data(run.output)) as! [String: Any]
  }

  /// A put that pushes older records out past the byte cap (20 MB) says so on standard error,
  /// with the count; puts that drop nothing say nothing more than 'stored ID' (an outside
  /// operator review: a CLI put deleted an app's record and printed only 'stored').
  func testAPutPastTheCapSaysHowManyOlderRecordsItDropped() throws {
    let megabyte = [UInt8](repeating: 0x41, count: 1 << 20)
    var notes: [String] = []
    for index in 0..<21 {
      let put = try vault(["--home", home, "queue", "put", "--queue", "bulk"], input: megabyte)
      XCTAssertEqual(put.status, 0, put.error)
      if !put.error.isEmpty { notes.append("\(index): \(put.error)") }
    }
    let stats = try json(["queue", "stats", "--json"])
    let dropped = (stats["dropped"] as? [String: Int])?["cap"] ?? 0
    XCTAssertGreaterThan(dropped, 0)
    XCTAssertEqual(notes.count, dropped, "one note per put that dropped one record: \(notes)")
    XCTAssertTrue(
      notes.allSatisfy { $0.contains("byte cap dropped 1 older record meanwhile") }, "\(notes)")
    XCTAssertTrue(notes.first?.hasPrefix("19: ") == true, "the first put past 20 MB: \(notes)")
  }

  /// An outside review: an app that runs the container with a larger byte cap filled it past this
  /// command's 20 MB, and one `queue put` of a few bytes dropped 181 of its records to get back
  /// under 20 MB. Such a put is refused now, nothing stored or dropped.
  func testAPutIntoAContainerAnAppFilledPastThisCommandsCapIsRefused() throws {
    do {
      let app = try QueueContainer(
        path: home + "/queue.sqlite", vault: try Vault.open(home: home),
        configuration: QueueConfiguration(byteCap: 1 << 30))
      for index in 0..<25 {
        try app.enqueue([UInt8](repeating: UInt8(index), count: 1 << 20), queue: "app", id: nil)
      }
    }
    let put = try vault(["--home", home, "queue", "put", "--queue", "app"], input: Array("small".utf8))
    XCTAssertEqual(put.status, 1, put.error)
    XCTAssertTrue(put.error.contains("more than this command's 20000000-byte cap"), put.error)
    XCTAssertTrue(put.error.contains("nothing was stored or dropped"), put.error)
    let stats = try json(["queue", "stats", "--json"])
    XCTAssertEqual(stats["total"] as? Int, 25)
    XCTAssertEqual((stats["dropped"] as? [String: Int])?["cap"] ?? 0, 0)
  }

  /// The same for `vault telemetry log`: events make room by dropping older events, so one event
  /// logged into a container an app filled with events past 20 MB dropped the app's events down to
  /// this command's cap (found in session 39's review of the unchecked paths).
  func testATelemetryLogIntoAContainerAnAppFilledPastThisCommandsCapIsRefused() throws {
    do {
      let app = try QueueContainer(
        path: home + "/queue.sqlite", vault: try Vault.open(home: home),
        configuration: QueueConfiguration(byteCap: 1 << 30))
      for index in 0..<25 {
        try app.enqueue([UInt8](repeating: UInt8(index), count: 1 << 20), queue: "telemetry", id: nil)
      }
    }
    let log = try vault(["--home", home, "telemetry", "log", "tap"])
    XCTAssertEqual(log.status, 1, log.error)
    XCTAssertTrue(log.error.contains("more than this command's 20000000-byte cap"), log.error)
    XCTAssertTrue(log.error.contains("nothing was stored or dropped"), log.error)
    let stats = try json(["queue", "stats", "--json"])
    XCTAssertEqual(stats["total"] as? Int, 25)
    XCTAssertEqual((stats["dropped"] as? [String: Int])?["cap"] ?? 0, 0)
  }

  func testPutStatsDuplicateRotateAndStatus() throws {
    let id = "0b6e3f5a-2c1d-4e8f-9a7b-123456789abc"
    let put = try vault(
      ["--home", home, "queue", "put", "--queue", "outbox", "--id", id], input: Array("canary-q1".utf8))
    XCTAssertEqual(put.outputText, "stored \(id)\n")
    let again = try vault(
      ["--home", home, "queue", "put", "--queue", "outbox", "--id", id], input: Array("other".utf8))
    XCTAssertEqual(again.status, 0)
    XCTAssertEqual(again.outputText, "duplicate \(id)\n")
    for i in 0..<4 {
      XCTAssertEqual(
        try vault(["--home", home, "queue", "put", "--queue", "telemetry"], input: Array("t\(i)".utf8)).status, 0)
    }
    var stats = try json(["queue", "stats", "--json"])
    XCTAssertEqual(stats["total"] as? Int, 5)
    XCTAssertEqual(stats["by_state"] as? [String: Int], ["pending": 5, "in_flight": 0, "parked": 0, "review": 0])
    XCTAssertEqual(stats["by_version"] as? [String: Int], ["1": 5])
    XCTAssertEqual(stats["by_queue"] as? [String: Int], ["outbox": 1, "telemetry": 4])
    XCTAssertEqual((stats["dropped"] as? [String: Int])?.values.reduce(0, +), 0)
    XCTAssertEqual(stats["bytes"] as? Int, 9 + 89 + 4 * (2 + 89))
    XCTAssertFalse(directoryContains(home, "canary-q1"), "the payload is sealed on disk")

    let rotated = try json(["rotate", "--json"])
    XCTAssertEqual(rotated["new_version"] as? Int, 2)
    XCTAssertEqual(rotated["retired"] as? [Int], [1])
    XCTAssertEqual(rotated["resealed"] as? [String: Int], [home + "/queue.sqlite": 5])
    stats = try json(["queue", "stats", "--json"])
    XCTAssertEqual(stats["by_version"] as? [String: Int], ["2": 5])
    XCTAssertEqual(stats["minimum_seal_version"] as? Int, 2)

    let status = try json(["status", "--json"])
    let versions = status["versions"] as! [[String: Any]]
    XCTAssertEqual(versions.map { $0["state"] as? String }, ["retired", "active"])
    XCTAssertEqual(versions.map { $0["records"] as? Int }, [0, 5])
    XCTAssertNotNil(versions[0]["retired_at"] as? String)
    let containers = status["containers"] as! [[String: Any]]
    XCTAssertEqual(containers.first?["path"] as? String, home + "/queue.sqlite")
    XCTAssertEqual(containers.first?["records"] as? [String: Int], ["2": 5])
  }

  func testListShowsMetadataOnlyAndResendRejectsUnknownIds() throws {
    try vault(["--home", home, "queue", "put", "--queue", "outbox"], input: Array("canary-list-7".utf8))
    let list = try vault(["--home", home, "queue", "list", "--json"])
    XCTAssertEqual(list.status, 0, list.error)
    XCTAssertFalse(list.outputText.contains("canary-list-7"))
    let rows = try JSONSerialization.jsonObject(with: Data(list.output)) as! [[String: Any]]
    XCTAssertEqual(rows.first?["state"] as? String, "pending")
    XCTAssertEqual(rows.first?["key_version"] as? Int, 1)
    XCTAssertEqual(try vault(["--home", home, "queue", "list", "--state", "parked"]).outputText, "")
    let resend = try vault(["--home", home, "queue", "resend", rows.first?["id"] as! String])
    XCTAssertEqual(resend.status, 1, "a pending record is not resendable")
    XCTAssertTrue(resend.error.contains("not parked or in review"), resend.error)
    let bad = try vault(["--home", home, "queue", "list", "--state", "lost"])
    XCTAssertEqual(bad.status, 64)
  }

  func testAnotherContainerIsRegisteredAndRotatedToo() throws {
    let other = temporary.sub("data/other.sqlite")
    try FileManager.default.createDirectory(atPath: temporary.sub("data"), withIntermediateDirectories: true)
    XCTAssertEqual(
      try vault(["--home", home, "queue", "put", "--queue", "q", "--container", other], input: [1]).status, 0)
    let rotated = try json(["rotate", "--json"])
    XCTAssertEqual(rotated["resealed"] as? [String: Int], [home + "/queue.sqlite": 0, other: 1])
    let stats = try json(["queue", "stats", "--container", other, "--json"])
    XCTAssertEqual(stats["by_version"] as? [String: Int], ["2": 1])
  }

  func testVersionsUsedByVaultSealAreNeverRetired() throws {
    let sealed = try vault(["--home", home, "seal", "--context", "file:1"], input: Array("kept".utf8)).output
    let rotated = try json(["rotate", "--json"])
    XCTAssertEqual(rotated["retired"] as? [Int], [])
    XCTAssertEqual(rotated["kept_versions"] as? [Int], [1])
    XCTAssertEqual(
      try vault(["--home", home, "open", "--context", "file:1"], input: sealed).output, Array("kept".utf8))
  }

  func testMissingRegisteredContainerStopsRotationBeforeAnyChange() throws {
    let manifest = try Data(contentsOf: URL(fileURLWithPath: home + "/manifest.json"))
    unlink(home + "/queue.sqlite")
    let run = try vault(["--home", home, "rotate"])
    XCTAssertEqual(run.status, 1)
    XCTAssertTrue(run.error.contains("is missing"), run.error)
    XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: home + "/manifest.json")), manifest)
  }

  /// Writers in other processes keep putting records while two rotations run: every record a put
  /// confirmed is present afterwards, opens, and sits under the newest key.
  func testWritersDuringRotationLoseNothing() throws {
    let script = """
      for i in $(seq 1 60); do printf 'record %s' "$i" | "$0" --home "$1" queue put --queue q || exit 1; done
      """
    let writers = try (0..<2).map { _ in try Spawn.start("/bin/bash", ["-c", script, vaultBinary(), home]) }
    XCTAssertEqual(try vault(["--home", home, "rotate"]).status, 0)
    XCTAssertEqual(try vault(["--home", home, "rotate"]).status, 0)
    let results = writers.map { $0.finish() }
    XCTAssertEqual(results.map(\.status), [0, 0], results.map(\.error).joined())
    let confirmed = results.flatMap {
      $0.outputText.split(separator: "\n").map { String($0.dropFirst("stored ".count)) }
    }
    XCTAssertEqual(confirmed.count, 120)
    XCTAssertEqual(try vault(["--home", home, "rotate"]).status, 0)
    let rows =
      try JSONSerialization.jsonObject(with: Data(try vault(["--home", home, "queue", "list", "--json"]).output))
      as! [[String: Any]]
    XCTAssertEqual(Set(rows.compactMap { $0["id"] as? String }), Set(confirmed))
    XCTAssertEqual(Set(rows.compactMap { $0["key_version"] as? Int }), [4])
    let status = try json(["status", "--json"])
    XCTAssertEqual(
      (status["versions"] as! [[String: Any]]).map { $0["state"] as? String },
      ["retired", "retired", "retired", "active"])
  }

  /// Option values are text: bytes that are not UTF-8 would be repaired into U+FFFD, and two
  /// different queue names (or paths) would become one. Only --context is taken as bytes.
  func testAnOptionValueThatIsNotUTF8IsRefused() throws {
    for name in ["\\377", "\\376"] {
      let run = try Spawn.run(
        "/bin/sh",
        ["-c", "printf p | \"$0\" --home \"$1\" queue put --queue \"$(printf '\(name)')\"", vaultBinary(), home])
      XCTAssertEqual(run.status, 64, run.error)
      XCTAssertTrue(run.error.contains("the value of '--queue' is not valid UTF-8"), run.error)
    }
    XCTAssertEqual(try json(["queue", "stats", "--json"])["total"] as? Int, 0, "nothing was stored")
  }
}
