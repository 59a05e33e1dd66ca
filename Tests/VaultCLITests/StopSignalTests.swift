import Foundation
import VaultTestSupport
import XCTest

/// Issue 9 item 7: SIGTERM, SIGINT and SIGHUP stop `memo relay` and `vault telemetry watch` within
/// a bound, with the documented exit code, and give the claimed records back at once.
final class StopSignalTests: XCTestCase {
  var temporary: TemporaryDirectory!
  var home: String { temporary.sub("home") }
  var memoBinary: String { (vaultBinary() as NSString).deletingLastPathComponent + "/memo" }
  let signals: [(number: Int32, name: String)] = [(SIGTERM, "SIGTERM"), (SIGINT, "SIGINT"), (SIGHUP, "SIGHUP")]

  override func setUpWithError() throws {
    temporary = TemporaryDirectory()
    XCTAssertEqual(
      try vault(["--home", home, "init", "--store", "keyfile", "--keyfile", temporary.sub("keys/v.keys")]).status, 0)
  }

  override func tearDown() { temporary = nil }

  /// `memo relay` against a relay that takes 30 s per memo: stopped mid-request, it exits
  /// 128 + the signal within 3 s, every memo is pending again, and the next relay sends them.
  func testMemoRelayGivesItsClaimBackOnEachStopSignal() throws {
    let relay = try RelayServer(directory: temporary.path, delay: 30, root: packageRoot())
    defer { relay.stop() }
    for index in 0..<3 { XCTAssertEqual(try memo(["send", "memo \(index)"]).status, 0) }
    for signal in signals {
      let child = try Spawn.start(
        memoBinary, ["--home", home, "relay", "--endpoint", relay.endpoint.absoluteString],
        environment: environment([:]))
      try waitUntil { try self.states("memo")["in_flight", default: 0] > 0 }
      let sent = Date()
      child.kill(signal.number)
      let status = child.exitStatus(within: 10)
      let elapsed = Date().timeIntervalSince(sent)
      let result = child.finish()
      XCTAssertEqual(status, 128 + signal.number, "\(signal.name): \(result.error)")
      XCTAssertLessThan(elapsed, 3, signal.name)
      XCTAssertEqual(try states("memo"), ["pending": 3, "in_flight": 0, "parked": 0, "review": 0], signal.name)
    }
    try relay.setMode("ok")
    let again = try memo(["relay", "--endpoint", relay.endpoint.absoluteString])
    XCTAssertEqual(again.outputText, "delivered 3, retrying 0, parked 0, rejected 0, pending 0\n", again.error)
  }

  /// `vault telemetry watch` against a collector that never answers: stopped mid-request, it exits
  /// 0 (a clean stop, as systemd expects of a service) within 3 s, every event is pending again,
  /// and a flush sends them at once.
  func testTelemetryWatchGivesItsClaimBackOnEachStopSignal() throws {
    let collector = try TelemetryServer(directory: temporary.path, mode: "hang", root: packageRoot())
    defer { collector.stop() }
    let token = temporary.sub("token")
    try "test-token".write(toFile: token, atomically: true, encoding: .utf8)
    for index in 0..<3 { XCTAssertEqual(try vault(["--home", home, "telemetry", "log", "event\(index)"]).status, 0) }
    for signal in signals {
      let child = try Spawn.start(
        vaultBinary(),
        [
          "--home", home, "telemetry", "watch", "--endpoint", collector.endpoint.absoluteString, "--token-file", token,
        ],
        environment: environment([:]))
      try waitUntil { try self.states("telemetry")["in_flight", default: 0] > 0 }
      let sent = Date()
      child.kill(signal.number)
      let status = child.exitStatus(within: 10)
      let elapsed = Date().timeIntervalSince(sent)
      let result = child.finish()
      XCTAssertEqual(status, 0, "\(signal.name): \(result.error)")
      XCTAssertLessThan(elapsed, 3, signal.name)
      XCTAssertEqual(try states("telemetry"), ["pending": 3, "in_flight": 0, "parked": 0, "review": 0], signal.name)
    }
    collector.setMode("ok")
    let flushed = try vault(
      [
        "--home", home, "telemetry", "flush", "--endpoint", collector.endpoint.absoluteString, "--token-file", token,
        "--json",
      ])
    XCTAssertEqual(flushed.status, 0, flushed.error)
    let report = try JSONSerialization.jsonObject(with: Data(flushed.output)) as? [String: Any]
    XCTAssertEqual(report?["delivered"] as? Int, 3, flushed.outputText)
  }

  @discardableResult
  private func memo(_ arguments: [String]) throws -> Spawned {
    try Spawn.run(memoBinary, ["--home", home] + arguments, environment: environment([:]))
  }

  /// The records of `queue` in the default container, by state.
  private func states(_ queue: String) throws -> [String: Int] {
    let listed = try vault(["--home", home, "queue", "list", "--queue", queue, "--json"])
    let rows = try JSONSerialization.jsonObject(with: Data(listed.output)) as? [[String: Any]] ?? []
    var states = ["pending": 0, "in_flight": 0, "parked": 0, "review": 0]
    for row in rows { states[row["state"] as? String ?? "?", default: 0] += 1 }
    return states
  }

  private func waitUntil(_ condition: () throws -> Bool, timeout: TimeInterval = 20) throws {
    let deadline = Date() + timeout
    while try !condition() {
      guard Date() < deadline else { return XCTFail("condition not met within \(timeout) s") }
      Thread.sleep(forTimeInterval: 0.1)
    }
  }
}
