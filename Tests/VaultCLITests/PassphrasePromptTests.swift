import Foundation
import VaultTestSupport
import XCTest

/// The passphrase prompt turns the terminal's echo off. A signal that ends vault at the prompt
/// must leave the terminal as it found it: Ctrl-C used to leave echo off, and a shell that does
/// not reset the terminal itself (dash, a script, a program that ran vault) then showed nothing of
/// what was typed next, the next passphrase included. Driven on a real pseudo-terminal (Python's
/// `pty`), with vault as the session leader on it, as a shell would start it.
final class PassphrasePromptTests: XCTestCase {
  private var temporary: TemporaryDirectory!
  private var home: String { temporary.sub("home") }

  override func setUpWithError() throws {
    temporary = TemporaryDirectory()
    try initKeyfileVault(home: home, keyfile: temporary.sub("k/v.keys"))
    try FileManager.default.createDirectory(atPath: temporary.sub("backups"), withIntermediateDirectories: true)
  }

  override func tearDown() { temporary = nil }

  /// Starts `vault --home HOME backup --to DIR` on a new pty as a shell would (a session leader
  /// owns the terminal and puts vault in a foreground process group of its own, so terminal stop
  /// signals act on it: an orphaned group would ignore them), waits for the prompt, then does
  /// ACTION; prints `echo-before`, `echo-after` (the terminal's ECHO flag), `status` (`signal N`
  /// or `exit N`) and `stopped` (whether vault stopped).
  private static let driver = #"""
    import fcntl, os, pty, signal, sys, termios, threading, time
    vault, home, directory, action = sys.argv[1:5]
    master, slave = pty.openpty()
    before = termios.tcgetattr(slave)
    report_read, report_write = os.pipe()
    leader = os.fork()
    if leader == 0:
        os.close(report_read)
        os.setsid()
        fcntl.ioctl(slave, termios.TIOCSCTTY, 0)
        child = os.fork()
        if child == 0:
            os.setpgid(0, 0)
            while os.tcgetpgrp(slave) != os.getpid():
                time.sleep(0.01)
            for fd in (0, 1, 2):
                os.dup2(slave, fd)
            os.execv(vault, [vault, "--home", home, "backup", "--to", directory])
        os.setpgid(child, child)
        signal.signal(signal.SIGTTOU, signal.SIG_IGN)
        os.tcsetpgrp(slave, child)
        os.write(report_write, f"pid {child}\n".encode())
        while True:
            _, status = os.waitpid(child, os.WUNTRACED)
            if os.WIFSTOPPED(status):
                os.write(report_write, b"stopped\n")
                os.kill(child, signal.SIGCONT)
                continue
            ended = f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else f"exit {os.WEXITSTATUS(status)}"
            os.write(report_write, f"status {ended}\n".encode())
            os._exit(0)
    os.close(report_write)
    reports = os.fdopen(report_read)
    pid = int(reports.readline().split()[1])
    seen = b""
    deadline = time.time() + 30
    def read_until(text):
        global seen
        while text not in seen and time.time() < deadline:
            seen += os.read(master, 4096)
    read_until(b"passphrase: ")
    time.sleep(0.3)  # the prompt is written before echo is turned off
    if action == "ctrl-c":
        os.write(master, b"\x03")
    elif action == "ctrl-backslash":
        os.write(master, b"\x1c")
    elif action in ("term", "hup"):
        os.kill(pid, signal.SIGTERM if action == "term" else signal.SIGHUP)
    elif action == "ctrl-z-then-type":
        os.write(master, b"\x1a")
        time.sleep(0.5)
        os.write(master, b"a passphrase\n")
        read_until(b"again: ")
        time.sleep(0.3)
        os.write(master, b"a passphrase\n")
    def drain():
        try:
            while os.read(master, 4096):
                pass
        except OSError:
            pass
    threading.Thread(target=drain, daemon=True).start()
    stopped = False
    for line in reports:
        if line.startswith("stopped"):
            stopped = True
        elif line.startswith("status"):
            status = line.split(" ", 1)[1].strip()
    os.waitpid(leader, 0)
    after = termios.tcgetattr(slave)
    print("echo-before", bool(before[3] & termios.ECHO))
    print("echo-after", bool(after[3] & termios.ECHO))
    print("status", status)
    print("stopped", stopped)
    """#

  private func prompt(_ action: String) throws -> [String: String] {
    let run = try Spawn.run(
      "/usr/bin/env", ["python3", "-c", Self.driver, vaultBinary(), home, temporary.sub("backups"), action])
    XCTAssertEqual(run.status, 0, run.error)
    var lines: [String: String] = [:]
    for line in run.outputText.split(separator: "\n") {
      let parts = line.split(separator: " ", maxSplits: 1)
      if parts.count == 2 { lines[String(parts[0])] = String(parts[1]) }
    }
    return lines
  }

  func testASignalAtThePromptLeavesEchoOnAndStillEndsVault() throws {
    for (action, signal) in [("ctrl-c", SIGINT), ("ctrl-backslash", SIGQUIT), ("term", SIGTERM), ("hup", SIGHUP)] {
      let result = try prompt(action)
      XCTAssertEqual(result["echo-before"], "True", action)
      XCTAssertEqual(result["echo-after"], "True", "\(action) left the terminal without echo")
      XCTAssertEqual(result["status"], "signal \(signal)", "\(action): vault still ends by the signal")
      let bundles = try FileManager.default.contentsOfDirectory(atPath: temporary.sub("backups"))
      XCTAssertEqual(bundles, [], "\(action): nothing written")
    }
  }

  /// Ctrl-Z is ignored while echo is off (a process stopped there would leave it off), and the
  /// prompt still works: the backup is written and echo is back after it.
  func testCtrlZAtThePromptIsIgnoredAndTheBackupGoesOn() throws {
    let result = try prompt("ctrl-z-then-type")
    XCTAssertEqual(result["stopped"], "False", "vault stopped with echo off")
    XCTAssertEqual(result["status"], "exit 0")
    XCTAssertEqual(result["echo-after"], "True")
    let bundles = try FileManager.default.contentsOfDirectory(atPath: temporary.sub("backups"))
    XCTAssertEqual(bundles.filter { $0.hasSuffix(".vaultbackup") }.count, 1, "\(bundles)")
  }
}
