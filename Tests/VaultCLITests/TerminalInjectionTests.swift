import Foundation
import Vault
import VaultTestSupport
import XCTest

@testable import VaultCLI

/// A home, a container or a keyfile may be named with any byte but "/" and NUL, and a bundle's
/// manifest says what it likes. `status`, `container list`, `rotate`, `queue stats`, the restore
/// reports and many errors printed such names as they were: a name holding ESC ] 52 could set the
/// operator's clipboard, ESC [ 2 J clear the screen, a newline forge a line of the report. Found
/// at a terminal by an outside review. Now every message escapes control characters (newlines in a
/// name too), JSON keeps its values and escapes what a terminal would act on, and the progress
/// line fits the terminal's width.
final class TerminalInjectionTests: XCTestCase {
  private var temporary: TemporaryDirectory!
  // OSC 52 (set the clipboard) ended by BEL, then a newline that would start a forged line.
  private var home: String { temporary.sub("h\u{1B}]52;c;cm0gLXJmIH4=\u{07}\nforged: all clear") }
  // U+009B is CSI to a terminal that reads C1 controls; the carriage return would rewrite the line.
  private var container: String { temporary.sub("q\u{9B}2J\r.sqlite") }

  override func setUpWithError() throws {
    temporary = TemporaryDirectory()
    try initKeyfileVault(home: home, keyfile: temporary.sub("k/v.keys"))
    let put = try vault(["--home", home, "queue", "put", "--queue", "q", "--container", container], input: [1])
    XCTAssertEqual(put.status, 0, put.error)
    assertPrintable(put.outputText + put.error)
  }

  // XCTest keeps every test case object to the end of the run (see OperatorReviewTests).
  override func tearDown() { temporary = nil }

  /// Fails on any control character but the newlines that end lines, and on a line a name forged.
  private func assertPrintable(_ text: String, file: StaticString = #filePath, line: UInt = #line) {
    let controls = text.unicodeScalars.filter { Printable.isControl($0) && $0 != "\n" }
    XCTAssertEqual(controls.map(\.value), [], text.debugDescription, file: file, line: line)
    XCTAssertFalse(
      text.split(separator: "\n").contains { $0.hasPrefix("forged") }, text.debugDescription, file: file, line: line)
  }

  func testStatusRotateAndStatsShowNamesEscaped() throws {
    let status = try vault(["--home", home, "status"])
    XCTAssertEqual(status.status, 0, status.error)
    assertPrintable(status.outputText + status.error)
    XCTAssertTrue(
      status.outputText.contains("\\u{1b}]52;c;cm0gLXJmIH4=\\u{7}\\u{a}forged: all clear\n"), status.outputText)
    XCTAssertTrue(status.outputText.contains("q\\u{9b}2J\\u{d}.sqlite"), status.outputText)

    let stats = try vault(["--home", home, "queue", "stats", "--container", container])
    XCTAssertEqual(stats.status, 0, stats.error)
    assertPrintable(stats.outputText + stats.error)
    XCTAssertTrue(
      stats.outputText.hasPrefix("Container " + temporary.sub("q\\u{9b}2J\\u{d}.sqlite\n")), stats.outputText)

    let rotated = try vault(["--home", home, "rotate"])
    XCTAssertEqual(rotated.status, 0, rotated.error)
    assertPrintable(rotated.outputText + rotated.error)
    XCTAssertTrue(rotated.outputText.contains("Re-sealed 1 record in "), rotated.outputText)
  }

