import Foundation
import VaultTestSupport
import XCTest

@testable import VaultCLI

/// The completion scripts and the manual page, run in the real shells and in groff: what a user
/// gets after `vault completion SHELL` and `vault help --man`.
final class CompletionAndManPageTests: XCTestCase {
  private var temporary: TemporaryDirectory!
  private var directory: String { temporary.path }

  override func setUpWithError() throws {
    temporary = TemporaryDirectory()
    // Something for file completion to find.
    XCTAssertTrue(FileManager.default.createFile(atPath: directory + "/notes.txt", contents: Data()))
    try FileManager.default.createDirectory(atPath: directory + "/box", withIntermediateDirectories: false)
  }

  // XCTest keeps every test case object to the end of the run, so the directory's deinit would
  // not run before the process exits: 18 directories, with keyfiles, were left in /tmp per run.
  override func tearDown() { temporary = nil }

  private func script(_ shell: String) throws -> String {
    let run = runInProcess(["completion", shell])
    XCTAssertEqual(run.status, 0, run.error)
    let path = directory + "/vault.\(shell)"
    try run.outputText.write(toFile: path, atomically: true, encoding: .utf8)
    return path
  }

  private func shell(_ program: String, _ arguments: [String]) throws -> Spawned {
    let path = "/usr/bin/" + program
    try XCTSkipUnless(
      FileManager.default.isExecutableFile(atPath: path), "\(program) is not installed (tools/setup.sh)")
    return try Spawn.run("/bin/sh", ["-c", "cd \"$0\" && exec \"$@\"", directory, path] + arguments)
  }

  /// What each shell offers after these words (the last one is being completed; "" for a new word).
  private let cases: [(String, [String])] = [
    ("vault qu", ["queue"]),
    ("vault queue ", ["list", "put", "resend", "stats"]),
    ("vault queue put --", ["--container", "--help", "--id", "--json", "--queue"]),
    ("vault queue list --state ", ["in_flight", "parked", "pending", "review"]),
    ("vault queue resend --state ", ["parked", "review"]),
    ("vault init --store ", ["auto", "keyfile", "secret-service"]),
    ("vault rotate --", ["--compromised", "--help", "--if-due", "--json", "--max-age", "--yes"]),
    ("vault completion ", ["bash", "fish", "zsh"]),
    ("vault help sc", ["scan"]),
    ("vault help queue ", ["list", "put", "resend", "stats"]),
    ("vault container forget ", []),
    ("vault --home /nonexistent seal --context x no", ["notes.txt"]),
    ("vault telemetry flush --ca-file no", ["notes.txt"]),
  ]

  func testBashOffersWhatTheDeclarationsDeclare() throws {
    let path = try script("bash")
    for (line, expected) in cases {
      let program = """
        source "$1"
        read -ra COMP_WORDS <<< "$2"
        [[ $2 == *' ' ]] && COMP_WORDS+=('')
        COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
        _vault
        printf '%s\\n' "${COMPREPLY[@]}"
        """
      let run = try shell("bash", ["-c", program, "bash", path, line])
      XCTAssertEqual(run.error, "", line)
      XCTAssertEqual(Set(run.outputText.split(separator: "\n").map(String.init)), Set(expected), line)
    }
  }

  func testZshOffersWhatTheDeclarationsDeclare() throws {
    let path = try script("zsh")
    // zsh's own compadd filters by the word being completed; the stand-ins do the same, so the
    // script itself runs unchanged outside the completion system.
    let program = """
      compadd() { while [[ $1 != -- ]]; do shift; done; shift; local w; for w in "$@"; do
        [[ $w == ${words[CURRENT]}* ]] && print -r -- $w; done; }
      _files() { local f; for f in ${words[CURRENT]}*(N); do [[ $1 == -/ && ! -d $f ]] || print -r -- $f; done; }
      compdef() { }
      source $1
      words=(${=2}); [[ $2 == *' ' ]] && words+=('')
      CURRENT=${#words}
      _vault
      """
    for (line, expected) in cases {
      let run = try shell("zsh", ["-f", "-c", program, "zsh", path, line])
      XCTAssertEqual(run.error, "", line)
      XCTAssertEqual(Set(run.outputText.split(separator: "\n").map(String.init)), Set(expected), line)
    }
  }

  func testFishOffersWhatTheDeclarationsDeclare() throws {
    let path = try script("fish")
    for (line, expected) in cases {
      let run = try shell("fish", ["--no-config", "-c", "source $argv[1]; complete -C$argv[2]", path, line])
      XCTAssertEqual(run.error, "", line)
      let offered = run.outputText.split(separator: "\n").map { String($0.split(separator: "\t")[0]) }
      // fish also offers the global options after a subcommand; and directories end in /.
      let wanted = Set(offered).subtracting(["--home", "-h", "--version"])
      XCTAssertEqual(wanted, Set(expected), line)
    }
  }

  /// Every option of every command and action is offered after `--`, in each shell: the scripts
  /// cannot fall behind the declarations.
  func testEveryDeclaredOptionIsOfferedByBash() throws {
    let path = try script("bash")
    for command in Commands.root.commands {
      let places =
        command.actions.isEmpty ? [([command.name], command)] : command.actions.map({ ([command.name, $0.name], $0) })
      for (words, declaration) in places {
        let line = "vault " + words.joined(separator: " ") + " --"
        let program = """
          source "$1"; read -ra COMP_WORDS <<< "$2"; COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); _vault
          printf '%s\\n' "${COMPREPLY[@]}"
          """
        let run = try shell("bash", ["-c", program, "bash", path, line])
        let expected = declaration.options.map(\.name).filter { $0.hasPrefix("--") } + ["--help"]
        XCTAssertEqual(Set(run.outputText.split(separator: "\n").map(String.init)), Set(expected), line)
      }
    }
  }

  func testManPageRendersWithoutWarningsAndCoversEveryCommandAndOption() throws {
    let run = runInProcess(["help", "--man"])
    XCTAssertEqual(run.status, 0, run.error)
    XCTAssertTrue(run.outputText.hasPrefix(".TH VAULT 1 "))
    let path = directory + "/vault.1"
    try run.outputText.write(toFile: path, atomically: true, encoding: .utf8)
    let groff = try shell("groff", ["-man", "-Tutf8", "-ww", "-z", path])
    XCTAssertEqual(groff.status, 0)
    XCTAssertEqual(groff.error, "", "groff warnings")
    let text = try shell("groff", ["-man", "-Tascii", "-P-cbou", "-rLL=200n", path]).outputText
    for section in ["NAME", "SYNOPSIS", "OPTIONS", "COMMANDS", "ENVIRONMENT", "EXIT STATUS"] {
      XCTAssertTrue(text.contains("\n" + section + "\n"), section)
    }
    for command in Commands.root.commands {
      XCTAssertTrue(text.contains("vault " + command.name), command.name)
      for parameter in command.parameters + command.actions.flatMap(\.parameters) {
        XCTAssertTrue(text.contains(HelpRenderer.label(parameter)), "\(command.name) \(parameter.name)")
      }
    }
    // Every usage line is in the synopsis, whole.
    for line in Commands.root.commands.flatMap(Commands.help.usages) {
      XCTAssertTrue(text.contains(line), line)
    }
  }

  func testUnknownShellIsAUsageErrorThatListsTheShells() {
    let run = runInProcess(["completion", "tcsh"])
    XCTAssertEqual(run.status, 64)
    XCTAssertTrue(run.error.hasPrefix("Error: SHELL must be bash, zsh or fish (got 'tcsh')\n"), run.error)
  }
}
