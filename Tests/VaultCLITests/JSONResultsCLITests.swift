import Foundation
import VaultTestSupport
import XCTest

/// Every result in `--json` (issue 13, item 3): `init`, `queue put` and `telemetry log` print
/// every key (absent ones as null), and every time is ISO 8601 UTC with milliseconds.
final class JSONResultsCLITests: XCTestCase {
  var temporary: TemporaryDirectory!
  var home: String { temporary.sub("home") }

  override func setUpWithError() throws { temporary = TemporaryDirectory() }
  override func tearDown() { temporary = nil }

  private func object(_ arguments: [String], input: [UInt8] = []) throws -> [String: Any] {
    let run = try vault(["--home", home] + arguments, input: input)
    XCTAssertEqual(run.status, 0, run.error)
    return try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(run.output)) as? [String: Any], run.outputText)
  }

  private func assertMilliseconds(_ value: Any?, _ what: String, file: StaticString = #filePath, line: UInt = #line) {
    let text = value as? String ?? ""
    XCTAssertNotNil(
      text.range(of: #"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$"#, options: .regularExpression),
      "\(what): '\(text)' is not ISO 8601 UTC with milliseconds", file: file, line: line)
  }

  /// A relative --home is printed absolute by status, as by every other command (it was echoed
  /// as given).
  func testStatusPrintsARelativeHomeAbsolute() throws {
    _ = try object(["init", "--store", "keyfile", "--keyfile", temporary.sub("keys/v.keys"), "--json"])
    let parent = (home as NSString).deletingLastPathComponent
    let name = (home as NSString).lastPathComponent
    let run = try Spawn.run("/usr/bin/env", ["-C", parent, vaultBinary(), "--home", name, "status", "--json"])
    XCTAssertEqual(run.status, 0, run.error)
    let status = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(run.output)) as? [String: Any])
    XCTAssertEqual(status["home"] as? String, home)
  }

  func testInitPutAndLogPrintEveryKey() throws {
    let keyfile = temporary.sub("keys/v.keys")
    let created = try object(["init", "--store", "keyfile", "--keyfile", keyfile, "--json"])
    XCTAssertEqual(Set(created.keys), ["vault_id", "home", "store", "keyfile", "active_version"])
    XCTAssertEqual(created["home"] as? String, home)
    XCTAssertEqual(created["store"] as? String, "keyfile")
    XCTAssertEqual(created["keyfile"] as? String, keyfile)
    XCTAssertEqual(created["active_version"] as? Int, 1)
    XCTAssertEqual((created["vault_id"] as? String)?.count, 16)

    let id = "0b6e3f5a-2c1d-4e8f-9a7b-123456789abc"
    let put = try object(["queue", "put", "--queue", "q", "--id", id, "--json"], input: Array("hello".utf8))
    XCTAssertEqual(
      put as NSDictionary, ["id": id, "outcome": "stored", "container": home + "/queue.sqlite", "bytes": 5])
    let again = try object(["queue", "put", "--queue", "q", "--id", id, "--json"], input: Array("other".utf8))
    XCTAssertEqual(again["outcome"] as? String, "duplicate")

    let logged = try object(["telemetry", "log", "tap", "--session", "s1", "--json"])
    XCTAssertEqual(Set(logged.keys), ["id", "type", "session"])
    XCTAssertEqual(logged["type"] as? String, "tap")
    XCTAssertEqual(logged["session"] as? String, "s1")
    XCTAssertNotNil(UUID(uuidString: logged["id"] as? String ?? ""))
  }

  func testEveryTimeInJSONHasMillisecondsAndTheManifestKeepsItsForm() throws {
    _ = try object(["init", "--store", "keyfile", "--keyfile", temporary.sub("keys/v.keys"), "--json"])
    XCTAssertEqual(try vault(["--home", home, "queue", "put", "--queue", "q"], input: [1]).status, 0)
    _ = try object(["rotate", "--json"])
    let status = try object(["status", "--json"])
    XCTAssertTrue(status["keyfile"] is [String: Any])
    let versions = try XCTUnwrap(status["versions"] as? [[String: Any]])
    for version in versions { assertMilliseconds(version["created_at"], "created_at") }
    assertMilliseconds(versions[0]["retired_at"], "retired_at")
    XCTAssertTrue(versions[1]["retired_at"] is NSNull, "absent is null, never omitted")
    let schedule = try XCTUnwrap(try object(["rotate", "--if-due", "--json"])["schedule"] as? [String: Any])
    assertMilliseconds(schedule["active_since"], "active_since")
    let list = try vault(["--home", home, "queue", "list", "--json"])
    let records = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(list.output)) as? [[String: Any]])
    for record in records { assertMilliseconds(record["created_at"], "queue list created_at") }
    let manifest = try String(contentsOfFile: home + "/manifest.json", encoding: .utf8)
    XCTAssertNotNil(
      manifest.range(of: #""\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ""#, options: .regularExpression),
      "the manifest file keeps times in seconds")
  }
}

/// `telemetry flush` says what went wrong (issue 13, item 8), through the real binary against
/// tools/telemetry_server.py.
final class FlushRefusalCLITests: XCTestCase {
  var temporary: TemporaryDirectory!
  var home: String { temporary.sub("home") }
  var token: String { temporary.sub("token") }

