import Foundation
import VaultTestSupport
import XCTest

/// `seal` and `open` with files (IN, `-o OUT`) and armour, through the built binary (issue 13, item 2).
final class SealOpenFilesTests: XCTestCase {
  var temporary: TemporaryDirectory!
  var home: String { temporary.sub("home") }
  var work: String { temporary.sub("work") }

  override func setUpWithError() throws {
    temporary = TemporaryDirectory()
    try initKeyfileVault(home: home, keyfile: temporary.sub("keys/v.keys"))
    try FileManager.default.createDirectory(atPath: work, withIntermediateDirectories: false)
  }

  override func tearDown() { temporary = nil }

  private let secret = Array("Meet at the north gate at 06:40. Bring the ledger.".utf8)

  private func file(_ name: String, _ bytes: [UInt8]) throws -> String {
    let path = work + "/" + name
    try Data(bytes).write(to: URL(fileURLWithPath: path))
    return path
  }

  private func contents(_ path: String) throws -> [UInt8] { Array(try Data(contentsOf: URL(fileURLWithPath: path))) }

  private func listing() throws -> [String] { try FileManager.default.contentsOfDirectory(atPath: work).sorted() }

  private func mode(_ path: String) throws -> Int {
    (try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as! NSNumber).intValue
  }

  /// Where the file system has no O_TMPFILE, `-o` writes a named temporary file, links it to OUT
  /// and unlinks the temporary. An unlink that failed (EIO) was not looked at: `open -o` exited 0
  /// and left `.OUT.vault-XXXXXX`, a second name for the plaintext that outlived OUT once it was
  /// deleted. Now the command says so. (strace fails the O_TMPFILE open, then every unlink.)
  func testATemporaryThatCannotBeRemovedIsReportedNotLeftSilently() throws {
    let sealed = try vault(["--home", home, "seal", "--context", "c", "-o", work + "/env.bin"], input: secret)
    XCTAssertEqual(sealed.status, 0, sealed.error)
    let out = work + "/plain.txt"
    let open = ["--home", home, "open", "--context", "c", "-o", out, work + "/env.bin"]
    let anonymous = try XCTUnwrap(try openatIndex(matching: "O_TMPFILE", open), "-o opens its file with O_TMPFILE")
    unlink(out)
    let opened = try vaultFailing(
      "unlink,unlinkat", with: "EIO", when: "1+", also: ["openat:error=EOPNOTSUPP:when=\(anonymous)"], open)
    XCTAssertEqual(opened.status, 1, opened.error)
    XCTAssertEqual(try contents(out), secret, "the output itself is whole")
    let names = try listing()
    let left = names.filter { $0.hasPrefix(".plain.txt.vault-") }
    XCTAssertEqual(left.count, 1, "the injected failure left the temporary: \(names)")
    XCTAssertTrue(
      opened.error.hasPrefix("Error: wrote \(out), but could not remove \(work)/\(left.first ?? "?")"), opened.error)
    XCTAssertTrue(opened.error.contains("Input/output error"), opened.error)
  }

  func testFileInFileOutRoundTripsAtomicallyWithMode0600() throws {
    let plain = try file("plain.txt", secret)
    let sealed = try vault(["--home", home, "seal", "--context", "c", "-o", work + "/env.bin", plain])
    XCTAssertEqual(sealed.status, 0, sealed.error)
    XCTAssertEqual(sealed.output, [], "nothing on standard output with -o")
    XCTAssertEqual(try contents(work + "/env.bin").count, secret.count + 89)
    XCTAssertEqual(try mode(work + "/env.bin"), 0o600)

    let opened = try vault(["--home", home, "open", "--context", "c", "-o", work + "/out.txt", work + "/env.bin"])
    XCTAssertEqual(opened.status, 0, opened.error)
    XCTAssertEqual(try contents(work + "/out.txt"), secret)
    XCTAssertEqual(try mode(work + "/out.txt"), 0o600)
    XCTAssertEqual(try listing(), ["env.bin", "out.txt", "plain.txt"], "no temporary file is left")

    let toStdout = try vault(["--home", home, "open", "--context", "c", work + "/env.bin"])
    XCTAssertEqual(toStdout.output, secret)
    let dash = try vault(["--home", home, "seal", "--context", "c", "-"], input: secret)
    XCTAssertEqual(dash.status, 0, dash.error)
    XCTAssertEqual(try vault(["--home", home, "open", "--context", "c"], input: dash.output).output, secret)
  }