  /// JSON keeps every value (a script gets the real names back) and carries no raw DEL or C1.
  func testJSONKeepsTheNamesAndEscapesWhatATerminalWouldActOn() throws {
    let status = try vault(["--home", home, "status", "--json"])
    XCTAssertEqual(status.status, 0, status.error)
    assertPrintable(status.outputText)
    XCTAssertTrue(status.outputText.contains("q\\u009b2J\\r.sqlite"), status.outputText)
    let object = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(status.output)) as? [String: Any])
    XCTAssertEqual(object["home"] as? String, home)
    let containers = try XCTUnwrap(object["containers"] as? [[String: Any]])
    XCTAssertTrue(containers.contains { $0["path"] as? String == container }, "\(containers)")

    XCTAssertEqual(Printable.json("a\u{7F}b\u{85}c\u{9F}d\u{A0}"), "a\\u007fb\\u0085c\\u009fd\u{A0}")
    let decoded = try JSONSerialization.jsonObject(with: Data("[\"\(Printable.json("\u{9B}x"))\"]".utf8)) as? [String]
    XCTAssertEqual(decoded, ["\u{9B}x"])
  }

  /// An error naming a path prints one line: Error: and the name escaped.
  func testAnErrorNamingAPathIsOneEscapedLine() throws {
    let missing = temporary.sub("gone\u{1B}[2J\nforged: restored.sqlite")
    let stats = try vault(["--home", home, "queue", "stats", "--container", missing])
    XCTAssertNotEqual(stats.status, 0)
    assertPrintable(stats.error)
    XCTAssertTrue(stats.error.hasPrefix("Error: "), stats.error)
    XCTAssertEqual(stats.error.filter { $0 == "\n" }.count, 1, stats.error)
    XCTAssertTrue(stats.error.contains("gone\\u{1b}[2J\\u{a}forged"), stats.error)
  }

  /// `queue list` wrote a record's error kind as the container held it: a container file from
  /// elsewhere (`--container`, a restored bundle) could hold ESC ] 0 and a newline there (outside
  /// attacker review). Every field of a row is escaped now.
  func testQueueListEscapesEveryFieldReadFromTheContainer() throws {
    let script = """
      import sqlite3, sys
      c = sqlite3.connect(sys.argv[1])
      c.execute("UPDATE records SET state = 'parked', error_kind = ?", ("ek\\nforged: row\\x1b]0;T\\x07\\u009b",))
      c.commit()
      """
    let edited = try Spawn.run("/usr/bin/python3", ["-c", script, container])
    XCTAssertEqual(edited.status, 0, edited.error)
    let listed = try vault(["--home", home, "queue", "list", "--container", container])
    XCTAssertEqual(listed.status, 0, listed.error)
    assertPrintable(listed.outputText)
    XCTAssertTrue(listed.outputText.contains("ek\\u{a}forged: row\\u{1b}]0;T\\u{7}\\u{9b}  "), listed.outputText)
  }

  /// Names that spell an escape, or hide what they are, are shown so they cannot pass for
  /// another: a literal "\u{1b}" is not shown as a real ESC is, and bidirectional overrides and
  /// zero-width characters are escaped (outside attacker review).
  func testNamesCannotPassForOthers() {
    XCTAssertEqual(Printable.escaped("a\u{1B}b"), "a\\u{1b}b")
    XCTAssertEqual(Printable.escaped("a\\u{1b}b"), "a\\u{5c}u{1b}b")
    XCTAssertNotEqual(Printable.escaped("a\u{1B}b"), Printable.escaped("a\\u{1b}b"))
    XCTAssertEqual(Printable.escaped("invoice\u{202E}fdp.sqlite"), "invoice\\u{202e}fdp.sqlite")
    XCTAssertEqual(Printable.escaped("a\u{200B}b\u{FEFF}c\u{2066}d"), "a\\u{200b}b\\u{feff}c\\u{2066}d")
    // Everything else is left as it is: other backslashes, tabs in composed text, any script.
    XCTAssertEqual(Printable.escaped("C:\\dir\\u file é 東京"), "C:\\dir\\u file é 東京")
    XCTAssertEqual(Printable.keepingLines("a\tb\nc\u{202E}"), "a\tb\nc\\u{202e}")
  }

  /// memo, the example app, printed errors and history rows as they were (outside attacker
  /// review); it shows them through the library's `Printable` now, as apps should.
  func testMemoEscapesWhatItShows() throws {
    let memo = (vaultBinary() as NSString).deletingLastPathComponent + "/memo"
    let run = try Spawn.run(memo, ["--home", temporary.sub("none\u{1B}]0;PWNED\u{07}"), "history"])
    XCTAssertNotEqual(run.status, 0)
    assertPrintable(run.error)
    XCTAssertTrue(run.error.contains("none\\u{1b}]0;PWNED\\u{7}"), run.error)

    // A history row's error kind, read from the container, is escaped once (an earlier version
    // escaped it, then escaped the row again: "\u{5c}u{1b}").
    let sent = try Spawn.run(memo, ["--home", home, "send", "a memo"])
    XCTAssertEqual(sent.status, 0, sent.error)
    let script = """
      import sqlite3, sys
      c = sqlite3.connect(sys.argv[1])
      c.execute("UPDATE records SET state = 'parked', error_kind = ? WHERE queue = 'memo'", ("ek\\x1b]0;T\\nrow",))
      c.commit()
      """
    XCTAssertEqual(try Spawn.run("/usr/bin/python3", ["-c", script, home + "/queue.sqlite"]).status, 0)
    let history = try Spawn.run(memo, ["--home", home, "history"])
    XCTAssertEqual(history.status, 0, history.error)
    assertPrintable(history.outputText)
    XCTAssertTrue(history.outputText.contains("ek\\u{1b}]0;T\\u{a}row\n"), history.outputText)
  }

  /// The progress line escapes what it shows and is cut to one column less than the terminal's
  /// width: a wrapped line is redrawn only on its last row, leaving the rest on the screen.
  /// The progress line was fitted by counting Unicode scalars, not terminal columns (outside
  /// terminal review): a file name in CJK or fullwidth characters (two columns each) made the line
  /// wrap, and a redraw then left its first rows on the screen; combining marks (no column) cut a
  /// line that fitted. Columns are counted now (UAX #11), and a cut falls between characters and
  /// never inside an escape.
  func testTheProgressLineIsFittedInTerminalColumns() {
    XCTAssertEqual(ProgressLine.fitted("漢字漢字漢字", columns: 10), "漢字漢字…")
    XCTAssertEqual(ProgressLine.fitted("漢字漢字", columns: 10), "漢字漢字")
    XCTAssertEqual(ProgressLine.fitted("ｆｕｌｌ", columns: 8), "ｆｕｌ…")
    XCTAssertEqual(ProgressLine.fitted("한국어 파일", columns: 12), "한국어 파일")
    XCTAssertEqual(ProgressLine.fitted("한국어 파일", columns: 11), "한국어 파…")
    let combining = String(repeating: "e\u{301}", count: 6)
    XCTAssertEqual(ProgressLine.fitted(combining, columns: 10), combining, "combining marks take no column")
    XCTAssertEqual(ProgressLine.fitted("abcde\u{301}fgh", columns: 7), "abcde\u{301}…", "never cut off a mark")
    XCTAssertEqual(ProgressLine.fitted("abc\\u{1b}def", columns: 8), "abc…", "never inside an escape")
    XCTAssertEqual(ProgressLine.fitted("a🙂b", columns: 4), "a…", "an emoji takes two columns")
    for (character, width) in [("a", 1), ("é", 1), ("e\u{301}", 1), ("漢", 2), ("Ａ", 2), ("🙂", 2), ("☺\u{FE0F}", 2)] {
      XCTAssertEqual(TerminalWidth.columns(of: Character(character)), width, character)
    }
  }

  func testTheProgressLineIsEscapedAndFitsTheTerminal() {
    XCTAssertEqual(ProgressLine.fitted("rotating: container 1 of 1", columns: 20), "rotating: containe…")
    XCTAssertEqual(ProgressLine.fitted("short", columns: 20), "short")
    XCTAssertEqual(ProgressLine.fitted("exactly-6", columns: nil), "exactly-6")
    XCTAssertEqual(ProgressLine.fitted("abcdef", columns: 6), "abcd…")
    XCTAssertEqual(ProgressLine.fitted("abcde", columns: 6), "abcde")

    let capture = Capture()
    let terminal = Terminal(
      environment: [:], readInput: { _ in [] }, writeOutput: { capture.output += $0 },
      writeError: { capture.error += $0 })
    terminal.isInteractive = true
    terminal.progressDelay = 0
    terminal.columns = { 20 }
    let progress = ProgressLine(terminal, json: false)
    progress.update("a\u{1B}]0;x\u{07}b", step: true)
    progress.update("rotating: container 1 of 1, 0 records re-sealed", step: true)
    progress.finish()
    XCTAssertEqual(
      capture.error, "\ra\\u{1b}]0;x\\u{7}b\u{1B}[K\rrotating: containe…\u{1B}[K\r\u{1B}[K",
      capture.error.debugDescription)
  }
}
