import Foundation
import VaultTestSupport
import XCTest

/// Runs tools/crash-campaign: real processes SIGKILLed at random moments while enqueueing,
/// delivering and rotating, then a drain; nothing confirmed may be lost or duplicated.
final class CrashCampaignTests: XCTestCase {
  func testNothingConfirmedIsLostAcrossRandomKills() throws {
    let binDirectory = (vaultBinary() as NSString).deletingLastPathComponent
    let run = try Spawn.run(
      "/bin/bash", [packageRoot() + "/tools/crash-campaign", "--kills", "24"],
      environment: environment(["VAULT_BIN_DIR": binDirectory]))
    let lastLine = run.outputText.split(separator: "\n").last.map(String.init) ?? ""
    XCTAssertEqual(run.status, 0, run.outputText + run.error)
    XCTAssertTrue(lastLine.hasPrefix("kills="), lastLine)
    for field in ["lost=0", "duplicated=0", "undecryptable=0", "unaccounted=0"] {
      XCTAssertTrue(lastLine.contains(" \(field)"), "\(field) in: \(lastLine)")
    }
    let kills = Int(lastLine.split(separator: " ")[0].dropFirst("kills=".count)) ?? 0
    XCTAssertGreaterThanOrEqual(kills, 24)
    XCTAssertTrue(run.outputText.contains("worker_errors=0"), run.outputText)
  }
}
