import Foundation
import VaultTestSupport
import XCTest

@testable import VaultCLI

/// Issue 13, items 1 and 9: every declared option value is checked before anything runs, with a
/// usage error (exit 64) that says what was expected; mistyped names get a "did you mean".
final class OptionValidationTests: XCTestCase {
  private let home = "/nonexistent/vault-validation-home"

  /// The words that reach `declaration` (`queue list`), and a value for each required option so
  /// only the option under test is wrong.
  private func every() -> [([String], CommandDeclaration)] {
    Commands.root.commands.flatMap { command in
      command.actions.isEmpty ? [([command.name], command)] : command.actions.map { ([command.name, $0.name], $0) }
    }
  }

  private func badValue(_ kind: ValueKind) -> String? {
    switch kind {
    case .choice: "nonsense"
    case .wholeNumber: "ten"
    case .number: "abc"
    case .uuid: "not-a-uuid"
    case .url: "notaurl"
    case .name: "a\nb"
    case .text, .context, .file, .directory, .subcommand, .action: nil
    }
  }

  func testEveryCheckedOptionRefusesAWrongValueSayingWhatItExpects() {
    var checked = 0
    for (words, declaration) in every() {
      for option in declaration.options where option.placeholder != nil {
        guard let bad = badValue(option.value) else { continue }
        let run = runInProcess(["--home", home] + words + [option.name, bad])
        XCTAssertEqual(run.status, 64, "\(words) \(option.name): \(run.error)")
        XCTAssertTrue(run.error.hasPrefix("Error: \(option.name) must "), "\(words) \(option.name): \(run.error)")
        XCTAssertTrue(run.error.contains("\nUsage: vault"), run.error)
        XCTAssertEqual(run.output, [], "nothing ran")
        checked += 1
      }
    }
    // --store, --id, --state ×2, --limit, --after, --max-age, --endpoint ×2, --interval, --inflate-limit,
    // --inflate-seconds, --queue ×3, --session.
    XCTAssertGreaterThanOrEqual(checked, 16)
  }

  func testEveryValueOptionRefusesAnEmptyValue() {
    for (words, declaration) in every() {
      for option in declaration.options where option.placeholder != nil {
        let run = runInProcess(["--home", home] + words + [option.name, ""])
        XCTAssertEqual(run.status, 64, "\(words) \(option.name)")
        XCTAssertTrue(run.error.hasPrefix("Error: \(option.name) must not be empty"), "\(words): \(run.error)")
      }
    }
  }

  func testNumbersMustBeFiniteAndInRange() {
    for value in ["inf", "nan", "1e300", "-1", "0.05", "86401"] {
      let run = runInProcess(["telemetry", "watch", "--endpoint", "http://127.0.0.1:1/", "--interval", value])
      XCTAssertEqual(run.status, 64, value)
      XCTAssertTrue(
        run.error.hasPrefix("Error: --interval must be a number of seconds from 0.1 to 86400 (got '\(value)')"),
        run.error)
    }
  }

  func testMistypedNamesGetTheNearestOne() {
    let cases: [([String], String)] = [
      (["rotat"], "unknown subcommand 'rotat' (did you mean 'rotate'?)"),
      (["stauts"], "unknown subcommand 'stauts' (did you mean 'status'?)"),
      (["queue", "lsit"], "unknown queue action 'lsit' (did you mean 'list'?)"),
      (["status", "--jsn"], "unknown option '--jsn' (did you mean '--json'?)"),
      (["seal", "--contxt", "a"], "unknown option '--contxt' (did you mean '--context'?)"),
      (["--hmoe", "x", "status"], "unknown option '--hmoe' (did you mean '--home'?)"),
      (
        ["init", "--store", "keyfle"],
        "--store must be auto, secret-service or keyfile (got 'keyfle') (did you mean 'keyfile'?)"
      ),
      (["help", "qeue"], "no help for unknown subcommand 'qeue' (did you mean 'queue'?)"),
      (["frobnicate"], "unknown subcommand 'frobnicate'\n"),
      (["queue", "frob"], "unknown queue action 'frob' (the actions are put, stats, list and resend)"),
    ]
    for (arguments, message) in cases {
      let run = runInProcess(["--home", home] + arguments)
      XCTAssertEqual(run.status, 64, "\(arguments)")
      XCTAssertTrue(run.error.hasPrefix("Error: " + message), "\(arguments): \(run.error)")
    }
  }

  func testAnOptionOfAnotherActionSaysSoWhereverItStands() {
    for arguments in [
      ["queue", "put", "--queue", "q", "--limit", "3"], ["queue", "--limit", "3", "put", "--queue", "q"],
    ] {
      let run = runInProcess(["--home", home] + arguments)
      XCTAssertEqual(run.status, 64)
      XCTAssertTrue(run.error.hasPrefix("Error: '--limit' does not apply to 'queue put'\n"), run.error)
      XCTAssertTrue(run.error.contains("See 'vault help queue put'."), run.error)
    }
  }

  /// `--` ends the options: a file named like an option can still be sealed.
  func testDoubleDashEndsOptions() throws {
    let temporary = TemporaryDirectory()
    let run = runInProcess(["--home", temporary.sub("home"), "seal", "--context", "c", "--", "--json"])
    // Parsed: `--json` is IN; the missing vault is what fails, not the arguments.
    XCTAssertEqual(run.status, 2, run.error)
    XCTAssertTrue(run.error.contains("no vault at"), run.error)
  }

  func testEchoedWordsAreShortAndPrintable() {
    let long = String(repeating: "x", count: 500)
    let run = runInProcess(["--home", home, "queue", "list", "--state", long + "\u{1B}[2J"])
    XCTAssertEqual(run.status, 64)
    XCTAssertFalse(run.error.contains("\u{1B}"), "control characters are escaped")
    XCTAssertLessThan(run.error.count, 400)
  }

  func testAFlagGivenAValueIsRefused() {
    let run = runInProcess(["--home", home, "status", "--json=yes"])
    XCTAssertEqual(run.status, 64)
    XCTAssertTrue(run.error.hasPrefix("Error: '--json' takes no value\n"), run.error)
  }
}