  func testFailedOpenWritesNoOutputAndLeavesNoTemporaryFile() throws {
    let envelope = try file("env.bin", try vault(["--home", home, "seal", "--context", "c"], input: secret).output)
    let opened = try vault(["--home", home, "open", "--context", "wrong", "-o", work + "/out.txt", envelope])
    XCTAssertEqual(opened.status, 1, opened.error)
    XCTAssertEqual(try listing(), ["env.bin"])
  }

  /// `open -o OUT` and `seal -o OUT` killed at each write, fsync, link and unlink (strace): OUT
  /// is absent or whole, with one name, and nothing else in its directory holds the plaintext; run
  /// again, the command writes OUT or says it exists, and a sealed OUT re-seals (review: a kill
  /// before the link left the plaintext in a hidden `.OUT.vault-XXXXXX` that no rerun removed, one
  /// after it left that second name on OUT, and `reseal OUT` then refused it as hard-linked).
  func testSealAndOpenKilledAtEachStepLeaveNoOtherNameForTheirOutput() throws {
    let plain = try file("plain.txt", secret)
    let envelope = try file("env.bin", try vault(["--home", home, "seal", "--context", "c"], input: secret).output)
    var kills = 0
    for (command, input, expected) in [("open", envelope, secret), ("seal", plain, nil)] {
      for calls in ["write", "fsync,fdatasync", "link,linkat", "unlink,unlinkat"] {
        for step in 1...10 {
          let out = work + "/\(command)-\(calls.prefix(4))-\(step)"
          let arguments = ["--home", home, command, "--context", "c", "-o", out, input]
          let killed = try vaultKilled(at: calls, step: step, arguments)
          let label = "\(command) \(calls) #\(step)"
          XCTAssertTrue([0, 128 + SIGKILL].contains(killed.status), "\(label): \(killed.error)")
          if killed.status == 128 + SIGKILL { kills += 1 }
          let names = try listing().filter { $0 != "plain.txt" && $0 != "env.bin" }
          XCTAssertTrue(names.allSatisfy { "/" + $0 == out.dropFirst(work.count) }, "\(label): \(names)")
          for name in try listing() where name != "plain.txt" && "/" + name != out.dropFirst(work.count) {
            XCTAssertNil(Data(try contents(work + "/" + name)).range(of: Data(secret)), "\(label): \(name)")
          }
          let written = FileManager.default.fileExists(atPath: out)
          if written { XCTAssertEqual(try contents(out).count, secret.count + (expected == nil ? 89 : 0), label) }
          let again = try vault(arguments)
          if written {
            XCTAssertEqual(again.status, 2, label)
            XCTAssertTrue(again.error.contains("already exists"), "\(label): \(again.error)")
          } else {
            XCTAssertEqual(again.status, 0, "\(label): \(again.error)")
          }
          var info = stat()
          XCTAssertEqual(stat(out, &info), 0, label)
          XCTAssertEqual(info.st_nlink, 1, "\(label): OUT has no other name")
          if let expected {
            XCTAssertEqual(try contents(out), expected, label)
          } else {
            let resealed = try vault(["--home", home, "reseal", "--context", "c", out])
            XCTAssertEqual(resealed.status, 0, "\(label): \(resealed.error)")
          }
          try FileManager.default.removeItem(atPath: out)
          if killed.status == 0 { break }
        }
      }
    }
    XCTAssertGreaterThan(kills, 5)
  }

