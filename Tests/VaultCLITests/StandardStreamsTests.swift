import Foundation
import VaultTestSupport
import XCTest

/// Runs `script` with /bin/sh, so a test can close or redirect the streams and set limits the way
/// a user's shell would. `$VAULT`, `$MEMO` and `$HOME_DIR` name the binaries and the vault home.
func shell(_ script: String, input: [UInt8] = [], home: String, extra: [String: String?] = [:]) throws -> Spawned {
  var changes: [String: String?] = [
    "VAULT": vaultBinary(), "MEMO": (vaultBinary() as NSString).deletingLastPathComponent + "/memo",
    "HOME_DIR": home, "VAULT_HOME": home,
  ]
  for (key, value) in extra { changes[key] = value }
  return try Spawn.run("/bin/sh", ["-c", script], input: input, environment: environment(changes))
}

/// A process trapped (SIGILL, SIGTRAP, SIGABRT, SIGSEGV …) rather than exiting with a code.
func assertNoTrap(_ run: Spawned, _ what: String, file: StaticString = #filePath, line: UInt = #line) {
  XCTAssertLessThan(
    run.status, 128, "\(what) ended by signal \(run.status - 128): \(run.error)", file: file, line: line)
  XCTAssertFalse(run.error.contains("Fatal error"), "\(what): \(run.error)", file: file, line: line)
}

/// Standard streams that are not what a command expects give the documented exit code and one
/// clear error, never a Foundation exception trap (issue 8, item 13).
final class StandardStreamsTests: XCTestCase {
  var temporary: TemporaryDirectory!
  var home: String { temporary.sub("home") }

  override func setUpWithError() throws {
    temporary = TemporaryDirectory()
    try initKeyfileVault(home: home, keyfile: temporary.sub("keys/v.keys"))
  }

  override func tearDown() { temporary = nil }

  /// The harness itself: input written to a child that exits without reading it (more than a pipe
  /// holds, so the write must fail) is EPIPE, not SIGPIPE ending the whole test run.
  func testAChildThatExitsBeforeReadingItsInputDoesNotEndTheTestRun() throws {
    let run = try Spawn.run("/bin/true", [], input: [UInt8](repeating: 0x61, count: 1 << 20))
    XCTAssertEqual(run.status, 0)
  }

  func testDirectoryAsStandardInputIsCouldNotRun() throws {
    for command in ["seal", "open"] {
      let run = try shell("exec \"$VAULT\" \(command) --context c < \"$HOME_DIR\"", home: home)
      assertNoTrap(run, command)
      XCTAssertEqual(run.status, 2, run.error)
      XCTAssertTrue(run.error.hasPrefix("Error: standard input is a directory"), run.error)
      XCTAssertTrue(run.output.isEmpty)
    }
    let memo = try shell("exec \"$MEMO\" send < \"$HOME_DIR\"", home: home)
    assertNoTrap(memo, "memo send")
    XCTAssertEqual(memo.status, 2, memo.error)
    XCTAssertTrue(memo.error.hasPrefix("Error: standard input is a directory"), memo.error)
  }

  func testClosedStandardInputIsCouldNotRun() throws {
    for script in ["exec \"$VAULT\" seal --context c <&-", "exec \"$VAULT\" queue put --queue q <&-"] {
      let run = try shell(script, home: home)
      assertNoTrap(run, script)
      XCTAssertEqual(run.status, 2, run.error)
      XCTAssertTrue(run.error.hasPrefix("Error: standard input is closed"), run.error)
    }
    let memo = try shell("exec \"$MEMO\" send <&-", home: home)
    assertNoTrap(memo, "memo send")
    XCTAssertEqual(memo.status, 2, memo.error)
    XCTAssertTrue(memo.error.hasPrefix("Error: standard input is closed"), memo.error)
  }

