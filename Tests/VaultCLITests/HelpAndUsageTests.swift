import Foundation
import VaultTestSupport
import XCTest

@testable import VaultCLI

/// Pins help and usage-error text against the files in Golden/, and the exit codes.
final class HelpAndUsageTests: XCTestCase {
  /// The golden file `name`; with VAULT_UPDATE_GOLDEN=1 in the environment, first rewritten from
  /// `actual` (then review the diff: a change of help text is a change of the contract).
  private func golden(_ name: String, actual: String) throws -> String {
    let path = packageRoot() + "/Tests/VaultCLITests/Golden/\(name).txt"
    if ProcessInfo.processInfo.environment["VAULT_UPDATE_GOLDEN"] == "1" {
      try actual.write(toFile: path, atomically: true, encoding: .utf8)
    }
    return try String(contentsOfFile: path, encoding: .utf8)
  }

  func testRootHelpMatchesGoldenAndEveryWayOfAskingAgrees() throws {
    let expected = try golden("help", actual: runInProcess(["--help"]).outputText)
    for arguments in [["--help"], ["-h"], ["help"]] {
      let run = runInProcess(arguments)
      XCTAssertEqual(run.status, 0, "\(arguments)")
      XCTAssertEqual(run.outputText, expected, "\(arguments)")
      XCTAssertEqual(run.error, "")
    }
  }

  /// Every subcommand and every action has a page, the same however it is asked for, pinned by a
  /// golden file; the list comes from the declarations, so a new command cannot go unpinned.
  func testEverySubcommandAndActionHelpMatchesGolden() throws {
    var pages = 0
    for command in Commands.root.commands {
      let expected = try golden("help-\(command.name)", actual: runInProcess(["help", command.name]).outputText)
      XCTAssertEqual(runInProcess(["help", command.name]).outputText, expected, command.name)
      XCTAssertEqual(runInProcess([command.name, "--help"]).outputText, expected, command.name)
      XCTAssertEqual(runInProcess([command.name, "-h"]).status, 0)
      pages += 1
      for action in command.actions {
        let words = [command.name, action.name]
        let expected = try golden(
          "help-\(command.name)-\(action.name)", actual: runInProcess(["help"] + words).outputText)
        XCTAssertEqual(runInProcess(["help"] + words).outputText, expected, "\(words)")
        XCTAssertEqual(runInProcess(words + ["--help"]).outputText, expected, "\(words)")
        XCTAssertTrue(expected.contains("USAGE: vault [--home DIR] \(command.name) \(action.name)"), "\(words)")
        pages += 1
      }
    }
    XCTAssertEqual(pages, 30)
    let files = try FileManager.default.contentsOfDirectory(atPath: packageRoot() + "/Tests/VaultCLITests/Golden")
    XCTAssertEqual(files.filter { $0.hasPrefix("help") }.count, pages + 1, "a golden file no page matches")
  }

  /// README's command-line block is exactly the generated usage lines: the README and `--help`
  /// agree.
  func testReadmeListsExactlyTheGeneratedUsageLines() throws {
    let readme = try String(contentsOfFile: packageRoot() + "/README.md", encoding: .utf8)
    let section = try XCTUnwrap(readme.components(separatedBy: "## Command line\n\n```\n").dropFirst().first)
    let block = try XCTUnwrap(section.components(separatedBy: "```").first)
    let expected = Commands.root.commands.flatMap(Commands.help.usages) + ["vault --version"]
    XCTAssertEqual(block.split(separator: "\n").map(String.init), expected)
  }

  func testVersionGoesToStdout() {
    let run = runInProcess(["--version"])
    XCTAssertEqual(run.status, 0)
    XCTAssertEqual(run.outputText, "vault 0.1.0\n")
  }

  func testNoArgumentsIsAUsageErrorWithHelp() {
    let run = runInProcess([])
    XCTAssertEqual(run.status, 64)
    XCTAssertTrue(run.outputText.hasPrefix("OVERVIEW:"))
  }

