import Foundation
import VaultTestSupport
import XCTest

/// The example app end to end: memos saved while the relay is down survive a key rotation and
/// are all delivered once it is up.
final class MemoTests: XCTestCase {
  var temporary: TemporaryDirectory!
  var home: String { temporary.sub("home") }
  var memoBinary: String { (vaultBinary() as NSString).deletingLastPathComponent + "/memo" }

  override func setUpWithError() throws {
    temporary = TemporaryDirectory()
    XCTAssertEqual(
      try vault(["--home", home, "init", "--store", "keyfile", "--keyfile", temporary.sub("keys/v.keys")]).status, 0)
  }

  override func tearDown() { temporary = nil }

  @discardableResult
  private func memo(_ arguments: [String], input: [UInt8] = []) throws -> Spawned {
    try Spawn.run(
      memoBinary, ["--home", home] + arguments, input: input,
      environment: environment(["MEMO_TELEMETRY_TOKEN": "test-token"]))
  }

  /// memo logs a command event per run, the send-to-saved timing (from another thread) and errors,
  /// all sealed, and delivers them with the relay.
  func testMemoLogsTelemetryAndDeliversIt() throws {
    let relay = try RelayServer(directory: temporary.path, root: packageRoot())
    defer { relay.stop() }
    let collector = try TelemetryServer(directory: temporary.path, root: packageRoot())
    defer { collector.stop() }
    try memo(["send", "telemetry canary-tm memo"])
    XCTAssertEqual(try memo(["resend", UUID().uuidString]).status, 1, "an error, logged by kind")
    let relayed = try memo(
      ["relay", "--endpoint", relay.endpoint.absoluteString, "--telemetry-endpoint", collector.endpoint.absoluteString])
    XCTAssertEqual(relayed.status, 0, relayed.error)
    XCTAssertTrue(relayed.outputText.contains("telemetry: delivered 5"), relayed.outputText)
    XCTAssertTrue(collector.received.allSatisfy { $0.malformed == nil && $0.status == 200 })
    XCTAssertEqual(collector.received.flatMap(\.ids).count, 5, "command ×3, timing, error")
    XCTAssertFalse(directoryContains(home, "send_to_saved_ms"), "telemetry is sealed at rest too")
  }

  /// An unknown command is a usage error (exit 64) whether or not the home holds a vault; it was
  /// "no vault" (exit 1) where there was none, since memo opened the vault first (docs review).
  func testAnUnknownCommandIsAUsageErrorWithOrWithoutAVault() throws {
    for home in [home, temporary.sub("empty")] {
      let run = try Spawn.run(memoBinary, ["--home", home, "bogus"], environment: environment([:]))
      XCTAssertEqual(run.status, 64, run.error)
      XCTAssertTrue(run.error.contains("unknown command 'bogus'"), run.error)
    }
    XCTAssertFalse(FileManager.default.fileExists(atPath: temporary.sub("empty")), "nothing was made")
    // Its name is shown escaped: a newline in it cannot forge a line of its own (outside review).
    let forged = try Spawn.run(
      memoBinary, ["--home", home, "bogus\nError: forged"], environment: environment([:]))
    XCTAssertEqual(forged.status, 64, forged.error)
    XCTAssertTrue(forged.error.hasPrefix("Error: unknown command 'bogus\\u{a}Error: forged'\n"), forged.error)
  }

  func testOfflineMemosSurviveRotationAndAreAllDelivered() throws {
    var ids: [String] = []
    for i in 0..<5 {
      // Half from stdin (private), half as an argument.
      let sent =
        i % 2 == 0
        ? try memo(["send"], input: Array("canary-memo-\(i) buy milk".utf8))
        : try memo(["send", "canary-memo-\(i) buy milk"])
      XCTAssertEqual(sent.status, 0, sent.error)
      XCTAssertTrue(sent.outputText.contains(" ms (sealed and on disk"), sent.outputText)
      ids.append(String(sent.outputText.split(separator: " ")[1]))
    }
    XCTAssertFalse(directoryContains(home, "canary-memo"), "memos are sealed on disk")
    // The relay is down (nothing listens on port 9): every memo is kept; the pass ends at the second
    // request in a row not answered, and the other three go back untouched.
    let offline = try memo(["relay", "--endpoint", "http://127.0.0.1:9/relay"])
    XCTAssertEqual(offline.outputText, "delivered 0, retrying 2, parked 0, rejected 0, pending 5\n", offline.error)

    let rotated = try vault(["--home", home, "rotate", "--json"])
    XCTAssertEqual(rotated.status, 0, rotated.error)

    let server = try RelayServer(directory: temporary.path, root: packageRoot())
    defer { server.stop() }
    Thread.sleep(forTimeInterval: 1.1)  // the first retry is due within 1 s (full jitter of 1 s)
    let online = try memo(["relay", "--endpoint", server.endpoint.absoluteString])
    XCTAssertEqual(online.outputText, "delivered 5, retrying 0, parked 0, rejected 0, pending 0\n", online.error)
    XCTAssertEqual(Set(server.received.map(\.id)), Set(ids))
    XCTAssertEqual(server.received.count, 5, "each memo arrived once")
    XCTAssertTrue(server.received.allSatisfy { $0.body.hasPrefix("canary-memo-") })
    let history = try memo(["history"])
    XCTAssertEqual(history.outputText.split(separator: "\n").filter { $0.contains("delivered") }.count, 5)
  }

  func testRejectedMemoIsKeptAndCanBeResent() throws {
    let server = try RelayServer(directory: temporary.path, mode: "400", root: packageRoot())
    defer { server.stop() }
    let id = String(try memo(["send", "note"]).outputText.split(separator: " ")[1])
    XCTAssertEqual(
      try memo(["relay", "--endpoint", server.endpoint.absoluteString]).outputText,
      "delivered 0, retrying 0, parked 0, rejected 1, pending 0\n")
    XCTAssertTrue(try memo(["history"]).outputText.contains("\(id)  review  attempts 1  http-400"))
    try server.setMode("ok")
    XCTAssertEqual(
      try memo(["relay", "--endpoint", server.endpoint.absoluteString]).outputText.prefix(11), "delivered 0")
    XCTAssertEqual(try memo(["resend", id]).outputText, "resent \(id)\n")
    XCTAssertEqual(
      try memo(["relay", "--endpoint", server.endpoint.absoluteString]).outputText.prefix(11), "delivered 1")
  }

  func testRetryAfterIsHonoured() throws {
    let server = try RelayServer(directory: temporary.path, mode: "429", retryAfter: 30, root: packageRoot())
    defer { server.stop() }
    try memo(["send", "later"])
    XCTAssertEqual(
      try memo(["relay", "--endpoint", server.endpoint.absoluteString]).outputText.prefix(23), "delivered 0, retrying 1"
    )
    try server.setMode("ok")
    XCTAssertEqual(
      try memo(["relay", "--endpoint", server.endpoint.absoluteString]).outputText,
      "delivered 0, retrying 0, parked 0, rejected 0, pending 1\n", "not retried before Retry-After")
    XCTAssertEqual(server.received.count, 1)
  }
}
