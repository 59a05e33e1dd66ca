import Foundation
import VaultTestSupport
import XCTest

/// `vault scan` through the real binary: exit codes, JSON, and a vault home after real use.
final class ScanCLITests: XCTestCase {
  func testCleanHomeExitsZeroAndALeakExitsOne() throws {
    let temporary = TemporaryDirectory()
    let home = temporary.sub("home")
    XCTAssertEqual(
      try vault(["--home", home, "init", "--store", "keyfile", "--keyfile", temporary.sub("k/v.keys")]).status, 0)
    for i in 0..<20 {
      try vault(
        ["--home", home, "queue", "put", "--queue", "outbox"], input: Array("scan-canary-\(i) dinner at 8".utf8))
    }
    try vault(["--home", home, "telemetry", "log", "note", "--payload", #"{"text": "scan-canary-json"}"#])
    XCTAssertEqual(try vault(["--home", home, "rotate"]).status, 0)
    let canaryFile = temporary.sub("canaries.txt")
    try (0..<20).map { "scan-canary-\($0)" }.joined(separator: "\n").write(
      toFile: canaryFile, atomically: true, encoding: .utf8)
    let clean = try vault(["scan", home, "--canary-file", canaryFile, "--canary", "scan-canary-json", "--json"])
    XCTAssertEqual(clean.status, 0, clean.outputText + clean.error)
    let report = try JSONSerialization.jsonObject(with: Data(clean.output)) as! [String: Any]
    XCTAssertEqual((report["findings"] as? [Any])?.count, 0)
    XCTAssertGreaterThanOrEqual(report["files_scanned"] as? Int ?? 0, 2)

    try Data("left behind: scan-canary-3".utf8).write(to: URL(fileURLWithPath: home + "/debug.log"))
    let leaked = try vault(["scan", home, "--canary-file", canaryFile])
    XCTAssertEqual(leaked.status, 1)
    XCTAssertTrue(leaked.outputText.contains("debug.log @13  file  canary (utf8)"), leaked.outputText)
    XCTAssertFalse(leaked.outputText.contains("scan-canary-3"), "the leaked text is not printed")
  }

  func testUnreadablePathsAndUsage() throws {
    let missing = try vault(["scan", "/nonexistent/path", "--canary", "x"])
    XCTAssertEqual(missing.status, 2)
    XCTAssertTrue(missing.error.contains("cannot read /nonexistent/path"), missing.error)
    XCTAssertEqual(try vault(["scan"]).status, 64)
    XCTAssertEqual(try vault(["scan", "/tmp", "--canary-file", "/nonexistent/canaries"]).status, 2)
  }
}