  override func setUpWithError() throws {
    temporary = TemporaryDirectory()
    try initKeyfileVault(home: home, keyfile: temporary.sub("k/k.keys"))
    try "test-token".write(toFile: token, atomically: true, encoding: .utf8)
    for type in ["a", "b"] { XCTAssertEqual(try vault(["--home", home, "telemetry", "log", type]).status, 0) }
  }

  override func tearDown() { temporary = nil }

  private func flush(_ server: TelemetryServer, token: Bool) throws -> (Spawned, [String: Any]) {
    let run = try vault(
      ["--home", home, "telemetry", "flush", "--endpoint", server.endpoint.absoluteString, "--json"]
        + (token ? ["--token-file", self.token] : []))
    let report = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(run.output)) as? [String: Any], run.error)
    return (run, report)
  }

  private func stats() throws -> [String: Any] {
    let run = try vault(["--home", home, "queue", "stats", "--json"])
    return try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(run.output)) as? [String: Any])
  }

  /// Events another delivery claimed and never acked (killed between its POST and its ack) are
  /// neither pending nor lost: the next flush says they are in flight and will be sent again (a
  /// fault-injection review: it printed "delivered 0 … pending 0" and nothing more).
  func testAFlushSaysWhatAnotherDeliveryHoldsInFlight() throws {
    let server = try TelemetryServer(directory: temporary.path, root: packageRoot())
    defer { server.stop() }
    let flush = [
      "--home", home, "telemetry", "flush", "--endpoint", server.endpoint.absoluteString, "--token-file", token,
    ]
    // Killed at each commit in turn until one leaves the claimed events unacknowledged.
    for step in 1...12 {
      let killed = try vaultKilled(at: "fdatasync,fsync", step: step, flush)
      XCTAssertEqual(killed.status, 128 + SIGKILL, "commit #\(step): \(killed.error)")
      guard (try stats()["by_state"] as? [String: Int])?["in_flight"] == 2 else { continue }
      let again = try vault(flush)
      XCTAssertEqual(again.status, 0, again.error)
      XCTAssertTrue(again.outputText.contains("2 events in flight: claimed by another delivery"), again.outputText)
      return
    }
    XCTFail("no kill left the events in flight")
  }

  func testA401WithoutATokenFileWarnsAboutItAndExits1() throws {
    let server = try TelemetryServer(directory: temporary.path, root: packageRoot())
    defer { server.stop() }
    let (run, report) = try flush(server, token: false)
    XCTAssertEqual(run.status, 1, run.error)
    XCTAssertTrue(run.error.contains("--token-file"), run.error)
    XCTAssertTrue(run.error.contains("401"), run.error)
    XCTAssertEqual(report["delivered"] as? Int, 0)
    XCTAssertEqual(report["auth_failures"] as? Int, 2)
    XCTAssertEqual(report["error_kind"] as? String, "http-401")
    XCTAssertEqual(report["not_found"] as? Int, 0)

    // With the token the events go out, exit 0, and no warning: nothing was parked, so nothing
    // needs a resend (the refused batch after its backoff, at most 1 s here).
    Thread.sleep(forTimeInterval: 1.2)
    let (fixed, delivered) = try flush(server, token: true)
    XCTAssertEqual(fixed.status, 0, fixed.error)
    XCTAssertFalse(fixed.error.contains("--token-file"), fixed.error)
    XCTAssertEqual(delivered["delivered"] as? Int, 2)
    XCTAssertTrue(delivered["error_kind"] is NSNull, "absent is null, never omitted")

    let after = try stats()
    XCTAssertEqual((after["dropped"] as? [String: Int])?.values.reduce(0, +), 0, "never parked, never in review")
    XCTAssertEqual((after["by_state"] as? [String: Int])?.values.reduce(0, +), 0)
  }

  func testA404KeepsTheEventsPendingExits1AndTheRightEndpointDeliversThem() throws {
    let server = try TelemetryServer(directory: temporary.path, mode: "404", root: packageRoot())
    defer { server.stop() }
    let (run, report) = try flush(server, token: true)
    XCTAssertEqual(run.status, 1, run.error)
    XCTAssertTrue(run.error.contains("404"), run.error)
    XCTAssertTrue(run.error.contains("--endpoint"), run.error)
    XCTAssertEqual(report["not_found"] as? Int, 2)
    XCTAssertEqual(report["error_kind"] as? String, "http-404")
    XCTAssertEqual([report["parked"], report["rejected"], report["pending"]] as? [Int], [0, 0, 2])
    let kept = try stats()
    XCTAssertEqual((kept["by_state"] as? [String: Int])?["pending"], 2)
    XCTAssertEqual((kept["dropped"] as? [String: Int])?.values.reduce(0, +), 0, "not parked, not in review")

    server.setMode("ok")
    let (fixed, delivered) = try flush(server, token: true)
    XCTAssertEqual(fixed.status, 0, fixed.error)
    XCTAssertEqual(delivered["delivered"] as? Int, 2, "due at once, without a backoff")
  }
}