  func testUsageErrorsExit64WithUsageAndHint() throws {
    let cases: [([String], String)] = [
      (
        ["frobnicate"],
        "Error: unknown subcommand 'frobnicate'\nUsage: vault [--home DIR] <subcommand> [options]\n  See 'vault --help'.\n"
      ),
      (
        ["seal"],
        "Error: missing '--context CTX'\nUsage: vault [--home DIR] seal --context CTX [-o OUT] [--armor] [IN]\n  See 'vault help seal'.\n"
      ),
      (
        ["open", "--context"],
        "Error: missing value for '--context'\nUsage: vault [--home DIR] open --context CTX [-o OUT] [IN]\n  See 'vault help open'.\n"
      ),
      (
        ["seal", "--context", ""],
        "Error: --context must not be empty: it binds the record to its place\nUsage: vault [--home DIR] seal --context CTX [-o OUT] [--armor] [IN]\n  See 'vault help seal'.\n"
      ),
      (
        ["status", "--yaml"],
        "Error: unknown option '--yaml'\nUsage: vault [--home DIR] status [--json]\n  See 'vault help status'.\n"
      ),
      (
        ["rotate", "--if-due", "--max-age", "0x10"],
        "Error: --max-age must be a number of days from 0 to 36500 (got '0x10')\nUsage: vault [--home DIR] rotate [--compromised [--yes] | --if-due [--max-age DAYS]] [--json]\n  See 'vault help rotate'.\n"
      ),
      (
        ["init", "--store", "cloud"],
        "Error: --store must be auto, secret-service or keyfile (got 'cloud')\nUsage: vault [--home DIR] init [--store auto|secret-service|keyfile] [--keyfile PATH] [--json]\n  See 'vault help init'.\n"
      ),
      (
        ["seal", "--context", "a", "--context", "b"],
        "Error: '--context' given more than once\nUsage: vault [--home DIR] seal --context CTX [-o OUT] [--armor] [IN]\n  See 'vault help seal'.\n"
      ),
      (
        ["init", "--store=keyfile", "--store", "auto"],
        "Error: '--store' given more than once\nUsage: vault [--home DIR] init [--store auto|secret-service|keyfile] [--keyfile PATH] [--json]\n  See 'vault help init'.\n"
      ),
      (
        ["rotate", "extra"],
        "Error: unexpected argument 'extra'\nUsage: vault [--home DIR] rotate [--compromised [--yes] | --if-due [--max-age DAYS]] [--json]\n  See 'vault help rotate'.\n"
      ),
    ]
    for (arguments, expected) in cases {
      let run = runInProcess(["--home", "/nonexistent/vault-home"] + arguments)
      XCTAssertEqual(run.status, 64, "\(arguments)")
      XCTAssertEqual(run.error, expected, "\(arguments)")
      XCTAssertTrue(run.output.isEmpty)
    }
  }

  /// A single-value option given twice used to keep the last value silently (`--context a
  /// --context b` sealed under "b"); `--home` too. Repeatable options (`scan --canary`) still repeat.
  func testRepeatedSingleValueOptionsAreUsageErrors() {
    let home = runInProcess(["--home", "/nonexistent/a", "--home=/nonexistent/b", "status"])
    XCTAssertEqual(home.status, 64)
    XCTAssertEqual(
      home.error,
      "Error: '--home' given more than once\nUsage: vault [--home DIR] <subcommand> [options]\n  See 'vault --help'.\n")
    let canaries = runInProcess(["scan", "/nonexistent/scan", "--canary", "abcd", "--canary", "efgh"])
    XCTAssertNotEqual(canaries.status, 64, canaries.error)
  }

  func testHomeComesFromFlagThenEnvironmentThenXDG() {
    let missing = runInProcess(["status"], environment: ["VAULT_HOME": "/nonexistent/a"])
    XCTAssertEqual(missing.status, 2)
    XCTAssertTrue(missing.error.contains("/nonexistent/a"), missing.error)
    let flag = runInProcess(["--home", "/nonexistent/b", "status"], environment: ["VAULT_HOME": "/nonexistent/a"])
    XCTAssertTrue(flag.error.contains("/nonexistent/b"), flag.error)
    let xdg = runInProcess(["status"], environment: ["XDG_DATA_HOME": "/nonexistent/data"])
    XCTAssertTrue(xdg.error.contains("/nonexistent/data/vault"), xdg.error)
  }
}
