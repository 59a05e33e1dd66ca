import Foundation
import Vault
import VaultKeys
import VaultTestSupport
import XCTest

/// `vault rotate --if-due [--max-age DAYS]` (issue 11 item 4): rotates only when the active version
/// is older than the policy, for a daily timer; `status` shows each version's age.
final class RotationScheduleTests: XCTestCase {
  var temporary: TemporaryDirectory!
  var home: String { temporary.sub("home") }

  override func setUpWithError() throws {
    temporary = TemporaryDirectory()
    try initKeyfileVault(home: home, keyfile: temporary.sub("k/v.keys"))
  }

  override func tearDown() { temporary = nil }

  private func json(_ run: Spawned) throws -> [String: Any] {
    try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(run.output)) as? [String: Any], run.outputText)
  }

  private func activeVersion() throws -> Int? {
    try json(try vault(["--home", home, "status", "--json"]))["active_version"] as? Int
  }

  func testAFreshVersionIsNotDueAndNothingRotates() throws {
    let run = try vault(["--home", home, "rotate", "--if-due"])
    XCTAssertEqual(run.status, 0, run.error)
    XCTAssertTrue(
      run.outputText.hasPrefix("Not due: version 1 is 0 days old; the policy rotates after 90 days"), run.outputText)
    XCTAssertEqual(try activeVersion(), 1)
    let report = try json(try vault(["--home", home, "rotate", "--if-due", "--max-age", "30", "--json"]))
    XCTAssertEqual(report["rotated"] as? Bool, false)
    XCTAssertTrue(report["rotation"] is NSNull, "absent is null: \(report)")
    let schedule = try XCTUnwrap(report["schedule"] as? [String: Any])
    XCTAssertEqual(schedule["active_version"] as? Int, 1)
    XCTAssertEqual(schedule["max_age_days"] as? Double, 30)
    XCTAssertEqual(schedule["due"] as? Bool, false)
    XCTAssertLessThan(try XCTUnwrap(schedule["age_days"] as? Double), 1)
    XCTAssertEqual(try activeVersion(), 1)
  }

  /// `rotate` killed at each rename (strace), then `rotate --if-due`: a rotation left unfinished
  /// is due and resumed, and the text says so (review: it said "Due: version 2 is 0 days old;
  /// the policy rotates after 90 days", a reason that did not hold).
  func testAKilledRotationIsDueBecauseItDidNotFinish() throws {
    XCTAssertEqual(try vault(["--home", home, "queue", "put", "--queue", "q"], input: [1]).status, 0)
    let fixture = temporary.sub("fixture")
    try FileManager.default.copyItem(atPath: temporary.sub("k"), toPath: fixture + "-k")
    try FileManager.default.copyItem(atPath: home, toPath: fixture)
    var resumed = 0
    for step in 1...20 {
      let killed = try vaultKilled(at: "rename,renameat,renameat2", step: step, ["--home", home, "rotate"])
      if killed.status == 0 { break }
      XCTAssertEqual(killed.status, 128 + SIGKILL, "#\(step): \(killed.error)")
      let run = try vault(["--home", home, "rotate", "--if-due"])
      XCTAssertEqual(run.status, 0, "#\(step): \(run.error)")
      if run.outputText.hasPrefix("Due:") {
        resumed += 1
        XCTAssertTrue(
          run.outputText.hasPrefix("Due: the rotation to version 2 did not finish (it was stopped or killed)"),
          "#\(step): \(run.outputText)")
        XCTAssertTrue(run.outputText.contains("version 1 -> 2"), "#\(step): resumed, no other version")
      }
      for (copy, original) in [(fixture, home), (fixture + "-k", temporary.sub("k"))] {
        try FileManager.default.removeItem(atPath: original)
        try FileManager.default.copyItem(atPath: copy, toPath: original)
      }
    }
    XCTAssertGreaterThan(resumed, 2)
  }

  /// `--max-age 0` makes any version due: the rotation is the ordinary one, with its report.
  func testADueVersionRotatesWithTheOrdinaryReport() throws {
    let run = try vault(["--home", home, "rotate", "--if-due", "--max-age", "0", "--json"])
    XCTAssertEqual(run.status, 0, run.error)
    let report = try json(run)
    XCTAssertEqual(report["rotated"] as? Bool, true)
    XCTAssertEqual((report["rotation"] as? [String: Any])?["new_version"] as? Int, 2)
    XCTAssertEqual(try activeVersion(), 2)
    let text = try vault(["--home", home, "rotate", "--if-due", "--max-age", "0"])
    XCTAssertTrue(
      text.outputText.hasPrefix("Due: version 2 is 0 days old; the policy rotates after 0 days"), text.outputText)
    XCTAssertTrue(text.outputText.contains("Rotated vault"), text.outputText)
    XCTAssertEqual(try activeVersion(), 3)
  }

  func testMistakesAreUsageErrors() throws {
    for arguments in [
      ["rotate", "--max-age", "30"], ["rotate", "--if-due", "--max-age", "-1"],
      ["rotate", "--if-due", "--max-age", "lots"],
      ["rotate", "--if-due", "--max-age", "36501"], ["rotate", "--if-due", "--compromised", "--yes"],
    ] {
      let run = try vault(["--home", home] + arguments)
      XCTAssertEqual(run.status, 64, "\(arguments): \(run.error)")
    }
    XCTAssertEqual(try activeVersion(), 1, "nothing rotated")
  }

  func testStatusShowsEachVersionsAge() throws {
    XCTAssertEqual(try vault(["--home", home, "rotate"]).status, 0)
    let versions = try XCTUnwrap(
      try json(try vault(["--home", home, "status", "--json"]))["versions"] as? [[String: Any]])
    XCTAssertEqual(versions.count, 2)
    XCTAssertTrue(versions.allSatisfy { ($0["age_days"] as? Double).map { $0 < 1 } ?? false }, "\(versions)")
    XCTAssertTrue(try vault(["--home", home, "status"]).outputText.contains("(0 days ago)"))
  }

  /// The decision itself, at chosen times: due from the policy's age on, and due when the manifest's
  /// time cannot be read (rotating is always safe; waiting on a time nobody can read is not).
  func testTheScheduleAtChosenTimes() throws {
    var manifest = Manifest(
      vaultID: KeyringID(bytes: [UInt8](repeating: 7, count: KeyringID.byteCount))!,
      store: StoreDescriptor(kind: .keyfile),
      createdAt: "2026-01-01T00:00:00Z")
    manifest.versions[0].state = KeyState.active
    manifest.activeVersion = 1
    let created = ISO8601DateFormatter().date(from: "2026-01-01T00:00:00Z")!
    let day = 86_400.0
    let early = RotationSchedule(manifest: manifest, maxAgeDays: 90, now: created + 89.9 * day)
    XCTAssertFalse(early.due)
    XCTAssertEqual(early.ageDays ?? 0, 89.9, accuracy: 0.001)
    XCTAssertTrue(RotationSchedule(manifest: manifest, maxAgeDays: 90, now: created + 90 * day).due)
    manifest.versions[0].createdAt = "sometime"
    let unknown = RotationSchedule(manifest: manifest, maxAgeDays: 90, now: created)
    XCTAssertTrue(unknown.due)
    XCTAssertNil(unknown.ageDays)
    // A rotation that began and did not finish is due at once, whatever the age: the old key
    // may still be live, and a timer running `--if-due` resumes it.
    manifest.versions[0].createdAt = "2026-01-01T00:00:00Z"
    manifest.resealing = 1
    let stopped = RotationSchedule(manifest: manifest, maxAgeDays: 90, now: created + day)
    XCTAssertTrue(stopped.unfinished)
    XCTAssertTrue(stopped.due)
  }
}
