import Foundation
import VaultTestSupport
import XCTest

/// The systemd user units that run `vault telemetry flush` for applications that are not running.
final class SystemdUnitTests: XCTestCase {
  func testUnitsVerify() throws {
    try XCTSkipUnless(
      FileManager.default.fileExists(atPath: "/usr/bin/systemd-analyze"), "systemd-analyze is not installed here")
    let result = try Spawn.run("/bin/bash", [packageRoot() + "/tools/systemd/verify.sh"])
    XCTAssertEqual(result.status, 0, result.error)
    XCTAssertTrue(result.outputText.contains("units verified"), result.outputText + result.error)
  }

  func testTheServiceRunsTheFlushCommand() throws {
    let service = try String(
      contentsOfFile: packageRoot() + "/tools/systemd/vault-telemetry-flush.service", encoding: .utf8)
    XCTAssertTrue(service.contains("vault telemetry flush --endpoint ${VAULT_TELEMETRY_ENDPOINT}"))
    XCTAssertTrue(service.contains("Type=oneshot"))
  }
}
