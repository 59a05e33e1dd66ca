import Foundation
import Vault
import VaultKeys
import VaultTestSupport
import XCTest

@testable import VaultCLI

/// What an operator's first hour with `vault` found (issue 13's independent check), each held
/// fixed: a compromise rotation that could be finished as an ordinary one, hints that named the
/// wrong state, names that could forge lines, and errors that said nothing.
final class OperatorReviewTests: XCTestCase {
  private var temporary: TemporaryDirectory!
  private var home: String { temporary.sub("home") }

  override func setUpWithError() throws {
    temporary = TemporaryDirectory()
    try initKeyfileVault(home: home, keyfile: temporary.sub("k/v.keys"))
  }

  // XCTest keeps every test case object to the end of the run, so the directory's deinit would
  // not run before the process exits: 18 directories, with keyfiles, were left in /tmp per run.
  override func tearDown() { temporary = nil }

  /// A key store that stops answering part-way through a rotation (here: every call after the new
  /// key is stored) leaves how far it got unreadable, as the manifest is authenticated by the
  /// store. The command said nothing about it; it now says so and where to look once the store
  /// answers, and the rerun finishes the rotation with the record.
  func testARotationWhoseKeyStoreStopsAnsweringSaysWhereToLookOnceItAnswers() throws {
    let home = temporary.sub("stops")
    let keyfile = temporary.sub("keys/stops.keys")
    try initKeyfileVault(home: home, keyfile: keyfile)
    XCTAssertEqual(try vault(["--home", home, "queue", "put", "--queue", "q"], input: Array("m".utf8)).status, 0)
    let stopped = StoppedAfterStore()
    let store = InterposedKeyStore(KeyfileStore(path: keyfile)) { call in
      try stopped.check(call)
      return .forward
    }
    let capture = Capture()
    let terminal = Terminal(
      environment: ProcessInfo.processInfo.environment, readInput: { _ in [] }, writeOutput: { capture.output += $0 },
      writeError: { capture.error += $0 })
    let status = VaultCommandLine(terminal: terminal, resolver: .fixed(store)).run(["--home", home, "rotate"])
    XCTAssertEqual(status, 1, capture.error)
    XCTAssertTrue(stopped.reached, "the rotation stored its new key")
    XCTAssertTrue(capture.error.contains("did not answer within 1 s"), capture.error)
    XCTAssertTrue(
      capture.error.contains(
        "the key store stopped answering, so how far this rotation got cannot be checked now; once it answers, "
          + "`vault status` tells whether a rotation is under way (`vault rotate` resumes it)"), capture.error)

    let rerun = try vault(["--home", home, "rotate"])
    XCTAssertEqual(rerun.status, 0, rerun.error)
    let stats = try vault(["--home", home, "queue", "stats", "--json"])
    let counts = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(stats.output)) as? [String: Any])
    XCTAssertEqual(counts["by_version"] as? [String: Int], ["2": 1], stats.outputText)
    XCTAssertEqual((counts["by_state"] as? [String: Int])?["pending"], 1, stats.outputText)
  }

  /// A HOME (or VAULT_HOME, XDG_…) whose bytes are not UTF-8 reached vault with U+FFFD in place of
  /// them: `init` made the vault in a new directory beside the real one and exited 0. Found at a
  /// terminal by an outside review. Now refused, exit 64, nothing made.
  func testAHomeVariableThatIsNotUTF8IsRefusedAndNothingIsMade() throws {
    let parent = temporary.sub("u8")
    try FileManager.default.createDirectory(atPath: parent, withIntermediateDirectories: true)
    for name in ["HOME", "VAULT_HOME", "XDG_DATA_HOME", "XDG_CONFIG_HOME"] {
      // printf's octal escape makes the byte 0xFF, which no Swift String can hold.
      let script = """
        mkdir -p "$1/$(printf 'x\\377')" && export \(name)="$1/$(printf 'x\\377')" && \
        exec "$2" init --store keyfile --keyfile "$1/k/v.keys"
        """
      let run = try Spawn.run(
        "/bin/sh", ["-c", script, "sh", parent, vaultBinary()],
        environment: environment(["VAULT_HOME": nil, "XDG_DATA_HOME": nil, "XDG_CONFIG_HOME": nil, "HOME": parent]))
      XCTAssertEqual(run.status, 64, "\(name): \(run.error)")
      XCTAssertTrue(run.error.contains("$\(name) is not valid UTF-8"), run.error)
      let made = try FileManager.default.contentsOfDirectory(atPath: parent)
      XCTAssertEqual(made.count, 1, "\(name): only the directory the script made: \(made)")
    }
  }

  /// Ctrl-D at unpin's y/N question (the end of input on a terminal) said "no terminal to
  /// confirm; rerun with --yes": false, and it pushed toward --yes. Found at a terminal by an
  /// outside review. Now: no answer, nothing changed.
  func testTheEndOfInputAtUnpinsQuestionIsNoAnswerNotNoTerminal() throws {
    let envelope = temporary.sub("e.bin")
    let sealed = try vault(["--home", home, "seal", "--context", "c", "-o", envelope], input: Array("x".utf8))
    XCTAssertEqual(sealed.status, 0, sealed.error)
    XCTAssertEqual(try vault(["--home", home, "rotate"]).status, 0)
    let ended = run(["unpin", "1"], answers: [])
    XCTAssertEqual(ended.status, 1, ended.error)
    XCTAssertTrue(ended.error.hasSuffix("\nvault: no answer; nothing was changed\n"), ended.error)
    XCTAssertFalse(ended.error.contains("--yes"), ended.error)
    let noTerminal = run(["unpin", "1"], answers: nil)
    XCTAssertTrue(noTerminal.error.contains("no terminal to confirm; rerun with --yes"), noTerminal.error)
    XCTAssertEqual(try status()["external_seal_versions"] as? [Int], [1], "nothing was released")
  }

  /// `telemetry watch` went on delivering with its standard output gone (`| head -1` never ended)
  /// and then exited 0 on SIGINT. Found at a terminal by an outside review. It now stops at the
  /// first pass whose line cannot be written, exit 1.
  func testTelemetryWatchStopsWhenItsOutputIsGone() throws {
    XCTAssertEqual(try vault(["--home", home, "telemetry", "log", "a"]).status, 0)
    let run = try Spawn.run(
      "/bin/sh",
      [
        "-c",
        "exec timeout 60 \"$0\" --home \"$1\" telemetry watch --endpoint http://127.0.0.1:9/b --interval 0.5 >/dev/full",
        vaultBinary(), home,
      ])
    XCTAssertEqual(run.status, 1, "exit 1 by itself, not 124 from timeout: \(run.error)")
    XCTAssertTrue(run.error.contains("could not write to standard output"), run.error)
  }

  /// A home on a read-only mount: the commands that only read work (status, queue stats, container
  /// list), and one that writes says to remount (it said only "open lock … Read-only file system",
  /// session 39's review).
  func testAHomeOnAReadOnlyMountIsReadAndAWriteSaysToRemount() throws {
    try XCTSkipUnless(geteuid() == 0, "a mount namespace needs root (CI runs as root)")
    try XCTSkipUnless(FileManager.default.isExecutableFile(atPath: "/usr/bin/unshare"), "unshare (util-linux)")
    XCTAssertEqual(try vault(["--home", home, "queue", "put", "--queue", "q"], input: [1]).status, 0)
    let script = [
      "mount --bind \"$HOME_DIR\" \"$HOME_DIR\" && mount -o remount,ro,bind \"$HOME_DIR\" || exit 99",
      "for read in status 'queue stats' 'container list'; do \"$VAULT\" $read >/dev/null || exit 98; done",
      "echo x | \"$VAULT\" seal --context c",
    ].joined(separator: "\n")
    let run = try Spawn.run(
      "/usr/bin/unshare", ["-m", "--propagation", "private", "/bin/sh", "-c", script],
      environment: environment(["VAULT": vaultBinary(), "HOME_DIR": home, "VAULT_HOME": home]))
    try XCTSkipIf(run.error.contains("unshare:") || run.status == 99, "no read-only bind mount here: \(run.error)")
    XCTAssertNotEqual(run.status, 98, "a command that only reads failed on the read-only mount: \(run.error)")
    XCTAssertEqual(run.status, 1, run.error)
    XCTAssertTrue(run.error.contains("Read-only file system; this needs to write there"), run.error)
    XCTAssertTrue(run.error.contains("remount it read-write and retry"), run.error)
    XCTAssertEqual(try vault(["--home", home, "status"]).status, 0)
  }

  /// A mistyped backup directory or bundle was said only after the passphrase was typed (twice,
  /// for a backup). Found at a terminal by an outside review. What needs no passphrase is now
  /// checked first: here, with no terminal to ask on, the path's error comes instead of "no
  /// terminal to ask for the passphrase".
  func testAMistypedDirectoryOrBundleIsSaidBeforeThePassphraseIsAsked() throws {
    let missing = temporary.sub("nowhere")
    let notABundle = temporary.sub("k/v.keys")
    let fifo = temporary.sub("fifo")
    XCTAssertEqual(mkfifo(fifo, 0o600), 0)
    let cases: [([String], String)] = [
      (["backup", "--to", missing], "\(missing) is not a directory"),
      (["backup", "--verify", missing], "open \(missing) failed: No such file or directory"),
      (["backup", "--verify", notABundle], "is not a vault backup bundle (no bundle magic)"),
      // Not "no bundle magic": nothing was read from it.
      (["backup", "--verify", fifo], "\(fifo) is not a regular file (a FIFO, device, socket or directory)"),
      (["restore", missing, "--into", temporary.sub("restored")], "open \(missing) failed: No such file or directory"),
    ]
    for (arguments, expected) in cases {
      let refused = run(arguments, answers: nil)
      XCTAssertNotEqual(refused.status, 0, "\(arguments)")
      XCTAssertTrue(refused.error.contains(expected), "\(arguments): \(refused.error)")
      XCTAssertFalse(refused.error.contains("passphrase"), "\(arguments): \(refused.error)")
    }
    XCTAssertFalse(FileManager.default.fileExists(atPath: temporary.sub("restored")), "nothing was made")
  }

  /// `queue put >/dev/full` stored the record and exited 1 saying only that the output failed: a
  /// script that retried stored it twice (found at a terminal by an outside review). The error now
  /// says what was done and that a rerun would do it again; `telemetry log` and `rotate` too.
  func testAFailedOutputAfterAChangeSaysTheChangeWasMade() throws {
    func toFull(_ arguments: String) throws -> Spawned {
      try Spawn.run(
        "/bin/sh", ["-c", "echo payload | exec \"$0\" --home \"$1\" \(arguments) >/dev/full", vaultBinary(), home])
    }
    let put = try toFull("queue put --queue q")
    XCTAssertEqual(put.status, 1, put.error)
    let listed = try vault(["--home", home, "queue", "list"]).outputText
    let id = String(listed.prefix(36))
    XCTAssertEqual(listed.split(separator: "\n").count, 1, listed)
    XCTAssertTrue(
      put.error.hasPrefix(
        "Error: could not write to standard output: No space left on device; the record was stored as \(id); "
          + "running the command again would store it again under a new id (give --id to make a retry safe)"),
      put.error)
    // With --id a rerun is a duplicate, not a second record: nothing more to say.
    let withID = try toFull("queue put --queue q --id \(id)")
    XCTAssertEqual(withID.status, 1)
    XCTAssertFalse(withID.error.contains("stored as"), withID.error)

    let logged = try toFull("telemetry log t")
    XCTAssertEqual(logged.status, 1)
    XCTAssertTrue(logged.error.contains("; the event was logged as "), logged.error)
    let rotated = try toFull("rotate")
    XCTAssertEqual(rotated.status, 1)
    XCTAssertTrue(
      rotated.error.contains("; the rotation to version 2 finished; running it again would make another version"),
      rotated.error)
    // A command that changed nothing says only what failed.
    let status = try toFull("status")
    XCTAssertEqual(status.status, 1)
    XCTAssertEqual(
      status.error.components(separatedBy: "\n").filter { $0.hasPrefix("Error:") },
      ["Error: could not write to standard output: No space left on device"], status.error)
  }

  /// In-process with a terminal that answers `answers` in turn (nil: no terminal).
  private func run(_ arguments: [String], answers: [String]?) -> (status: Int32, output: String, error: String) {
    let capture = Capture()
    let terminal = Terminal(
      environment: ProcessInfo.processInfo.environment, readInput: { _ in [] },
      writeOutput: { capture.output += $0 }, writeError: { capture.error += $0 })
    if let answers {
      let queue = Answers(answers)
      terminal.askLine = { question in
        capture.error += question
        return queue.next()
      }
    }
    let status = VaultCommandLine(terminal: terminal).run(["--home", home] + arguments)
    return (status, String(decoding: capture.output, as: UTF8.self), capture.error)
  }

  private func status() throws -> [String: Any] {
    let run = try vault(["--home", home, "status", "--json"])
    return try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(run.output)) as? [String: Any], run.error)
  }

  private func versions() throws -> [Int: String] {
    let list = try status()["versions"] as? [[String: Any]] ?? []
    return Dictionary(uniqueKeysWithValues: list.map { ($0["version"] as! Int, $0["state"] as! String) })
  }

  private func manifest() throws -> Data { try Data(contentsOf: URL(fileURLWithPath: home + "/manifest.json")) }

  /// Without a terminal, `--compromised` needs `--yes` before anything is made (it used to make a
  /// new key active, then stop).
  func testACompromiseRotationWithoutATerminalNeedsYesUpFront() throws {
    XCTAssertEqual(try vault(["--home", home, "seal", "--context", "c"], input: [1]).status, 0)
    let before = try manifest()
    let refused = try vault(["--home", home, "rotate", "--compromised"])
    XCTAssertEqual(refused.status, 64, refused.error)
    XCTAssertTrue(refused.error.hasPrefix("Error: --compromised needs --yes when there is no terminal"), refused.error)
    XCTAssertEqual(try manifest(), before, "nothing was made")
  }

  /// A compromise rotation stopped at its question leaves the vault marked: status warns, an
  /// ordinary or scheduled rotation refuses (it would keep the compromised key), and the next
  /// rotation after a compromise finishes it with a fresh key, retiring every older one.
  func testAStoppedCompromiseRotationCanOnlyBeFinishedAsOne() throws {
    let sealed = try vault(["--home", home, "seal", "--context", "c"], input: Array("outside".utf8))
    XCTAssertEqual(sealed.status, 0)
    // A typo is asked again; then "n" stops it.
    let stopped = run(["rotate", "--compromised"], answers: ["x", "n"])
    XCTAssertEqual(stopped.status, 1, stopped.error)
    XCTAssertTrue(stopped.error.contains("Retire them anyway (y), or stop (n)? "), stopped.error)
    XCTAssertTrue(stopped.error.contains("please answer y or n"), stopped.error)
    XCTAssertTrue(stopped.error.contains("`vault rotate --compromised`"), stopped.error)
    // The advice names the command that finishes it, never the ordinary rotation that refuses.
    XCTAssertTrue(stopped.error.contains("then run `vault rotate --compromised` again"), stopped.error)
    XCTAssertFalse(stopped.error.contains("run `vault rotate` again"), stopped.error)
    // The rerun makes version 3 (below): the note said "it resumes" (found by an outside review).
    XCTAssertTrue(stopped.error.contains("again: it makes another fresh key"), stopped.error)
    XCTAssertFalse(stopped.error.contains("it resumes"), stopped.error)
    XCTAssertEqual(try versions(), [1: "decrypt-only", 2: "active"])
    let warnings = try status()["warnings"] as? [String] ?? []
    XCTAssertTrue(warnings.contains { $0.contains("has not finished") }, "\(warnings)")
    let text = try vault(["--home", home, "status"]).outputText
    XCTAssertTrue(text.contains("has not finished") && text.contains("(`vault rotate --compromised`)"), text)

    let before = try manifest()
    for ordinary in [["rotate"], ["rotate", "--if-due", "--max-age", "0"]] {
      let refused = try vault(["--home", home] + ordinary)
      XCTAssertEqual(refused.status, 1, "\(ordinary): \(refused.error)")
      XCTAssertTrue(refused.error.contains("has not finished"), refused.error)
      XCTAssertTrue(refused.error.contains("`vault rotate --compromised`"), refused.error)
      // Refused before anything: no note that this rotation stopped part-way and that an
      // ordinary rerun resumes it (an outside review saw both, the note before the refusal).
      XCTAssertFalse(refused.error.contains("stopped part-way"), refused.error)
      XCTAssertFalse(refused.error.contains("it resumes"), refused.error)
      XCTAssertEqual(try manifest(), before, "\(ordinary) changed nothing")
    }

    let finished = try vault(["--home", home, "rotate", "--compromised", "--yes", "--json"])
    XCTAssertEqual(finished.status, 0, finished.error)
    let report = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(finished.output)) as? [String: Any])
    XCTAssertEqual(report["new_version"] as? Int, 3, "a fresh key: the stopped run's may have leaked too")
    XCTAssertEqual(report["retired"] as? [Int], [1, 2])
    XCTAssertEqual(try versions(), [1: "retired", 2: "retired", 3: "active"])
    XCTAssertEqual(try status()["warnings"] as? [String], [])
    XCTAssertEqual(try vault(["--home", home, "rotate"]).status, 0, "ordinary rotations run again")
  }

  /// A 403 exits 1 saying to fix the token; nothing is parked, and once the server takes the
  /// token the events go out with no resend (the refused batch after its backoff, at most 1 s here).
  func testA403SaysToFixTheTokenAndTheEventsGoOutOnceItIs() throws {
    let token = temporary.sub("token")
    try "test-token".write(toFile: token, atomically: true, encoding: .utf8)
    XCTAssertEqual(try vault(["--home", home, "telemetry", "log", "a"]).status, 0)
    let server = try TelemetryServer(directory: temporary.path, mode: "403", root: packageRoot())
    defer { server.stop() }
    let flush = [
      "--home", home, "telemetry", "flush", "--endpoint", server.endpoint.absoluteString, "--token-file", token,
    ]
    let refused = try vault(flush)
    XCTAssertEqual(refused.status, 1, refused.error)
    XCTAssertTrue(refused.error.contains("403 forbidden); fix the token"), refused.error)
    XCTAssertFalse(refused.error.contains("resend"), refused.error)
    XCTAssertEqual(try vault(["--home", home, "queue", "list", "--state", "parked"]).outputText, "")
    server.setMode("ok")
    Thread.sleep(forTimeInterval: 1.2)
    let sent = try vault(flush)
    XCTAssertEqual(sent.status, 0, sent.error)
    XCTAssertTrue(sent.outputText.hasPrefix("delivered 1,"), sent.outputText)
  }

  /// A token file that is empty or holds two lines is a local mistake: exit 1 saying so, nothing
  /// sent (it used to be retried with backoff, silently, as if the network were down).
  func testATokenFileThatHoldsNoSingleTokenIsAnError() throws {
    XCTAssertEqual(try vault(["--home", home, "telemetry", "log", "a"]).status, 0)
    let server = try TelemetryServer(directory: temporary.path, root: packageRoot())
    defer { server.stop() }
    for (name, contents) in [("empty", ""), ("two-lines", "TOKEN\nSECOND\n"), ("spaced", "two words\n")] {
      let path = temporary.sub(name)
      try contents.write(toFile: path, atomically: true, encoding: .utf8)
      let flushed = try vault([
        "--home", home, "telemetry", "flush", "--endpoint", server.endpoint.absoluteString, "--token-file", path,
      ])
      XCTAssertEqual(flushed.status, 1, name)
      XCTAssertTrue(flushed.error.contains("must hold one bearer token on one line"), "\(name): \(flushed.error)")
      XCTAssertFalse(flushed.error.contains("SECOND"), "the token is never echoed")
    }
    XCTAssertEqual(server.received.count, 0, "nothing was sent")
  }

  /// Names cannot carry control characters in, and names already in a container (an app may use
  /// any) are listed escaped: no forged line, no terminal escape.
  func testNamesWithControlCharactersAreRefusedAndListedEscaped() throws {
    for arguments in [
      ["queue", "put", "--queue", "a\nb"], ["telemetry", "log", "t\u{1B}[2J"],
      ["telemetry", "log", "t", "--session", "s\r"],
      ["queue", "list", "--queue", "x\u{7F}"],
    ] {
      let run = try vault(["--home", home] + arguments, input: [1])
      XCTAssertEqual(run.status, 64, "\(arguments)")
      XCTAssertTrue(run.error.contains("must not hold control characters"), run.error)
      XCTAssertFalse(run.error.contains("\u{1B}"), "never echoed raw")
    }
    XCTAssertEqual(Printable.escaped("a\nb\u{1B}[31m"), "a\\u{a}b\\u{1b}[31m")
    XCTAssertEqual(Printable.escaped("plain name"), "plain name")
  }

  /// A refused init leaves no empty home behind (README: it refuses "changing nothing").
  func testARefusedInitLeavesNoHomeBehind() throws {
    let fresh = temporary.sub("fresh/home")
    var environment = ProcessInfo.processInfo.environment
    environment["DBUS_SESSION_BUS_ADDRESS"] = "unix:path=/nonexistent/bus"
    let refused = try vault(["--home", fresh, "init", "--store", "secret-service"], environment: environment)
    XCTAssertNotEqual(refused.status, 0, refused.error)
    XCTAssertFalse(FileManager.default.fileExists(atPath: fresh), "no home left: \(refused.error)")
    // A home that existed (empty) before stays, as it was.
    try FileManager.default.createDirectory(atPath: fresh, withIntermediateDirectories: true)
    XCTAssertNotEqual(
      try vault(["--home", fresh, "init", "--store", "secret-service"], environment: environment).status, 0)
    XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: fresh), [])
  }

  func testPlainHTTPToAnotherMachineNamesTheFlagNotTheLibrary() throws {
    let run = try vault(["--home", home, "telemetry", "flush", "--endpoint", "http://192.0.2.1/x"])
    XCTAssertEqual(run.status, 64)
    XCTAssertTrue(run.error.contains("--allow-insecure-http on a test network only"), run.error)
    XCTAssertFalse(run.error.contains("allowInsecureHTTP"), run.error)
  }

  /// A FIFO named on the command line was never read, so the audit is incomplete (exit 2), as for a
  /// symlink given as a path; it said clean (exit 0).
  func testAFIFOGivenAsAPathMakesTheScanIncomplete() throws {
    let fifo = temporary.sub("fifo")
    XCTAssertEqual(mkfifo(fifo, 0o600), 0)
    let scanned = try vault(["scan", fifo, "--json"])
    XCTAssertEqual(scanned.status, 2, scanned.outputText + scanned.error)
    let report = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(scanned.output)) as? [String: Any])
    XCTAssertEqual(report["complete"] as? Bool, false)
    let incomplete = report["incomplete"] as? [[String: Any]] ?? []
    XCTAssertEqual(incomplete.first?["reason"] as? String, "FIFO (never opened), given as a path")
  }

  /// Advice that shows a command printed its path raw: pasted, a path with a space, a quote, `$`
  /// or `;` made another command. Found by an operator review. The path is now quoted for a POSIX
  /// shell when it needs it, and the advice pasted into sh does what it says.
  func testAdviceQuotesAPathSoThePastedCommandActsOnIt() throws {
    let directory = temporary.sub("it's $HOME; data")
    let container = directory + "/q.sqlite"
    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    let put = try vault(["--home", home, "queue", "put", "--queue", "q", "--container", container], input: [1])
    XCTAssertEqual(put.status, 0, put.error)
    try FileManager.default.removeItem(atPath: directory)
    let rotated = try vault(["--home", home, "rotate"])
    XCTAssertEqual(rotated.status, 1, rotated.error)
    let quoted = "'" + directory.replacingOccurrences(of: "'", with: #"'\''"#) + "/q.sqlite'"
    let command = "vault container forget \(quoted)"
    XCTAssertTrue(rotated.error.contains("`\(command)`"), rotated.error)
    // Run with --home, the advice says to give the command the same home (pasted as it is, it
    // would act on the default vault); run with VAULT_HOME, which a pasted command keeps, it does not.
    XCTAssertTrue(
      rotated.error.hasSuffix("vault: give the command above this vault's home: `vault --home \(home) …`\n"),
      rotated.error)
    let viaVariable = try Spawn.run(vaultBinary(), ["rotate"], environment: environment(["VAULT_HOME": home]))
    XCTAssertEqual(viaVariable.status, 1, viaVariable.error)
    XCTAssertTrue(viaVariable.error.contains("`\(command)`"), viaVariable.error)
    XCTAssertFalse(viaVariable.error.contains("give the command above"), viaVariable.error)
    // Pasted into a shell (the home given as VAULT_HOME, as the advice names no --home).
    let pasted = try Spawn.run(
      "/bin/sh", ["-c", command],
      environment: environment([
        "PATH": ((vaultBinary() as NSString).deletingLastPathComponent) + ":/usr/bin:/bin", "VAULT_HOME": home,
      ]))
    XCTAssertEqual(pasted.status, 0, pasted.error)
    XCTAssertEqual(try vault(["--home", home, "rotate"]).status, 0, "the missing container was forgotten")

    // A path with a newline, an escape and the text \u{a} in it: the advice as printed (through
    // the terminal sink) pasted into bash forgets that container, not one named by the escapes.
    let odd = temporary.sub("a\nb\u{1b}[1m" + #"\u{a}"#)
    try FileManager.default.createDirectory(atPath: odd, withIntermediateDirectories: true)
    let oddPut = try vault(
      ["--home", home, "queue", "put", "--queue", "q", "--container", odd + "/q.sqlite"], input: [1])
    XCTAssertEqual(oddPut.status, 0, oddPut.error)
    try FileManager.default.removeItem(atPath: odd)
    let oddRotated = try vault(["--home", home, "rotate"])
    XCTAssertEqual(oddRotated.status, 1, oddRotated.error)
    let shown = try XCTUnwrap(
      oddRotated.error.components(separatedBy: "`").first { $0.hasPrefix("vault container forget ") },
      oddRotated.error)
    XCTAssertEqual(shown, "vault container forget " + ShellWord.quoted(odd + "/q.sqlite"))
    let oddPasted = try Spawn.run(
      "/bin/bash", ["-c", shown],
      environment: environment([
        "PATH": ((vaultBinary() as NSString).deletingLastPathComponent) + ":/usr/bin:/bin", "VAULT_HOME": home,
        "LC_ALL": "C.UTF-8",
      ]))
    XCTAssertEqual(oddPasted.status, 0, oddPasted.error)
    XCTAssertEqual(try vault(["--home", home, "rotate"]).status, 0, "the container with the odd path was forgotten")
  }

  /// After a command given --home, only errors reported through `fail` said to give the vault
  /// command they show that home: backup's errors and doctor's lines did not, so their advice
  /// pasted as shown acted on the default vault. Found by an outside review. Both say it now; with
  /// VAULT_HOME, which a pasted command keeps, neither does.
  func testBackupAndDoctorSayToGiveTheShownCommandTheHome() throws {
    let note = "vault: give the command above this vault's home: `vault --home \(home) …`"
    let noBus = ["DBUS_SESSION_BUS_ADDRESS": "unix:path=/nonexistent", "VAULT_HOME": nil]
    let doctor = try vault(["--home", home, "doctor"], environment: environment(noBus))
    XCTAssertTrue(doctor.outputText.contains("(`vault backup --to DIR`)"), doctor.outputText)
    XCTAssertTrue(doctor.outputText.hasSuffix("\n" + note + "\n"), doctor.outputText)
    let doctorJSON = try vault(["--home", home, "doctor", "--json"], environment: environment(noBus))
    XCTAssertFalse(doctorJSON.outputText.contains("give the command above"), doctorJSON.outputText)
    var viaVariable = noBus
    viaVariable["VAULT_HOME"] = home
    let doctorViaVariable = try vault(["doctor"], environment: environment(viaVariable))
    XCTAssertTrue(doctorViaVariable.outputText.contains("(`vault backup --to DIR`)"), doctorViaVariable.outputText)
    XCTAssertFalse(doctorViaVariable.outputText.contains("give the command above"), doctorViaVariable.outputText)

    let directory = temporary.sub("gone")
    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    let put = try vault(
      ["--home", home, "queue", "put", "--queue", "q", "--container", directory + "/q.sqlite"], input: [1])
    XCTAssertEqual(put.status, 0, put.error)
    try FileManager.default.removeItem(atPath: directory)
    let backups = temporary.sub("backups")
    try FileManager.default.createDirectory(atPath: backups, withIntermediateDirectories: true)
    let passphrase = temporary.sub("passphrase")
    XCTAssertTrue(
      FileManager.default.createFile(
        atPath: passphrase, contents: Data("a long passphrase\n".utf8), attributes: [.posixPermissions: 0o600]))
    let backup = try vault(["--home", home, "backup", "--to", backups, "--passphrase-file", passphrase])
    XCTAssertEqual(backup.status, 2, backup.error)
    XCTAssertTrue(backup.error.contains("(`vault container forget`)"), backup.error)
    XCTAssertTrue(backup.error.hasSuffix("\n" + note + "\n"), backup.error)
    let backupViaVariable = try vault(
      ["backup", "--to", backups, "--passphrase-file", passphrase], environment: environment(viaVariable))
    XCTAssertEqual(backupViaVariable.status, 2, backupViaVariable.error)
    XCTAssertTrue(backupViaVariable.error.contains("(`vault container forget`)"), backupViaVariable.error)
    XCTAssertFalse(backupViaVariable.error.contains("give the command above"), backupViaVariable.error)
  }

  /// restore with its --keyfile inside the new home advised `vault keyfile move
  /// ~/.config/vault-keys/NAME.keys` (there is no vault to move a keyfile of yet) and a default
  /// path that ignored XDG_CONFIG_HOME. Found by an operator review. It now names the restore to
  /// run again and the keyfile path vault would use, and that restore works when pasted.
  func testRestoreWithItsKeyfileInsideTheHomeNamesTheRestoreAndTheRealDefault() throws {
    let backups = temporary.sub("backups")
    try FileManager.default.createDirectory(atPath: backups, withIntermediateDirectories: true)
    let passphrase = temporary.sub("pass phrase")
    XCTAssertTrue(FileManager.default.createFile(atPath: passphrase, contents: Data("a long passphrase\n".utf8)))
    XCTAssertEqual(chmod(passphrase, 0o600), 0)
    let written = try vault(["--home", home, "backup", "--to", backups, "--passphrase-file", passphrase])
    XCTAssertEqual(written.status, 0, written.error)
    let bundle = backups + "/" + (try XCTUnwrap(try FileManager.default.contentsOfDirectory(atPath: backups).first))
    let vaultID = try XCTUnwrap(try status()["vault_id"] as? String)
    let config = temporary.sub("config")
    let into = temporary.sub("new home")
    let restore = ["restore", bundle, "--into", into, "--store", "keyfile", "--passphrase-file", passphrase]
    let refused = try vault(
      restore + ["--keyfile", into + "/v.keys"], environment: environment(["XDG_CONFIG_HOME": config]))
    XCTAssertEqual(refused.status, 1, refused.error)
    let expected = config + "/vault-keys/\(vaultID).keys"
    let command = "vault restore \(bundle) --into '\(into)' --store keyfile --passphrase-file '\(passphrase)'"
    XCTAssertTrue(
      refused.error.contains("run `\(command)` without --keyfile: the keyfile then goes to \(expected)"), refused.error)
    XCTAssertFalse(refused.error.contains("keyfile move"), refused.error)
    let pasted = try Spawn.run(
      "/bin/sh", ["-c", command],
      environment: environment([
        "PATH": ((vaultBinary() as NSString).deletingLastPathComponent) + ":/usr/bin:/bin", "XDG_CONFIG_HOME": config,
      ]))
    XCTAssertEqual(pasted.status, 0, pasted.error)
    XCTAssertTrue(FileManager.default.fileExists(atPath: expected), pasted.outputText)
  }

  /// A flush to a server it could not reach printed only "delivered 0, retried 3, …" and exit 0
  /// (right: the pass ran), without saying that nothing went out or why. Found by an operator
  /// review. It now says so, by kind, and the exit stays 0.
  func testAFlushThatDeliversNothingSaysSoAndWhyByKind() throws {
    for _ in 0..<3 { XCTAssertEqual(try vault(["--home", home, "telemetry", "log", "a"]).status, 0) }
    let flush = ["--home", home, "telemetry", "flush", "--endpoint", "http://127.0.0.1:9/b"]
    let refused = try vault(flush)
    XCTAssertEqual(refused.status, 0, refused.error)
    XCTAssertTrue(
      refused.outputText.contains("\ndelivered 0 of 3 events: 3 retry later (server unreachable: "), refused.outputText)
    // The retry time is drawn with full jitter, 0–1 s after a first failure: it can come before
    // the next flush starts (CI saw it), and that flush then retries, as it should. Each retry
    // doubles the ceiling, so within a few flushes one finds the events waiting.
    let notDue = "\ndelivered 0 of 3 events: 3 not due yet (waiting for their retry time)\n"
    var again = ""
    for _ in 0..<6 where !again.hasSuffix(notDue) {
      let run = try vault(flush)
      XCTAssertEqual(run.status, 0, run.error)
      again = run.outputText
      XCTAssertTrue(
        again.hasSuffix(notDue) || again.contains("\ndelivered 0 of 3 events: 3 retry later (server unreachable: "),
        again)
    }
    XCTAssertTrue(again.hasSuffix(notDue), again)
  }

  /// `telemetry watch` printed "pass: delivered 0, retried 3, …" without saying that nothing
  /// went out or why (operator review); a pass that sent something now says so, as flush does.
  func testAWatchPassThatDeliversNothingSaysWhyByKind() throws {
    for _ in 0..<3 { XCTAssertEqual(try vault(["--home", home, "telemetry", "log", "a"]).status, 0) }
    // Its output goes to a file, read while it runs (the first pass runs at start).
    let log = temporary.sub("watch.out")
    let watch = try Spawn.start(
      "/bin/sh",
      [
        "-c", #"exec "$0" --home "$1" telemetry watch --endpoint http://127.0.0.1:9/b --interval 600 > "$2""#,
        vaultBinary(), home, log,
      ])
    let deadline = Date().addingTimeInterval(30)
    var output = ""
    while Date() < deadline, !output.contains("\npass: delivered 0 of") {
      Thread.sleep(forTimeInterval: 0.1)
      output = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
    }
    watch.kill(SIGTERM)
    _ = watch.finish()
    XCTAssertTrue(output.contains("\npass: delivered 0 of 3 events: 3 retry later (server unreachable: "), output)
  }

  func testShellWordsAreQuotedOnlyWhenTheyNeedIt() {
    XCTAssertEqual(ShellWord.quoted("/tmp/a_b.c/d:e@f%g+h=i,j-k"), "/tmp/a_b.c/d:e@f%g+h=i,j-k")
    XCTAssertEqual(ShellWord.quoted("/tmp/a b"), "'/tmp/a b'")
    XCTAssertEqual(ShellWord.quoted("/tmp/it's"), #"'/tmp/it'\''s'"#)
    XCTAssertEqual(ShellWord.quoted("$x;rm"), "'$x;rm'")
    XCTAssertEqual(ShellWord.quoted("~/k"), "'~/k'")
    XCTAssertEqual(ShellWord.quoted(""), "''")
    // A character a terminal sink escapes, or a backslash: ANSI-C quoted, each as an escape.
    XCTAssertEqual(ShellWord.quoted("/tmp/a\nb"), #"$'/tmp/a\x0ab'"#)
    XCTAssertEqual(ShellWord.quoted("a\u{1b}[2Jb"), #"$'a\x1b[2Jb'"#)
    XCTAssertEqual(ShellWord.quoted("a\tb"), #"$'a\x09b'"#)
    XCTAssertEqual(ShellWord.quoted("it's\n"), #"$'it\x27s\x0a'"#)
    XCTAssertEqual(ShellWord.quoted(#"a\b"#), #"$'a\x5cb'"#)
    XCTAssertEqual(ShellWord.quoted(#"/tmp/\u{a}"#), #"$'/tmp/\x5cu{a}'"#)
    XCTAssertEqual(ShellWord.quoted("x\u{202e}fdp"), #"$'x\u202efdp'"#)
    XCTAssertEqual(ShellWord.quoted("\u{85}\u{7f}\u{feff}"), #"$'\u0085\x7f\ufeff'"#)
  }

  /// A path with a newline, an escape or a bidi override was single-quoted, and the terminal sink
  /// then printed each as the text `\u{a}`: the pasted command named another path (even a real
  /// one whose name holds that text). Found by an outside review. The quoted word now passes
  /// through `Printable` unchanged, and bash reads it back as exactly the original bytes.
  func testAQuotedWordWithControlCharactersPrintsAsItselfAndPastesAsTheWord() throws {
    let hostile = [
      "/tmp/a\nb", "/tmp/\u{1b}]52;c;eA==\u{7}x", "a\tb", "it's", #"a\b"#, #"/tmp/\u{a}"#, #"\\u{a}"#,
      "invoice\u{202e}fdp.sqlite", "\u{85}\u{9b}31m", "z\u{200b}w\u{2066}", "\u{feff}'\\\n$x ;`rm`",
    ]
    for word in hostile {
      let quoted = ShellWord.quoted(word)
      XCTAssertEqual(Printable.escaped(quoted), quoted, "\(Array(word.unicodeScalars))")
      // bash writes \u as UTF-8 only in a UTF-8 locale.
      let printed = try Spawn.run(
        "/bin/bash", ["-c", "printf %s \(quoted)"], environment: environment(["LC_ALL": "C.UTF-8"]))
      XCTAssertEqual(printed.status, 0, printed.error)
      XCTAssertEqual(printed.output, Array(word.utf8), "\(quoted)")
    }
  }
}

private final class Answers: @unchecked Sendable {
  private var answers: [String]
  init(_ answers: [String]) { self.answers = answers }
  func next() -> String? { answers.isEmpty ? nil : answers.removeFirst() }
}

/// Fails every key store call after the first `storeKey` as a store that stopped answering.
private final class StoppedAfterStore: @unchecked Sendable {
  private let lock = NSLock()
  private var stored = false
  var reached: Bool { lock.withLock { stored } }

  func check(_ call: InterposedKeyStore.Call) throws {
    try lock.withLock {
      if stored { throw KeyStoreError.timedOut(seconds: 1, operation: "test") }
      if case .storeKey = call { stored = true }
    }
  }
}