  /// A stdin opened for writing only (`0>FILE`) or a stdout opened for reading only (`1<FILE`)
  /// is open: read(2) and write(2) fail with EBADF, which is not "closed" (nor is its hint).
  func testStreamsOpenTheWrongWayAreNotCalledClosed() throws {
    let file = temporary.sub("write-only")
    for script in [
      "exec \"$VAULT\" seal --context c 0>\"$FILE\"", "exec \"$VAULT\" queue put --queue q 0>\"$FILE\"",
      "exec \"$MEMO\" send 0>\"$FILE\"",
    ] {
      let run = try shell(script, home: home, extra: ["FILE": file])
      assertNoTrap(run, script)
      XCTAssertEqual(run.status, 2, "\(script): \(run.error)")
      XCTAssertTrue(run.error.hasPrefix("Error: standard input is not open for reading"), "\(script): \(run.error)")
      XCTAssertFalse(run.error.contains("closed"), "\(script): \(run.error)")
    }
    for script in [
      "exec \"$VAULT\" seal --context c 1</dev/null", "exec \"$VAULT\" status 1</dev/null",
      "exec \"$MEMO\" send 'a memo' 1</dev/null",
    ] {
      let run = try shell(script, input: Array("a record".utf8), home: home)
      assertNoTrap(run, script)
      XCTAssertEqual(run.status, 1, "\(script): \(run.error)")
      XCTAssertTrue(
        run.error.hasPrefix("Error: could not write to standard output: it is not open for writing"),
        "\(script): \(run.error)")
      XCTAssertFalse(run.error.contains("closed"), "\(script): \(run.error)")
    }
  }

  /// Under `ulimit -f`, a write past the limit fails with EFBIG and is reported like any failed
  /// write (exit 1, `Error: …`); SIGXFSZ used to kill vault and memo without a word (exit 153).
  func testFileSizeLimitIsAnErrorNotADeathBySignal() throws {
    // ThreadSanitizer's own files (its trace and report mappings) hit the limit first and the
    // process dies of SIGBUS before vault's write is reached.
    try XCTSkipIf(Sanitizer.current == .thread, "ThreadSanitizer dies of SIGBUS under ulimit -f")
    // The first external seal under a key version rewrites the keyfile (SecureFile's path).
    let keyfile = try shell(
      "ulimit -f 1 && exec \"$VAULT\" seal --context c > /dev/null", input: Array("a record".utf8), home: home)
    assertNoTrap(keyfile, "vault seal under ulimit -f 1")
    XCTAssertEqual(keyfile.status, 1, keyfile.error)
    XCTAssertTrue(keyfile.error.hasPrefix("Error: write "), keyfile.error)
    XCTAssertTrue(keyfile.error.hasSuffix("failed: File too large\n"), keyfile.error)
    // sh's ulimit -f counts 512-byte blocks: 2048 bytes hold the keyfile, not the envelope.
    let output = temporary.sub("sealed")
    let sealed = try shell(
      "ulimit -f 4 && exec \"$VAULT\" seal --context c > \"$OUTPUT\"", input: [UInt8](repeating: 0x61, count: 5000),
      home: home, extra: ["OUTPUT": output])
    assertNoTrap(sealed, "vault seal under ulimit -f 4")
    XCTAssertEqual(sealed.status, 1, sealed.error)
    XCTAssertEqual(sealed.error, "Error: could not write to standard output: File too large\n")
    let memo = try shell(
      "ulimit -f 8 && exec \"$MEMO\" send", input: Array(String(repeating: "a memo ", count: 6000).utf8), home: home)
    assertNoTrap(memo, "memo send under ulimit -f 8")
    XCTAssertEqual(memo.status, 1, memo.error)
    XCTAssertTrue(memo.error.hasPrefix("Error: "), memo.error)
    XCTAssertTrue(memo.error.contains("file-size limit"), memo.error)
  }

  func testFullStandardOutputFailsWithTheReason() throws {
    for script in [
      "exec \"$VAULT\" seal --context c > /dev/full", "exec \"$VAULT\" status > /dev/full",
      "exec \"$VAULT\" --version > /dev/full", "exec \"$VAULT\" help seal > /dev/full",
    ] {
      let run = try shell(script, input: Array("a record".utf8), home: home)
      assertNoTrap(run, script)
      XCTAssertEqual(run.status, 1, "\(script): \(run.error)")
      XCTAssertEqual(
        run.error, "Error: could not write to standard output: No space left on device\n", script)
    }
    let memo = try shell("exec \"$MEMO\" send 'a memo' > /dev/full", home: home)
    assertNoTrap(memo, "memo send")
    XCTAssertEqual(memo.status, 1, memo.error)
    XCTAssertTrue(memo.error.contains("could not write to standard output: No space left on device"), memo.error)
    XCTAssertTrue(memo.error.contains("the memo is saved"), "the user learns the memo is safe: \(memo.error)")
  }

