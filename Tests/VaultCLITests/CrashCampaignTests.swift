import Foundation
import VaultTestSupport
import XCTest

/// Runs tools/crash-campaign's quick mode: real processes SIGKILLed at random moments while
/// enqueueing, delivering (ack, fail, park, resend) and rotating, with a second registered
/// container truncated or replaced in some rounds, then a drain; nothing confirmed may be lost or
/// duplicated, no parked record delivered unasked, and every record of both containers must open.
final class CrashCampaignTests: XCTestCase {
  func testNothingConfirmedIsLostAcrossRandomKillsAndDamagedContainers() throws {
    let binDirectory = (vaultBinary() as NSString).deletingLastPathComponent
    let run = try Spawn.run(
      "/bin/bash", [packageRoot() + "/tools/crash-campaign", "--kills", "300"],
      environment: environment(["VAULT_BIN_DIR": binDirectory]))
    let lines = run.outputText.split(separator: "\n").map(String.init)
    let lastLine = lines.last ?? ""
    // The figures RELIABILITY.md cites come from this line; the test log keeps it.
    print("crash campaign: \(lines.first { $0.hasPrefix("rounds=") } ?? "")\ncrash campaign: \(lastLine)")
    XCTAssertEqual(run.status, 0, run.outputText + run.error)
    XCTAssertTrue(lastLine.hasPrefix("kills="), lastLine)
    for field in ["lost=0", "duplicated=0", "undecryptable=0", "unaccounted=0", "park_broken=0"] {
      XCTAssertTrue(lastLine.contains(" \(field)"), "\(field) in: \(lastLine)")
    }
    let fields = Self.fields(lastLine)
    XCTAssertGreaterThanOrEqual(fields["kills"] ?? 0, 300)
    XCTAssertEqual(
      fields["kills"], (fields["kills_enqueue"] ?? 0) + (fields["kills_deliver"] ?? 0) + (fields["kills_rotate"] ?? 0))
    for mode in ["kills_enqueue", "kills_deliver", "kills_rotate"] {
      XCTAssertGreaterThan(fields[mode] ?? 0, 0, "\(mode) in: \(lastLine)")
    }
    // Every fifth round damages the second container, each kind in turn: 300 kills are about 38
    // rounds, so each kind comes up at least once.
    for fault in ["empty", "half", "older", "foreign"] {
      XCTAssertGreaterThan(fields[fault] ?? 0, 0, "\(fault) in: \(lastLine)")
    }
    XCTAssertGreaterThan(fields["removals"] ?? 0, 0, lastLine)
    XCTAssertTrue(run.outputText.contains("worker_errors=0"), run.outputText)
    // The deliverers went through every settlement, and the second container came back whole.
    let summary = Self.fields(lines.first { $0.hasPrefix("rounds=") } ?? "")
    for operation in ["acked", "failed", "parked", "resent"] {
      XCTAssertGreaterThan(summary[operation] ?? 0, 0, "\(operation) in: \(run.outputText)")
    }
    XCTAssertTrue(run.outputText.contains("second_container_records=64"), run.outputText)
    // No rotation, killed or run to its end, may succeed while the second container is damaged.
    XCTAssertTrue(run.outputText.contains(" rotated_over_damage=0 "), run.outputText)
    // …and the one run to its end each time refuses with its error, never dies by a signal.
    XCTAssertTrue(run.outputText.contains(",succeeded:0,crashed:0 "), run.outputText)
    XCTAssertFalse(run.outputText.contains("clean_rotations_during_damage=refused:0,"), run.outputText)
  }

  /// `name=number` pairs of one output line (`(empty=1` counts as `empty=1`).
  private static func fields(_ line: String) -> [String: Int] {
    var fields: [String: Int] = [:]
    for pair in line.split(separator: " ") {
      let parts = pair.trimmingCharacters(in: CharacterSet(charactersIn: "()")).split(separator: "=")
      if parts.count == 2, let value = Int(parts[1]) { fields[String(parts[0])] = value }
    }
    return fields
  }
}
