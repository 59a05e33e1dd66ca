import Foundation
import VaultTestSupport
import XCTest

@testable import VaultCLI

/// Issue 13, item 13: long work shows a progress line on a terminal, never in a pipe or with
/// `--json`, and clears it before the results.
final class ProgressCLITests: XCTestCase {
  private var temporary: TemporaryDirectory!
  private var home: String { temporary.sub("home") }

  override func setUpWithError() throws {
    temporary = TemporaryDirectory()
    let created = try vault(["--home", home, "init", "--store", "keyfile", "--keyfile", temporary.sub("k/v.keys")])
    XCTAssertEqual(created.status, 0, created.error)
    for i in 0..<3 {
      XCTAssertEqual(try vault(["--home", home, "queue", "put", "--queue", "q"], input: Array("r\(i)".utf8)).status, 0)
    }
  }

  /// Runs in-process with standard error as a terminal (or not), progress shown from the start.
  private func run(_ arguments: [String], interactive: Bool) -> (status: Int32, output: String, error: String) {
    let capture = Capture()
    let terminal = Terminal(
      environment: ProcessInfo.processInfo.environment, readInput: { [] },
      writeOutput: { capture.output += $0 }, writeError: { capture.error += $0 })
    terminal.isInteractive = interactive
    terminal.progressDelay = 0
    let status = VaultCommandLine(terminal: terminal).run(["--home", home] + arguments)
    return (status, String(decoding: capture.output, as: UTF8.self), capture.error)
  }

  func testRotationShowsProgressOnATerminalAndClearsIt() {
    let rotated = run(["rotate"], interactive: true)
    XCTAssertEqual(rotated.status, 0, rotated.error)
    XCTAssertTrue(rotated.error.hasPrefix("\rrotating: container 1 of 1, 0 records re-sealed\u{1B}[K"), rotated.error)
    XCTAssertTrue(rotated.error.hasSuffix("\r\u{1B}[K"), "the line is cleared: \(rotated.error.debugDescription)")
    XCTAssertFalse(rotated.output.contains("rotating:"), "never on standard output")
  }

  func testNoProgressInAPipeOrWithJSON() {
    let piped = run(["rotate"], interactive: false)
    XCTAssertEqual(piped.status, 0, piped.error)
    XCTAssertEqual(piped.error, "")
    let json = run(["rotate", "--json"], interactive: true)
    XCTAssertEqual(json.status, 0, json.error)
    XCTAssertEqual(json.error, "")
  }

  func testScanShowsProgressOnATerminalButNotWithJSON() {
    let scanned = run(["scan", home], interactive: true)
    XCTAssertEqual(scanned.status, 0, scanned.output + scanned.error)
    XCTAssertTrue(scanned.error.contains("\rscanning: "), scanned.error)
    XCTAssertTrue(scanned.error.hasSuffix("\r\u{1B}[K"))
    let json = run(["scan", "--json", home], interactive: true)
    XCTAssertEqual(json.error, "")
  }

  /// A short rotation on a real terminal (a pty from script(1)) shows no progress: it appears only
  /// after a second.
  func testAShortRotationOnARealTerminalShowsNoProgress() throws {
    try XCTSkipUnless(FileManager.default.isExecutableFile(atPath: "/usr/bin/script"), "script(1) is not installed")
    let command = "'\(vaultBinary())' --home '\(home)' rotate"
    let run = try Spawn.run("/usr/bin/script", ["-qec", command, "/dev/null"])
    XCTAssertEqual(run.status, 0, run.outputText)
    XCTAssertTrue(run.outputText.contains("Rotated vault"), run.outputText)
    XCTAssertFalse(run.outputText.contains("rotating:"), run.outputText)
  }
}
