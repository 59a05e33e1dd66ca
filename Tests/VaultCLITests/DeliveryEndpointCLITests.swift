import Foundation
import VaultTestSupport
import XCTest

/// Where `vault telemetry` and `memo relay` may send, and what they leave behind: https://
/// anywhere, http:// to loopback (or elsewhere only with --allow-insecure-http), a private
/// certificate authority with --ca-file, and no file written outside the vault home.
final class DeliveryEndpointCLITests: XCTestCase {
  var temporary: TemporaryDirectory!
  var home: String { temporary.sub("home") }
  var memoBinary: String { (vaultBinary() as NSString).deletingLastPathComponent + "/memo" }

  override func setUpWithError() throws {
    temporary = TemporaryDirectory()
    try initKeyfileVault(home: home, keyfile: temporary.sub("keys/v.keys"))
  }

  override func tearDown() { temporary = nil }

  func testPlainHTTPToAnotherMachineIsAUsageErrorThatNamesTheReason() throws {
    XCTAssertEqual(try vault(["--home", home, "telemetry", "log", "tap"]).status, 0)
    for action in ["flush", "watch"] {
      let run = try vault(["--home", home, "telemetry", action, "--endpoint", "http://10.20.30.40/v1/telemetry/batch"])
      XCTAssertEqual(run.status, 64, run.error)
      XCTAssertTrue(run.error.contains("plain http://"), run.error)
      XCTAssertTrue(run.error.contains("--allow-insecure-http"), run.error)
    }
    let secret = try vault([
      "--home", home, "telemetry", "flush", "--endpoint", "https://me:hunter2@collector.example/x",
    ])
    XCTAssertEqual(secret.status, 64)
    XCTAssertFalse(secret.error.contains("hunter2"), "a password in the URL is never repeated")
    XCTAssertEqual(
      try vault(["--home", home, "telemetry", "flush", "--endpoint", "ftp://collector.example/"]).status, 64)
    let relay = try Spawn.run(memoBinary, ["--home", home, "relay", "--endpoint", "http://10.20.30.40/relay"])
    XCTAssertEqual(relay.status, 64, relay.error)
    XCTAssertTrue(relay.error.contains("plain http://"), relay.error)
    let stats = try vault(["--home", home, "queue", "stats", "--json"])
    XCTAssertEqual(json(stats.outputText)["by_state"]?["in_flight"], 0, "nothing was claimed: \(stats.outputText)")
    XCTAssertEqual(json(stats.outputText)["by_state"]?["review"], 0)
  }

  func testHTTPSWithAPrivateAuthorityDeliversOnlyWhenItIsTrusted() throws {
    let certificates = try TestCertificates(directory: temporary.sub("tls"))
    let server = try HostileServer(
      directory: temporary.path, mode: "ok", certificate: certificates.server, root: packageRoot())
    defer { server.stop() }
    let endpoint = server.url("/v1/telemetry/batch").absoluteString
    XCTAssertEqual(try vault(["--home", home, "telemetry", "log", "tap"]).status, 0)
    // OpenSSL would write the session secrets to SSLKEYLOGFILE: it is ignored.
    let keyLog = temporary.sub("tls-keys.log")
    let trusted = try vault(
      ["--home", home, "telemetry", "flush", "--endpoint", endpoint, "--ca-file", certificates.authority, "--json"],
      environment: environment(["SSLKEYLOGFILE": keyLog]))
    XCTAssertFalse(FileManager.default.fileExists(atPath: keyLog), "TLS secrets were written")
    XCTAssertEqual(trusted.status, 0, trusted.error)
    XCTAssertEqual(report(trusted.outputText)["delivered"], 1, trusted.outputText)
    XCTAssertEqual(server.requests.count, 1)

    // The system's authorities do not know the private one: nothing is sent, the event waits
    // with the failure named by kind.
    XCTAssertEqual(try vault(["--home", home, "telemetry", "log", "tap"]).status, 0)
    let untrusted = try vault(
      ["--home", home, "telemetry", "flush", "--endpoint", endpoint, "--json"],
      environment: environment(["SSLKEYLOGFILE": keyLog]))
    XCTAssertFalse(FileManager.default.fileExists(atPath: keyLog))
    for bad in [temporary.sub("missing.pem"), temporary.path, temporary.sub("tls/ca.key")] {
      let refused = try vault(["--home", home, "telemetry", "flush", "--endpoint", endpoint, "--ca-file", bad])
      XCTAssertEqual(refused.status, 64, "\(bad): \(refused.error)")
    }
    XCTAssertEqual(untrusted.status, 0, untrusted.error)
    XCTAssertEqual(report(untrusted.outputText)["delivered"], 0, untrusted.outputText)
    XCTAssertEqual(report(untrusted.outputText)["pending"], 1, untrusted.outputText)
    XCTAssertEqual(server.requests.count, 1, "nothing is sent over an unverified connection")
    let waiting = try vault(["--home", home, "queue", "list", "--json"])
    XCTAssertTrue(waiting.outputText.contains("tls-verification"), waiting.outputText)
  }