  func testArmourRoundTripsThroughStandardInputAndFile() throws {
    let armored = try vault(["--home", home, "seal", "--context", "c", "--armor"], input: secret)
    XCTAssertEqual(armored.status, 0, armored.error)
    let text = armored.outputText
    XCTAssertTrue(text.hasPrefix("-----BEGIN VAULT ENVELOPE-----\n"), text)
    XCTAssertTrue(text.hasSuffix("\n-----END VAULT ENVELOPE-----\n"), text)
    let body = text.split(separator: "\n").dropFirst().dropLast()
    XCTAssertTrue(body.dropLast().allSatisfy { $0.count == 64 } && body.last!.count <= 64, text)
    XCTAssertEqual(Data(base64Encoded: body.joined())?.count, secret.count + 89)

    let viaStdin = try vault(["--home", home, "open", "--context", "c"], input: armored.output)
    XCTAssertEqual(viaStdin.status, 0, viaStdin.error)
    XCTAssertEqual(viaStdin.output, secret)
    let indented = try file("env.asc", Array("\n  \t".utf8) + armored.output)
    let viaFile = try vault(["--home", home, "open", "--context", "c", indented])
    XCTAssertEqual(viaFile.status, 0, viaFile.error)
    XCTAssertEqual(viaFile.output, secret, "leading whitespace is allowed")

    let plain = try file("plain.txt", secret)
    let toFile = try vault(["--home", home, "seal", "--context", "c", "--armor", "-o", work + "/out.asc", plain])
    XCTAssertEqual(toFile.status, 0, toFile.error)
    XCTAssertEqual(try vault(["--home", home, "open", "--context", "c", work + "/out.asc"]).output, secret)
  }

  func testDamagedArmourIsAnErrorAndWritesNothing() throws {
    let armored = try vault(["--home", home, "seal", "--context", "c", "--armor"], input: secret).outputText
    var lines = armored.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
    let truncated = lines.dropLast(2).joined(separator: "\n") + "\n"
    lines[1] = "!" + lines[1].dropFirst()
    let badCharacter = lines.joined(separator: "\n")
    let badLength = armored.replacingOccurrences(of: "=\n-----END", with: "\n-----END")
      .replacingOccurrences(of: "==\n-----END", with: "\n-----END")
    let trailing = armored + "more\n"
    for (name, damaged, why) in [
      ("truncated", truncated, "no END line"), ("character", badCharacter, "line 2 is not base64"),
      ("length", badLength, "the base64 between BEGIN and END does not decode"),
      ("trailing", trailing, "text after the END line"),
    ] {
      let viaStdin = try vault(["--home", home, "open", "--context", "c"], input: Array(damaged.utf8))
      XCTAssertEqual(viaStdin.status, 1, name)
      XCTAssertEqual(viaStdin.output, [], name)
      XCTAssertTrue(
        viaStdin.error.contains("Error: the armoured envelope is damaged: \(why)"), name + ": " + viaStdin.error)
      let input = try file("\(name).asc", Array(damaged.utf8))
      let viaFile = try vault(["--home", home, "open", "--context", "c", "-o", work + "/\(name).out", input])
      XCTAssertEqual(viaFile.status, 1, name)
      XCTAssertFalse(FileManager.default.fileExists(atPath: work + "/\(name).out"), name)
    }
    XCTAssertFalse(try listing().contains { $0.hasPrefix(".") }, "no temporary file is left")
  }

  func testOutputNamingTheInputIsAUsageError() throws {
    let plain = try file("plain.txt", secret)
    for command in ["seal", "open"] {
      let refused = try vault(["--home", home, command, "--context", "c", "-o", plain, plain])
      XCTAssertEqual(refused.status, 64, refused.error)
      XCTAssertTrue(refused.error.contains("Error: -o names the input file"), refused.error)
      XCTAssertEqual(try contents(plain), secret)
    }
    try FileManager.default.createSymbolicLink(atPath: work + "/link", withDestinationPath: plain)
    let viaLink = try vault(["--home", home, "seal", "--context", "c", "-o", work + "/link", plain])
    XCTAssertEqual(viaLink.status, 64, "the same file by device and inode, whatever the name")
    // `-o -` is not standard output (IN's `-` is standard input): refused, no file named "-".
    let dash = FileManager.default.currentDirectoryPath + "/-"
    XCTAssertFalse(FileManager.default.fileExists(atPath: dash))
    for command in ["seal", "open"] {
      let refused = try vault(["--home", home, command, "--context", "c", "-o", "-", plain])
      XCTAssertEqual(refused.status, 64, refused.error)
      XCTAssertTrue(refused.error.contains("leave out -o to write there"), refused.error)
    }
    XCTAssertFalse(FileManager.default.fileExists(atPath: dash))
  }

