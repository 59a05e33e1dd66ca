import Foundation
import VaultTestSupport
import XCTest

/// `vault telemetry log --payload` keeps the payload as written: numbers byte for byte (no trip
/// through Double), strings with their escapes decoded once and encoded again faithfully.
final class TelemetryPayloadTests: XCTestCase {
  var temporary: TemporaryDirectory!
  var home: String { temporary.sub("home") }

  override func setUpWithError() throws {
    temporary = TemporaryDirectory()
    try initKeyfileVault(home: home, keyfile: temporary.sub("k/k.keys"))
  }

  override func tearDown() { temporary = nil }

  private func flush(to server: TelemetryServer) throws {
    let token = temporary.sub("token")
    try "test-token".write(toFile: token, atomically: true, encoding: .utf8)
    let flushed = try vault([
      "--home", home, "telemetry", "flush", "--endpoint", server.endpoint.absoluteString, "--token-file", token,
    ])
    XCTAssertEqual(flushed.status, 0, flushed.error)
    XCTAssertTrue(flushed.outputText.hasPrefix("delivered 1,"), flushed.outputText)
  }

  func testNumbersReachTheServerExactlyAsWritten() throws {
    let server = try TelemetryServer(directory: temporary.path, root: packageRoot(), recordBodies: true)
    defer { server.stop() }
    let payload = #"{"n": 12345678901234567891, "d": 0.10000000000000000000001, "e": -1.5e+300, "z": -0, "f": 1E2}"#
    let logged = try vault(["--home", home, "telemetry", "log", "numbers", "--payload", payload])
    XCTAssertEqual(logged.status, 0, logged.error)
    try flush(to: server)
    let body = try XCTUnwrap(server.bodies.first)
    for literal in [
      #""n":12345678901234567891"#, #""d":0.10000000000000000000001"#, #""e":-1.5e+300"#, #""z":-0"#, #""f":1E2"#,
    ] {
      XCTAssertTrue(body.contains(literal), "\(literal) not in \(body)")
    }
  }

  func testStringsAndStructureRoundTrip() throws {
    let server = try TelemetryServer(directory: temporary.path, root: packageRoot(), recordBodies: true)
    defer { server.stop() }
    let payload =
      #"{"s": "tab\tquote\" back\\ slash\/ \u00e9 \ud83d\ude00 ctl\u0001 nul\u0000 é", "#
      + #""a": [true, false, null, [], {}, "x"], "o": {"k": {"deep": [1, 2.5]}}, "empty": ""}"#
    let logged = try vault(["--home", home, "telemetry", "log", "strings", "--payload", payload])
    XCTAssertEqual(logged.status, 0, logged.error)
    try flush(to: server)
    let body = try XCTUnwrap(server.bodies.first)
    let sent = try XCTUnwrap(
      (try JSONSerialization.jsonObject(with: Data(body.utf8)) as? [String: Any])?["events"] as? [[String: Any]])
    let got = try XCTUnwrap(sent.first?["payload"] as? NSDictionary)
    let expected = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(payload.utf8)) as? NSDictionary)
    XCTAssertEqual(got, expected)
    XCTAssertEqual(got["s"] as? String, "tab\tquote\" back\\ slash/ é 😀 ctl\u{1} nul\u{0} é")
  }

  func testMalformedPayloadsAreUsageErrors() throws {
    for payload in [
      #"{"n": 01}"#, #"{"n": 1.}"#, #"{"n": .5}"#, #"{"n": +1}"#, #"{"n": NaN}"#, #"{"a": 1,}"#, #"{"a": 1, "a": 2}"#,
      #"[1]"#, #"{"s": "\ud800"}"#, "{\"s\": \"raw\u{1}control\"}", #"{"a": 1} x"#,
      String(repeating: #"{"a": "#, count: 100) + "1" + String(repeating: "}", count: 100),
    ] {
      let logged = try vault(["--home", home, "telemetry", "log", "bad", "--payload", payload])
      XCTAssertEqual(logged.status, 64, "\(payload): \(logged.outputText)")
    }
  }
}
