import Foundation
import VaultTestSupport
import XCTest

/// `vault rotate` killed with SIGKILL at each of its renames and writes in turn (strace), then run
/// again: the rerun finishes (or, once the killed one had finished, rotates again), every record
/// and every `vault seal` envelope still opens, and no temporary file of a killed manifest or
/// keyfile write is left in the home or beside the keyfile.
final class RotateKillTests: XCTestCase {
  var temporary: TemporaryDirectory!

  override func setUp() { temporary = TemporaryDirectory() }
  override func tearDown() { temporary = nil }

  /// Runs the command `prepare` returns (after making what it needs in a fresh directory) killed
  /// at the 1st, 2nd, … call of each set in `callSets` until it runs to the end; `check` looks at
  /// each killed run (its directory, and a label naming the kill point). Returns the kills.
  private func killEachStep(
    of callSets: [String], limit: Int, prepare: (_ run: String) throws -> [String],
    check: (_ run: String, _ label: String) throws -> Void
  ) throws -> Int {
    var kills = 0
    for calls in callSets {
      for step in 1...limit {
        let run = temporary.sub("\(calls.prefix(5))-\(step)")
        let killed = try vaultKilled(at: calls, step: step, try prepare(run))
        if killed.status == 0 { break }
        let label = "\(calls) #\(step)"
        XCTAssertEqual(killed.status, 128 + SIGKILL, "\(label): \(killed.error)")
        kills += 1
        try check(run, label)
      }
    }
    return kills
  }

  /// Review: a rotation killed between writing a manifest temporary and renaming it left
  /// `manifest.json.tmp-*` in the home, and no later manifest write removed it (only `init` did).
  func testARotationKilledAtEachStepLeavesNoTemporaryBehindItsRerun() throws {
    var sealed: [String: [UInt8]] = [:]
    let kills = try killEachStep(
      of: ["rename,renameat,renameat2", "write"], limit: 40,
      prepare: { run in
        let home = run + "/home"
        try initKeyfileVault(home: home, keyfile: run + "/keys/v.keys")
        for record in ["one", "two"] {
          XCTAssertEqual(
            try vault(["--home", home, "queue", "put", "--queue", "q"], input: Array(record.utf8)).status, 0)
        }
        let envelope = try vault(["--home", home, "seal", "--context", "c", "--armor"], input: Array("kept".utf8))
        XCTAssertEqual(envelope.status, 0, envelope.error)
        sealed[run] = envelope.output
        return ["--home", home, "rotate"]
      },
      check: { run, label in
        let home = run + "/home"
        let again = try vault(["--home", home, "rotate"])
        XCTAssertEqual(again.status, 0, "\(label): \(again.error)")
        let stats = try vault(["--home", home, "queue", "stats", "--json"])
        XCTAssertEqual(stats.status, 0, "\(label): \(stats.error)")
        XCTAssertTrue(stats.outputText.contains("\"total\" : 2"), "\(label): \(stats.outputText)")
        let opened = try vault(["--home", home, "open", "--context", "c"], input: sealed[run] ?? [])
        XCTAssertEqual(opened.outputText, "kept", "\(label): \(opened.error)")
        for directory in [home, run + "/keys"] {
          let left = try FileManager.default.contentsOfDirectory(atPath: directory).filter { $0.contains(".tmp-") }
          XCTAssertEqual(left, [], "\(label): no temporary is left in \(directory)")
        }
      })
    XCTAssertGreaterThan(kills, 10)
  }

  /// `unpin` killed at each rename and write, then run again: the pin is released (by the rerun,
  /// or already by the killed run: its key store copy of the manifest was written first, so the
  /// rerun then says the version is not kept), and no manifest temporary is left (review: the
  /// rerun that only adopted the key store's copy never removed the killed write's temporary).
  func testAnUnpinKilledAtEachStepLeavesNoTemporaryBehindItsRerun() throws {
    let kills = try killEachStep(
      of: ["rename,renameat,renameat2", "write"], limit: 20,
      prepare: { run in
        let home = run + "/home"
        try initKeyfileVault(home: home, keyfile: run + "/keys/v.keys")
        XCTAssertEqual(try vault(["--home", home, "seal", "--context", "c", "--armor"], input: [1]).status, 0)
        XCTAssertEqual(try vault(["--home", home, "rotate"]).status, 0)
        return ["--home", home, "unpin", "1", "--yes"]
      },
      check: { run, label in
        let home = run + "/home"
        let again = try vault(["--home", home, "unpin", "1", "--yes"])
        if again.status != 0 {
          XCTAssertTrue(again.error.contains("key version 1 is not kept"), "\(label): \(again.error)")
        }
        let status = try vault(["--home", home, "status", "--json"])
        let object = try JSONSerialization.jsonObject(with: Data(status.output)) as? [String: Any]
        XCTAssertEqual(object?["external_seal_versions"] as? [Int], [], "\(label): \(status.outputText)")
        let left = try FileManager.default.contentsOfDirectory(atPath: home).filter { $0.contains(".tmp-") }
        XCTAssertEqual(left, [], "\(label): no temporary is left in the home")
      })
    XCTAssertGreaterThan(kills, 2)
  }
}