  func testAnExistingOutputIsNeverOverwritten() throws {
    let plain = try file("plain.txt", secret)
    let existing = try file("env.bin", Array("keep me".utf8))
    let refused = try vault(["--home", home, "seal", "--context", "c", "-o", existing, plain])
    XCTAssertEqual(refused.status, 2, refused.error)
    XCTAssertTrue(refused.error.contains("already exists; vault never overwrites a file with -o"), refused.error)
    XCTAssertEqual(try contents(existing), Array("keep me".utf8))
    try FileManager.default.createSymbolicLink(atPath: work + "/dangling", withDestinationPath: work + "/nowhere")
    let dangling = try vault(["--home", home, "seal", "--context", "c", "-o", work + "/dangling", plain])
    XCTAssertEqual(dangling.status, 2, "a dangling link is not replaced or followed")
    XCTAssertFalse(FileManager.default.fileExists(atPath: work + "/nowhere"))
  }

  func testInputThatIsNotARegularFileIsRefused() throws {
    let fifo = work + "/fifo"
    XCTAssertEqual(mkfifo(fifo, 0o600), 0)
    for (input, kind) in [(fifo, "a FIFO"), (work, "a directory"), ("/dev/null", "a device")] {
      let refused = try vault(["--home", home, "seal", "--context", "c", input])
      XCTAssertEqual(refused.status, 2, refused.error)
      XCTAssertTrue(refused.error.contains("Error: \(input) is \(kind), not a regular file"), refused.error)
      XCTAssertEqual(refused.output, [])
    }
    let missing = try vault(["--home", home, "open", "--context", "c", work + "/missing"])
    XCTAssertEqual(missing.status, 2, missing.error)
    XCTAssertTrue(missing.error.contains("could not read \(work)/missing: No such file or directory"), missing.error)
    let two = try vault(["--home", home, "seal", "--context", "c", "a", "b"])
    XCTAssertEqual(two.status, 64)
    XCTAssertTrue(two.error.hasPrefix("Error: unexpected argument 'b'\n"), two.error)
  }

  func testInputFileOverTheLimitIsRefusedBeforeItIsRead() throws {
    let big = work + "/big"
    XCTAssertTrue(FileManager.default.createFile(atPath: big, contents: nil))
    XCTAssertEqual(truncate(big, (1 << 31) + 1), 0, "a sparse 2 GiB file")
    for command in ["seal", "open"] {
      let started = Date()
      let refused = try vault(["--home", home, command, "--context", "c", "-o", work + "/out", big])
      XCTAssertEqual(refused.status, 2, refused.error)
      XCTAssertTrue(refused.error.contains("larger than 1 GiB"), refused.error)
      XCTAssertLessThan(Date().timeIntervalSince(started), 5, "refused without reading 2 GiB")
    }
    XCTAssertEqual(try listing(), ["big"])
  }

  /// Runs `arguments` with a pseudo-terminal as standard output (script(1)); stdin from `input`.
  private func onTerminal(_ arguments: [String], input: String) throws -> Spawned {
    let quoted = ([vaultBinary()] + arguments).map { "'\($0)'" }.joined(separator: " ")
    return try Spawn.run("/usr/bin/script", ["-qec", "\(quoted) < '\(input)'", "/dev/null"])
  }

  func testBinaryEnvelopeToATerminalIsRefusedWithAHint() throws {
    let plain = try file("plain.txt", secret)
    let refused = try onTerminal(["--home", home, "seal", "--context", "c"], input: plain)
    XCTAssertEqual(refused.status, 64, refused.outputText)
    XCTAssertTrue(
      refused.outputText.contains("refusing to write a binary envelope to a terminal; use -o FILE, or --armor"),
      refused.outputText)
    let armored = try onTerminal(["--home", home, "seal", "--context", "c", "--armor"], input: plain)
    XCTAssertEqual(armored.status, 0, armored.outputText)
    XCTAssertTrue(armored.outputText.contains("-----BEGIN VAULT ENVELOPE-----"), armored.outputText)
    let envelope = try file("env.bin", try vault(["--home", home, "seal", "--context", "c"], input: secret).output)
    let opened = try onTerminal(["--home", home, "open", "--context", "c"], input: envelope)
    XCTAssertEqual(opened.status, 0, opened.outputText)
    XCTAssertTrue(opened.outputText.contains("north gate"), "plaintext to a terminal is what was asked for")
  }
}