  /// `scan` exits 1 for findings: a report it could not write is exit 2 (it told nothing), clean
  /// tree or not, text or JSON, so a script does not read "findings" or "clean" into it.
  func testAScanWhoseReportCannotBeWrittenExitsTwo() throws {
    let tree = home + "-tree"
    try FileManager.default.createDirectory(atPath: tree, withIntermediateDirectories: true)
    try Data("plain".utf8).write(to: URL(fileURLWithPath: tree + "/a.txt"))
    for canary in ["", " --canary plain"] {
      for json in ["", " --json"] {
        let script = "exec \"$VAULT\" scan \"$TREE\"\(canary)\(json) > /dev/full"
        let run = try shell(script, home: home, extra: ["TREE": tree])
        assertNoTrap(run, script)
        XCTAssertEqual(run.status, 2, "\(script): \(run.error)")
        XCTAssertTrue(
          run.error.hasSuffix("Error: could not write to standard output: No space left on device\n"), run.error)
      }
    }
  }

  func testClosedStandardOutputFailsAndNeverWritesIntoAnotherFile() throws {
    for script in ["exec \"$VAULT\" seal --context c >&-", "exec \"$VAULT\" queue put --queue q >&-"] {
      let run = try shell(script, input: Array("canary-closed-stdout".utf8), home: home)
      assertNoTrap(run, script)
      XCTAssertEqual(run.status, 1, "\(script): \(run.error)")
      XCTAssertTrue(run.error.hasPrefix("Error: could not write to standard output: it is closed"), run.error)
    }
    // With descriptor 1 closed, the next file opened (the database, the keyfile, a lock) would get
    // it and receive what was meant for standard output.
    XCTAssertFalse(directoryContains(home, "stored "), "queue put's report did not land in a vault file")
    let memo = try shell("exec \"$MEMO\" send 'a memo' >&-", home: home)
    assertNoTrap(memo, "memo send")
    XCTAssertEqual(memo.status, 1, memo.error)
  }

  func testBrokenPipeOnStandardOutputFailsCleanly() throws {
    let record = [UInt8](repeating: 0x41, count: 1 << 20)
    let sealed = try vault(["--home", home, "seal", "--context", "c"], input: record)
    XCTAssertEqual(sealed.status, 0, sealed.error)
    try Data(sealed.output).write(to: URL(fileURLWithPath: temporary.sub("envelope")))
    // head exits after one byte; vault's next write gets EPIPE (SIGPIPE is ignored, not fatal).
    let errors = temporary.sub("errors")
    let piped = try shell(
      "{ \"$VAULT\" open --context c < \"$ENVELOPE\" 2>\"$ERRORS\"; echo \"status $?\" >>\"$ERRORS\"; } | head -c 1 >/dev/null",
      home: home, extra: ["ENVELOPE": temporary.sub("envelope"), "ERRORS": errors])
    XCTAssertEqual(piped.status, 0, piped.error)
    XCTAssertEqual(
      try String(contentsOfFile: errors, encoding: .utf8),
      "Error: could not write to standard output: Broken pipe\nstatus 1\n")
  }

  func testClosedStandardErrorStillGivesTheExitCode() throws {
    let run = try shell("exec \"$VAULT\" seal --context c < \"$HOME_DIR\" 2>&-", home: home)
    assertNoTrap(run, "seal with stderr closed")
    XCTAssertEqual(run.status, 2)
    let memo = try shell("exec \"$MEMO\" send < \"$HOME_DIR\" 2>&-", home: home)
    assertNoTrap(memo, "memo send with stderr closed")
    XCTAssertEqual(memo.status, 2)
  }