  /// URLSession made `~/.cache/org.swift.foundation.URLCache` (and a folder under the data home)
  /// even for commands that never connect; as root with HOME=/nonexistent it created /nonexistent,
  /// and under umask 000 those folders were 0777. Now nothing outside the vault home is written.
  func testDeliveryCommandsWriteNothingOutsideTheVaultHome() throws {
    let outsideHome = temporary.sub("user-home")
    try FileManager.default.createDirectory(atPath: outsideHome, withIntermediateDirectories: true)
    let missingHome = "/nonexistent-vault-test-\(UUID().uuidString.prefix(8))"
    let relay = try RelayServer(directory: temporary.path, root: packageRoot())
    defer { relay.stop() }
    let collector = try TelemetryServer(directory: temporary.path, root: packageRoot())
    defer { collector.stop() }
    let token = temporary.sub("token")
    try Data("test-token\n".utf8).write(to: URL(fileURLWithPath: token))
    let runs: [(String, [String])] = [
      (vaultBinary(), ["--home", home, "telemetry", "log", "tap"]),
      (memoBinary, ["--home", home, "send", "a memo"]),
      (
        vaultBinary(),
        ["--home", home, "telemetry", "flush", "--endpoint", collector.endpoint.absoluteString, "--token-file", token]
      ),
      (
        memoBinary,
        [
          "--home", home, "relay", "--endpoint", relay.endpoint.absoluteString, "--telemetry-endpoint",
          collector.endpoint.absoluteString,
        ]
      ),
    ]
    for userHome in [outsideHome, missingHome] {
      let env = environment([
        "HOME": userHome, "MEMO_TELEMETRY_TOKEN": "test-token", "XDG_DATA_HOME": nil, "XDG_CACHE_HOME": nil,
        "XDG_CONFIG_HOME": nil, "VAULT_HOME": nil,
      ])
      for (binary, arguments) in runs {
        let run = try Spawn.run(
          "/bin/sh", ["-c", "umask 000 && exec \"$@\"", "sh", binary] + arguments, environment: env)
        XCTAssertEqual(run.status, 0, "\(arguments): \(run.error)")
      }
    }
    XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: outsideHome), [])
    XCTAssertFalse(FileManager.default.fileExists(atPath: missingHome))
    XCTAssertGreaterThanOrEqual(
      collector.received.filter { $0.status == 200 }.flatMap(\.ids).count, 2, "\(collector.received)")
    XCTAssertEqual(relay.received.count, 2, "both memos were delivered")
  }

  private func json(_ text: String) -> [String: [String: Int]] {
    let object = try? JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any]
    return (object ?? [:]).compactMapValues { $0 as? [String: Int] }
  }

  /// The flush report's counts (`error_kind`, a string or null, is left out).
  private func report(_ text: String) -> [String: Int] {
    ((try? JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any]) ?? [:]).compactMapValues {
      $0 as? Int
    }
  }
}
