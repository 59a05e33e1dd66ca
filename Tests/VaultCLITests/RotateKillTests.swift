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

  /// Review: a rotation killed between writing a manifest temporary and renaming it left
  /// `manifest.json.tmp-*` in the home, and no later manifest write removed it (only `init` did).
  func testARotationKilledAtEachStepLeavesNoTemporaryBehindItsRerun() throws {
    var kills = 0
    for calls in ["rename,renameat,renameat2", "write"] {
      for step in 1...40 {
        let run = temporary.sub("\(calls.prefix(5))-\(step)")
        let home = run + "/home"
        let keys = run + "/keys"
        XCTAssertEqual(
          try vault(["--home", home, "init", "--store", "keyfile", "--keyfile", keys + "/v.keys"]).status, 0)
        for record in ["one", "two"] {
          XCTAssertEqual(
            try vault(["--home", home, "queue", "put", "--queue", "q"], input: Array(record.utf8)).status, 0)
        }
        let sealed = try vault(["--home", home, "seal", "--context", "c", "--armor"], input: Array("kept".utf8))
        XCTAssertEqual(sealed.status, 0, sealed.error)
        let killed = try vaultKilled(at: calls, step: step, ["--home", home, "rotate"])
        if killed.status == 0 { break }
        let label = "\(calls) #\(step)"
        XCTAssertEqual(killed.status, 128 + SIGKILL, "\(label): \(killed.error)")
        kills += 1
        let again = try vault(["--home", home, "rotate"])
        XCTAssertEqual(again.status, 0, "\(label): \(again.error)")
        let stats = try vault(["--home", home, "queue", "stats", "--json"])
        XCTAssertEqual(stats.status, 0, "\(label): \(stats.error)")
        XCTAssertTrue(stats.outputText.contains("\"total\" : 2"), "\(label): \(stats.outputText)")
        let opened = try vault(["--home", home, "open", "--context", "c"], input: sealed.output)
        XCTAssertEqual(opened.outputText, "kept", "\(label): \(opened.error)")
        for directory in [home, keys] {
          let left = try FileManager.default.contentsOfDirectory(atPath: directory).filter { $0.contains(".tmp-") }
          XCTAssertEqual(left, [], "\(label): no temporary is left in \(directory)")
        }
      }
    }
    XCTAssertGreaterThan(kills, 10)
  }

  /// `unpin` killed at each rename and write, then run again: the pin is released (by the rerun,
  /// or already by the killed run: its key store copy of the manifest was written first, so the
  /// rerun then says the version is not kept), and no manifest temporary is left (review: the
  /// rerun that only adopted the key store's copy never removed the killed write's temporary).
  func testAnUnpinKilledAtEachStepLeavesNoTemporaryBehindItsRerun() throws {
    var kills = 0
    for calls in ["rename,renameat,renameat2", "write"] {
      for step in 1...20 {
        let run = temporary.sub("\(calls.prefix(5))-\(step)")
        let home = run + "/home"
        XCTAssertEqual(
          try vault(["--home", home, "init", "--store", "keyfile", "--keyfile", run + "/keys/v.keys"]).status, 0)
        XCTAssertEqual(try vault(["--home", home, "seal", "--context", "c", "--armor"], input: [1]).status, 0)
        XCTAssertEqual(try vault(["--home", home, "rotate"]).status, 0)
        let killed = try vaultKilled(at: calls, step: step, ["--home", home, "unpin", "1", "--yes"])
        if killed.status == 0 { break }
        let label = "\(calls) #\(step)"
        XCTAssertEqual(killed.status, 128 + SIGKILL, "\(label): \(killed.error)")
        kills += 1
        let again = try vault(["--home", home, "unpin", "1", "--yes"])
        if again.status != 0 {
          XCTAssertTrue(again.error.contains("key version 1 is not kept"), "\(label): \(again.error)")
        }
        let status = try vault(["--home", home, "status", "--json"])
        let object = try JSONSerialization.jsonObject(with: Data(status.output)) as? [String: Any]
        XCTAssertEqual(object?["external_seal_versions"] as? [Int], [], "\(label): \(status.outputText)")
        let left = try FileManager.default.contentsOfDirectory(atPath: home).filter { $0.contains(".tmp-") }
        XCTAssertEqual(left, [], "\(label): no temporary is left in the home")
      }
    }
    XCTAssertGreaterThan(kills, 2)
  }
}