  /// `queue put` reads no more than a record may hold under its 20 MB cap (an outside review: it
  /// read up to 1 GiB, 1.09 GB resident, only to refuse it): a larger file is refused before it is
  /// read, a larger stream one chunk past the limit, and nothing is stored.
  func testAQueuePutOverTheCapIsRefusedBeforeItIsRead() throws {
    try XCTSkipIf(Sanitizer.current != nil, "a sanitizer's shadow memory does not fit under ulimit -v")
    let big = temporary.sub("big-put")
    XCTAssertTrue(FileManager.default.createFile(atPath: big, contents: nil))
    XCTAssertEqual(truncate(big, 1 << 30), 0, "a sparse 1 GiB file")
    // Under 250 MB of address space, which reading the 300 MB or the 1 GiB offered would pass.
    let file = try shell(
      "ulimit -v 250000; exec \"$VAULT\" queue put --queue q < \"$BIG\"", home: home, extra: ["BIG": big])
    assertNoTrap(file, "queue put of a file")
    XCTAssertEqual(file.status, 2, file.error)
    XCTAssertTrue(file.error.contains("larger than the 19999911 bytes a record may hold"), file.error)
    let piped = try shell(
      "head -c 300000000 /dev/zero | (ulimit -v 250000; exec \"$VAULT\" queue put --queue q); echo \"status $?\"",
      home: home)
    XCTAssertEqual(piped.outputText, "status 2\n", piped.error)
    XCTAssertTrue(piped.error.contains("larger than the 19999911 bytes a record may hold"), piped.error)
    XCTAssertEqual(try vault(["--home", home, "queue", "stats", "--json"]).status, 0)
    XCTAssertTrue(
      try vault(["--home", home, "queue", "stats", "--json"]).outputText.contains("\"total\" : 0"),
      "nothing stored")
  }

  /// seal and open take at most 1 GiB (stated in their help and the README): larger input is
  /// refused before it is read into memory, whatever kind of file it comes from.
  func testRecordsOverTheStatedLimitAreRefused() throws {
    let big = temporary.sub("big")
    XCTAssertTrue(FileManager.default.createFile(atPath: big, contents: nil))
    XCTAssertEqual(truncate(big, (1 << 31) + 1), 0, "a sparse 2 GiB file")
    for command in ["seal", "open"] {
      let started = Date()
      let run = try shell(
        "exec \"$VAULT\" \(command) --context c < \"$BIG\" > /dev/null", home: home, extra: ["BIG": big])
      assertNoTrap(run, command)
      XCTAssertEqual(run.status, 2, run.error)
      XCTAssertTrue(run.error.contains("larger than 1 GiB"), run.error)
      XCTAssertLessThan(Date().timeIntervalSince(started), 5, "refused without reading 2 GiB")
    }
    // From a pipe the size is unknown: reading stops one byte past the limit.
    let piped = try shell(
      "head -c 1073741825 /dev/zero | \"$VAULT\" seal --context c > /dev/null; echo \"status $?\"", home: home)
    XCTAssertEqual(piped.outputText, "status 2\n", piped.error)
    XCTAssertTrue(piped.error.contains("larger than 1 GiB"), piped.error)
    XCTAssertTrue(try vault(["help", "seal"]).outputText.contains("at most 1 GiB"))
    XCTAssertTrue(try vault(["help", "open"]).outputText.contains("at most 1 GiB"))
  }

  func testSecretServiceTimeoutMustBeASaneNumberOfSeconds() throws {
    for value in ["inf", "-inf", "nan", "1e300", "1e9", "-1", "0", "0.01", "5000", "abc", "5s", " 5"] {
      for command in [["doctor"], ["init", "--store", "auto"], ["status"]] {
        let run = try vault(
          ["--home", temporary.sub("fresh")] + command,
          environment: environment(["VAULT_SECRET_SERVICE_TIMEOUT": value]))
        assertNoTrap(run, "\(value) \(command)")
        XCTAssertEqual(run.status, 64, "\(value) \(command): \(run.error)")
        XCTAssertTrue(
          run.error.hasPrefix(
            "Error: VAULT_SECRET_SERVICE_TIMEOUT must be a number of seconds from 0.1 to 3600 (got '\(value)')"),
          run.error)
      }
    }
    for value in ["0.1", "2.5", "3600", ""] {
      let run = try vault(
        ["--home", home, "status"], environment: environment(["VAULT_SECRET_SERVICE_TIMEOUT": value]))
      XCTAssertEqual(run.status, 0, "\(value): \(run.error)")
    }
  }

  func testTelemetryIntervalMustBeAFiniteNumberOfSeconds() throws {
    for value in ["inf", "1e300", "nan", "abc", "0", "-5"] {
      let run = try shell(
        "exec timeout -s KILL 20 \"$VAULT\" telemetry watch --endpoint http://127.0.0.1:9/ --interval \"$INTERVAL\"",
        home: home, extra: ["INTERVAL": value])
      assertNoTrap(run, value)
      XCTAssertEqual(run.status, 64, "\(value): \(run.error)")
      XCTAssertTrue(
        run.error.hasPrefix("Error: --interval must be a number of seconds from 0.1 to 86400 (got '\(value)')"),
        run.error)
    }
  }
}
