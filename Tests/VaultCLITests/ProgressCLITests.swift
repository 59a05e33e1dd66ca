import Foundation
import Vault
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
    try initKeyfileVault(home: home, keyfile: temporary.sub("k/v.keys"))
    for i in 0..<3 {
      XCTAssertEqual(try vault(["--home", home, "queue", "put", "--queue", "q"], input: Array("r\(i)".utf8)).status, 0)
    }
  }

  // XCTest keeps every test case object to the end of the run, so the directory's deinit would
  // not run before the process exits: 18 directories, with keyfiles, were left in /tmp per run.
  override func tearDown() { temporary = nil }

  /// Runs in-process with standard error as a terminal (or not), progress shown from the start.
  private func run(
    _ arguments: [String], interactive: Bool, foreground: Bool = true, environment: [String: String] = [:]
  ) -> (status: Int32, output: String, error: String) {
    let capture = Capture()
    let terminal = Terminal(
      environment: ProcessInfo.processInfo.environment.merging(environment) { $1 }, readInput: { _ in [] },
      writeOutput: { capture.output += $0 }, writeError: { capture.error += $0 })
    terminal.isInteractive = interactive
    terminal.isForeground = { foreground }
    terminal.progressDelay = 0
    let status = VaultCommandLine(terminal: terminal).run(["--home", home] + arguments)
    return (status, String(decoding: capture.output, as: UTF8.self), capture.error)
  }

  func testRotationShowsProgressOnATerminalAndClearsIt() {
    let rotated = run(["rotate"], interactive: true)
    XCTAssertEqual(rotated.status, 0, rotated.error)
    XCTAssertTrue(
      rotated.error.hasPrefix(
        "\rrotating: 0 records re-sealed so far; container 1 of 1: \(home)/queue.sqlite\u{1B}[K"),
      rotated.error)
    XCTAssertTrue(rotated.error.hasSuffix("\r\u{1B}[K"), "the line is cleared: \(rotated.error.debugDescription)")
    XCTAssertFalse(rotated.output.contains("rotating:"), "never on standard output")
  }

  /// The count restarted with each container ("container 2 of 2, 3 records re-sealed" after 1000
  /// in the first): an operator read it as going backwards. Found by an operator review. It now
  /// counts over every container, and says which container it is in.
  func testRotationProgressCountsAcrossContainers() {
    let second = RotationProgress(container: 2, containers: 2, path: "/d/b.sqlite", resealed: 3, resealedBefore: 1000)
    XCTAssertEqual(
      VaultCommandLine.rotationProgressText(second),
      "rotating: 1003 records re-sealed so far; container 2 of 2: /d/b.sqlite")
  }

  /// A background job (`vault rotate &`) drew its line over the shell's prompt and what the user
  /// was typing; `TERM=dumb` got escape sequences it cannot honour. Found at a terminal by an
  /// outside review.
  func testNoProgressInTheBackgroundOrOnADumbTerminal() {
    let background = run(["rotate"], interactive: true, foreground: false)
    XCTAssertEqual(background.status, 0, background.error)
    XCTAssertEqual(background.error, "")
    let dumb = run(["rotate"], interactive: true, environment: ["TERM": "dumb"])
    XCTAssertEqual(dumb.status, 0, dumb.error)
    XCTAssertEqual(dumb.error, "")
  }

  /// A step that begins before the first second is drawn when the second is up, if the work is
  /// still running: backup's steps all began early, and a 4-second backup showed nothing. Found at
  /// a terminal by an outside review.
  func testAStepBegunEarlyIsDrawnWhenTheDelayIsUpUnlessTheWorkEndedFirst() {
    let capture = Capture()
    let lock = NSLock()
    let terminal = Terminal(
      environment: [:], readInput: { _ in [] }, writeOutput: { _ in },
      writeError: { text in lock.withLock { capture.error += text } })
    terminal.isInteractive = true
    terminal.progressDelay = 0.3
    let line = ProgressLine(terminal, json: false)
    line.update("backup: deriving the key", step: true)
    XCTAssertEqual(lock.withLock { capture.error }, "", "nothing before the delay")
    Thread.sleep(forTimeInterval: 1.5)
    XCTAssertEqual(lock.withLock { capture.error }, "\rbackup: deriving the key\u{1B}[K")
    line.finish()
    XCTAssertEqual(lock.withLock { capture.error }, "\rbackup: deriving the key\u{1B}[K\r\u{1B}[K")

    let quick = ProgressLine(terminal, json: false)
    lock.withLock { capture.error = "" }
    quick.update("backup: deriving the key", step: true)
    quick.finish()
    Thread.sleep(forTimeInterval: 1.5)
    XCTAssertEqual(lock.withLock { capture.error }, "", "work that ended within the delay shows nothing")
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

  /// Backup, verification and restore say their steps on a terminal, never with --json.
  func testBackupVerifyAndRestoreShowTheirSteps() throws {
    let bundles = temporary.sub("bundles")
    try FileManager.default.createDirectory(atPath: bundles, withIntermediateDirectories: false)
    let passphrase = temporary.sub("passphrase")
    try "correct horse battery staple\n".write(toFile: passphrase, atomically: true, encoding: .utf8)
    XCTAssertEqual(chmod(passphrase, 0o600), 0)
    let backup = run(["backup", "--to", bundles, "--passphrase-file", passphrase], interactive: true)
    XCTAssertEqual(backup.status, 0, backup.error)
    for step in [
      "backup: snapshot of container 1 of 1", "backup: deriving the key from the passphrase",
      "backup: writing the bundle", "backup: verifying container 1 of 1",
    ] {
      XCTAssertTrue(backup.error.contains("\r" + step + "\u{1B}[K"), "\(step): \(backup.error.debugDescription)")
    }
    XCTAssertTrue(backup.error.hasSuffix("\r\u{1B}[K"), "cleared before the report")
    let bundle = try XCTUnwrap(
      try FileManager.default.contentsOfDirectory(atPath: bundles).first { $0.hasSuffix(".vaultbackup") })
    let verified = run(
      ["backup", "--verify", bundles + "/" + bundle, "--passphrase-file", passphrase, "--json"], interactive: true)
    XCTAssertEqual(verified.status, 0, verified.error)
    XCTAssertEqual(verified.error, "", "no progress with --json")
    let restored = run(
      [
        "restore", bundles + "/" + bundle, "--passphrase-file", passphrase, "--into", temporary.sub("restored"),
        "--store", "keyfile", "--keyfile", temporary.sub("k2/v.keys"),
      ], interactive: true)
    XCTAssertEqual(restored.status, 0, restored.error)
    XCTAssertTrue(restored.error.contains("\rrestore: restoring container 1 of 1\u{1B}[K"), restored.error)
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

  /// Starts `strace -e INJECTION vault ARGS…` on a new pty as its session leader (so vault's group
  /// is the terminal's foreground group: the line is drawn), strace slowing the command so it
  /// outlasts its first second; types Ctrl-C once the progress line (MARKER) is on the screen;
  /// prints `status` (`signal N` or `exit N`) and `after`: what the terminal got after the last
  /// MARKER, as a Python repr. Arguments: strace, vault, injection, marker, vault's arguments.
  private static let interruptDriver = #"""
    import fcntl, os, pty, struct, sys, termios, time
    strace, vault, injection, marker = sys.argv[1:5]
    marker = marker.encode()
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 200, 0, 0))
    child = os.fork()
    if child == 0:
        os.close(master)
        os.setsid()
        fcntl.ioctl(slave, termios.TIOCSCTTY, 0)
        for fd in (0, 1, 2):
            os.dup2(slave, fd)
        os.execv(strace, [strace, "-f", "-o", "/dev/null", "-e", "inject=" + injection, vault] + sys.argv[5:])
    os.close(slave)
    seen = b""
    deadline = time.time() + 60
    while marker not in seen and time.time() < deadline:
        seen += os.read(master, 4096)
    time.sleep(0.3)
    os.write(master, b"\x03")
    try:
        while True:
            chunk = os.read(master, 4096)
            if not chunk:
                break
            seen += chunk
    except OSError:
        pass
    _, status = os.waitpid(child, 0)
    print("status", f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else f"exit {os.WEXITSTATUS(status)}")
    print("after", repr(seen[seen.rfind(marker):]))
    """#

  /// Ctrl-C during `vault scan` on a terminal left the progress line there, and the shell's prompt
  /// came after it on the same row (outside terminal review). The line is cleared now, and vault
  /// still ends by SIGINT.
  func testCtrlCDuringAScanClearsTheProgressLineAndStillEndsByTheSignal() throws {
    let strace = try Strace.path()
    let directory = temporary.sub("many")
    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: false)
    for index in 0..<400 {
      try Data("file \(index)\n".utf8).write(to: URL(fileURLWithPath: directory + "/\(index).txt"))
    }
    try assertCtrlCClearsTheLine(
      strace: strace, injection: "openat:delay_exit=40ms", marker: "scanning: ", ["scan", directory])
  }

  /// Ctrl-C during `vault rotate` on a terminal left its progress line on the screen (an operator
  /// review in tmux); it is cleared now, vault still ends by SIGINT, and the next rotation resumes.
  func testCtrlCDuringARotationClearsTheProgressLineAndTheNextOneResumes() throws {
    let strace = try Strace.path()
    try assertCtrlCClearsTheLine(
      strace: strace, injection: "fdatasync,fsync:delay_exit=400ms", marker: "rotating: ", ["--home", home, "rotate"])
    let status = try vault(["--home", home, "status"])
    if status.outputText.contains("has not finished") {
      XCTAssertTrue(try vault(["--home", home, "rotate"]).outputText.contains("version 1 -> 2"))
    }
    let stats = try vault(["--home", home, "queue", "stats", "--json"])
    XCTAssertTrue(stats.outputText.contains("\"total\" : 3"), stats.outputText)
  }

  /// Runs `vault ARGUMENTS` on a pty through `interruptDriver` and checks that Ctrl-C, typed once
  /// the progress line (`marker`) shows, cleared the line and ended vault by SIGINT.
  private func assertCtrlCClearsTheLine(
    strace: String, injection: String, marker: String, _ arguments: [String], line: UInt = #line
  ) throws {
    let run = try Spawn.run(
      "/usr/bin/env", ["python3", "-c", Self.interruptDriver, strace, vaultBinary(), injection, marker] + arguments,
      environment: Strace.environment(nil))
    XCTAssertEqual(run.status, 0, run.error, line: line)
    var lines: [String: String] = [:]
    for text in run.outputText.split(separator: "\n") {
      let parts = text.split(separator: " ", maxSplits: 1)
      if parts.count == 2 { lines[String(parts[0])] = String(parts[1]) }
    }
    XCTAssertEqual(lines["status"], "signal \(SIGINT)", run.outputText, line: line)
    let after = try XCTUnwrap(lines["after"], run.outputText, line: line)
    XCTAssertTrue(after.hasPrefix("b'\(marker)"), "the line was drawn: \(after)", line: line)
    // The clear: a carriage return, then erase to the end of the line (Python writes ESC as \x1b).
    XCTAssertTrue(after.contains(#"\r\x1b[K"#), "the progress line is cleared: \(after)", line: line)
  }
}
