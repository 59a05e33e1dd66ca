import Foundation
import VaultTestSupport
import XCTest

@testable import VaultCLI

/// Issue 13, item 6: `vault reseal` moves `vault seal` envelope files to the active version in
/// place, and `vault unpin` releases the old version so rotation retires it (the built binary).
final class ResealCLITests: XCTestCase {
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

  private func contents(_ path: String) throws -> [UInt8] { Array(try Data(contentsOf: URL(fileURLWithPath: path))) }

  private func listing() throws -> [String] { try FileManager.default.contentsOfDirectory(atPath: work).sorted() }

  private func mode(_ path: String) throws -> Int {
    (try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as! NSNumber).intValue
  }

  /// Seals `secret` under `context` into a new file in the work directory.
  private func sealed(_ name: String, context: String = "c", armor: Bool = false) throws -> String {
    let path = work + "/" + name
    let run = try vault(
      ["--home", home, "seal", "--context", context, "-o", path] + (armor ? ["--armor"] : []), input: secret)
    XCTAssertEqual(run.status, 0, run.error)
    return path
  }

  /// The key version in a binary envelope's header (bytes 13..<17).
  private func headerVersion(_ path: String) throws -> UInt32 {
    try contents(path)[13..<17].reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
  }

  private func json(_ run: Spawned) throws -> [String: Any] {
    try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(run.output)) as? [String: Any], run.outputText)
  }

  private func rotate() throws -> [String: Any] {
    let run = try vault(["--home", home, "rotate", "--json"])
    XCTAssertEqual(run.status, 0, run.error)
    return try json(run)
  }

  func testResealThenUnpinLetsRotationRetireTheOldVersionAndTheFilesStillOpen() throws {
    let binary = try sealed("a.bin")
    let armored = try sealed("b.asc", armor: true)
    XCTAssertEqual(chmod(binary, 0o640), 0)
    let first = try rotate()
    XCTAssertEqual(first["kept_versions"] as? [Int], [1], "v1 is kept for the seal envelopes")
    let status = try vault(["--home", home, "status"]).outputText
    XCTAssertTrue(status.contains("(vault reseal), then release it (vault unpin 1)"), status)

    let resealed = try vault(["--home", home, "reseal", "--context", "c", binary, armored])
    XCTAssertEqual(resealed.status, 0, resealed.error)
    XCTAssertEqual(
      resealed.outputText, "resealed \(binary): version 1 -> 2\nresealed \(armored): version 1 -> 2\n")
    XCTAssertEqual(try headerVersion(binary), 2)
    XCTAssertEqual(try mode(binary), 0o640, "the original permission bits are kept")
    XCTAssertEqual(try mode(armored), 0o600)
    let armour = String(decoding: try contents(armored), as: UTF8.self)
    XCTAssertTrue(armour.hasPrefix("-----BEGIN VAULT ENVELOPE-----\n"), "armoured stays armoured: \(armour)")
    XCTAssertEqual(try listing(), ["a.bin", "b.asc"], "no temporary file is left")

    let binaryBytes = try contents(binary)
    let again = try vault(["--home", home, "reseal", "--context", "c", binary])
    XCTAssertEqual(again.status, 0, again.error)
    XCTAssertEqual(again.outputText, "already current \(binary) (version 2)\n")
    XCTAssertEqual(try contents(binary), binaryBytes, "a current file is not rewritten")

    let refused = try vault(["--home", home, "unpin", "1"])
    XCTAssertEqual(refused.status, 1, "no terminal and no --yes")
    XCTAssertTrue(refused.error.contains("rerun with --yes"), refused.error)
    let pins = try json(try vault(["--home", home, "status", "--json"]))["external_seal_versions"] as? [Int]
    XCTAssertEqual(pins?.sorted(), [1, 2], "nothing was released")

    let released = try vault(["--home", home, "unpin", "1", "--yes"])
    XCTAssertEqual(released.status, 0, released.error)
    XCTAssertEqual(
      released.outputText,
      "version 1 is no longer kept for 'vault seal' envelopes; the next 'vault rotate' retires it unless a "
        + "container still holds records under it\n")

    let second = try rotate()
    XCTAssertEqual(second["retired"] as? [Int], [1])
    for path in [binary, armored] {
      let opened = try vault(["--home", home, "open", "--context", "c", path])
      XCTAssertEqual(opened.status, 0, opened.error)
      XCTAssertEqual(opened.output, secret)
    }
  }

  /// `reseal FILE` killed at each write, fsync, link and rename (strace): FILE opens (old or new
  /// envelope) and has one name; nothing is left beside it unless the kill fell between the link
  /// and the rename, and then only the new envelope; a rerun finishes the job (review: the
  /// temporary was a named `.FILE.vault-XXXXXX` from its creation, so a kill while it was written
  /// or flushed left it behind).
  func testResealKilledAtEachStepLeavesTheFileWholeAndNoTemporaryBeforeItsRename() throws {
    let original = try contents(try sealed("original.bin"))
    _ = try rotate()
    var kills = 0
    var index = 0
    for calls in ["write", "fsync,fdatasync", "linkat", "rename"] {
      for step in 1...8 {
        index += 1
        let name = "f\(index).bin"
        let path = work + "/" + name
        try Data(original).write(to: URL(fileURLWithPath: path))
        let label = "\(calls) #\(step)"
        let killed = try vaultKilled(at: calls, step: step, ["--home", home, "reseal", "--context", "c", path])
        XCTAssertTrue([0, 128 + SIGKILL].contains(killed.status), "\(label): \(killed.error)")
        if killed.status == 128 + SIGKILL { kills += 1 }
        let left = try listing().filter { $0 != name && $0 != "original.bin" }
        if calls == "rename" {
          XCTAssertLessThanOrEqual(left.count, 1, "\(label): \(left)")
        } else {
          XCTAssertEqual(left, [], "\(label): killed before the link, nothing is beside the file")
        }
        for other in left {
          XCTAssertTrue(other.hasPrefix("." + name + ".vault-"), "\(label): \(other)")
          XCTAssertNil(Data(try contents(work + "/" + other)).range(of: Data(secret)), "\(label): an envelope")
          try FileManager.default.removeItem(atPath: work + "/" + other)
        }
        var info = stat()
        XCTAssertEqual(stat(path, &info), 0, label)
        XCTAssertEqual(info.st_nlink, 1, "\(label): the file has one name")
        let opened = try vault(["--home", home, "open", "--context", "c", path])
        XCTAssertEqual(opened.status, 0, "\(label): \(opened.error)")
        XCTAssertEqual(opened.output, secret, label)
        let again = try vault(["--home", home, "reseal", "--context", "c", path])
        XCTAssertEqual(again.status, 0, "\(label): \(again.error)")
        XCTAssertEqual(try headerVersion(path), 2, label)
        try FileManager.default.removeItem(atPath: path)
        if killed.status == 0 { break }
      }
    }
    XCTAssertGreaterThan(kills, 4)
  }

  /// A directory flush that fails after the rename is a failure of that file, not a success (a
  /// fault-injection review: `"resealed": 2, "failed": 0` with the flush failed, after which an
  /// unpin and a crash could leave an envelope under a retired key); running reseal again, when
  /// the flush works, reports the file current and exits 0.
  func testAFailedDirectoryFlushFailsTheFileAndARerunFinishesIt() throws {
    let original = try contents(try sealed("original.bin"))
    _ = try rotate()
    var notFlushed = 0
    for step in 1...12 {
      let path = work + "/f\(step).bin"
      try Data(original).write(to: URL(fileURLWithPath: path))
      let failed = try vaultFailing(
        "fsync,fdatasync", with: "EIO", when: "\(step)", ["--home", home, "reseal", "--context", "c", path, "--json"])
      if failed.status == 0 { break }
      if failed.outputText.contains("\"file.not-flushed\"") {
        notFlushed += 1
        XCTAssertEqual(try headerVersion(path), 2, "fsync #\(step): the file holds the new envelope")
        XCTAssertTrue(failed.outputText.contains("could not be flushed"), failed.outputText)
      }
      let again = try vault(["--home", home, "reseal", "--context", "c", path])
      XCTAssertEqual(again.status, 0, "fsync #\(step): \(again.error)")
      XCTAssertEqual(try headerVersion(path), 2, "fsync #\(step)")
    }
    XCTAssertGreaterThan(notFlushed, 0, "the flush after the rename was reached")
  }

  /// Where the file system has no O_TMPFILE (strace fails that open), reseal writes a named
  /// temporary file beside FILE and renames it over FILE: the same result, nothing left beside.
  func testResealWithoutOTmpfileUsesANamedTemporaryAndLeavesNothingBeside() throws {
    let original = try contents(try sealed("original.bin"))
    _ = try rotate()
    var copies: [String] = []
    for name in ["first.bin", "probe.bin", "named.bin"] {
      try Data(original).write(to: URL(fileURLWithPath: work + "/" + name))
      copies.append(work + "/" + name)
    }
    let first = try vault(["--home", home, "reseal", "--context", "c", copies[0]])
    XCTAssertEqual(first.status, 0, first.error)
    let anonymous = try XCTUnwrap(
      try openatIndex(matching: "O_TMPFILE", ["--home", home, "reseal", "--context", "c", copies[1]]),
      "reseal writes its temporary with O_TMPFILE")
    let run = try vaultFailing(
      "openat", with: "EOPNOTSUPP", when: "\(anonymous)", ["--home", home, "reseal", "--context", "c", copies[2]])
    XCTAssertEqual(run.status, 0, run.error)
    XCTAssertEqual(try headerVersion(copies[2]), 2)
    XCTAssertEqual(try listing(), ["first.bin", "named.bin", "original.bin", "probe.bin"])
    let opened = try vault(["--home", home, "open", "--context", "c", copies[2]])
    XCTAssertEqual(opened.output, secret, opened.error)
  }

  /// Outside review: for `T/../x.bin` with T a symlink to a/d, the temporary went to the working
  /// directory (`URL` dropped "T/.." on paper; the kernel resolves it to a/), on another file
  /// system a failed rename (EXDEV), and the directory flushed was the wrong one; and the check that
  /// FILE is unchanged ran before the link and the close, not right before the rename, widening
  /// the window in which another writer's new file is replaced. strace shows the calls' order.
  func testTheTemporaryIsWhereTheKernelFindsTheFileAndTheLastCheckPrecedesTheRename() throws {
    let original = try contents(try sealed("original.bin"))
    _ = try rotate()
    let pinned = work + "/pinned.bin"
    try Data(original).write(to: URL(fileURLWithPath: pinned))
    XCTAssertEqual(try vault(["--home", home, "reseal", "--context", "c", pinned]).status, 0)
    try FileManager.default.createDirectory(atPath: work + "/a/d", withIntermediateDirectories: true)
    try FileManager.default.createSymbolicLink(atPath: work + "/T", withDestinationPath: "a/d")
    try Data(original).write(to: URL(fileURLWithPath: work + "/a/x.bin"))
    let strace = try Strace.path()
    let log = work + "/strace.log"
    let run = try Spawn.run(
      "/bin/sh",
      [
        "-c",
        #"cd "$1" && s="$2" l="$3" && shift 3 && exec "$s" -f -o "$l" -e trace=openat,linkat,newfstatat,lstat,rename "$0" "$@""#,
        vaultBinary(), work, strace, log, "--home", home, "reseal", "--context", "c", "T/../x.bin",
      ], environment: Strace.environment(nil))
    XCTAssertEqual(run.status, 0, run.error)
    XCTAssertEqual(try headerVersion(work + "/a/x.bin"), 2)
    let calls = try String(contentsOfFile: log, encoding: .utf8).split(separator: "\n").map(String.init)
    let anonymous = calls.firstIndex { $0.contains("O_TMPFILE") }
    XCTAssertTrue(anonymous.map { calls[$0].contains(#""T/..""#) } ?? false, "O_TMPFILE in T/..: \(calls)")
    let linked = try XCTUnwrap(calls.firstIndex { $0.contains("linkat(") && $0.contains(#""T/../.x.bin.vault-"#) })
    let renamed = try XCTUnwrap(calls.firstIndex { $0.contains("rename(") && $0.contains(#""T/../x.bin""#) })
    let lastCheck = try XCTUnwrap(
      calls[..<renamed].lastIndex {
        ($0.contains("fstatat(") || $0.contains("lstat(")) && $0.contains(#""T/../x.bin""#)
      })
    XCTAssertTrue(linked < lastCheck, "the file is looked at after the link, right before the rename")
  }

  func testFailingFilesAreReportedByKindLeftUntouchedAndTheOthersStillProceed() throws {
    let good = try sealed("good.bin")
    let other = try sealed("other.bin", context: "elsewhere")
    let junk = work + "/junk.txt"
    try Data("not an envelope".utf8).write(to: URL(fileURLWithPath: junk))
    let linkPath = work + "/link.bin"
    try FileManager.default.createSymbolicLink(atPath: linkPath, withDestinationPath: good)
    let fifo = work + "/fifo.bin"
    XCTAssertEqual(mkfifo(fifo, 0o600), 0)
    let linked = try sealed("linked.bin")
    XCTAssertEqual(link(linked, work + "/second-name.bin"), 0)
    _ = try rotate()
    let before = try [other, junk, linked].map { try contents($0) }

    let run = try vault(
      ["--home", home, "reseal", "--context", "c", "--json", good, other, junk, linkPath, fifo, linked, work + "/gone"])
    XCTAssertEqual(run.status, 1, run.error)
    let report = try json(run)
    XCTAssertEqual(report["resealed"] as? Int, 1)
    XCTAssertEqual(report["failed"] as? Int, 6)
    XCTAssertEqual(report["active_version"] as? Int, 2)
    let files = try XCTUnwrap(report["files"] as? [[String: Any]])
    for file in files {
      XCTAssertEqual(
        Set(file.keys), ["path", "previous_version", "version", "outcome", "error", "message"], "never omitted")
    }
    func field(_ index: Int, _ key: String) -> String { "\(files[index][key] ?? "absent")" }
    XCTAssertEqual(files.map { $0["outcome"] as? String }, ["resealed"] + Array(repeating: "failed", count: 6))
    XCTAssertEqual(field(0, "previous_version"), "1")
    XCTAssertEqual(field(0, "version"), "2")
    XCTAssertTrue(files[0]["error"] is NSNull)
    XCTAssertEqual(field(1, "error"), "envelope.key-commitment-mismatch", "a wrong context")
    XCTAssertEqual(field(1, "previous_version"), "1")
    XCTAssertTrue(files[1]["version"] is NSNull)
    XCTAssertEqual(field(2, "error"), "envelope.not-an-envelope")
    XCTAssertTrue(files[2]["previous_version"] is NSNull)
    XCTAssertEqual(field(3, "error"), "file.not-regular", "a symlink is refused")
    XCTAssertEqual(field(4, "error"), "file.not-regular", "a FIFO is refused without waiting for a writer")
    XCTAssertEqual(field(5, "error"), "file.hard-linked")
    XCTAssertEqual(field(6, "error"), "file.unreadable")
    XCTAssertFalse(run.outputText.contains(String(decoding: secret, as: UTF8.self)))

    XCTAssertEqual(try headerVersion(good), 2)
    XCTAssertEqual(try [other, junk, linked].map { try contents($0) }, before, "failed files are untouched")
    XCTAssertEqual(
      try FileManager.default.destinationOfSymbolicLink(atPath: linkPath), good, "the link is still a link")
    XCTAssertEqual(
      try listing(), ["fifo.bin", "good.bin", "junk.txt", "link.bin", "linked.bin", "other.bin", "second-name.bin"])

    let text = try vault(["--home", home, "reseal", "--context", "c", other, good])
    XCTAssertEqual(text.status, 1)
    XCTAssertEqual(text.outputText, "already current \(good) (version 2)\n")
    XCTAssertTrue(text.error.contains("Error: could not re-seal \(other) (left untouched): "), text.error)
    XCTAssertTrue(text.error.contains("1 of 2 files could not be re-sealed"), text.error)
  }

  func testResealOfARetiredVersionFailsAndUsageErrors() throws {
    let lost = try sealed("lost.bin")
    _ = try rotate()
    XCTAssertEqual(try vault(["--home", home, "unpin", "1", "--yes"]).status, 0)
    _ = try rotate()
    let run = try vault(["--home", home, "reseal", "--context", "c", "--json", lost])
    XCTAssertEqual(run.status, 1)
    let files = try json(run)["files"] as? [[String: Any]]
    XCTAssertEqual(files?.first?["error"] as? String, "envelope.retired-key-version")

    XCTAssertEqual(try vault(["--home", home, "reseal", lost]).status, 64, "--context is required")
    XCTAssertEqual(try vault(["--home", home, "reseal", "--context", "c"]).status, 64, "FILE is required")
    XCTAssertEqual(try vault(["--home", home, "reseal", "--context", "c", "-"]).status, 64)
  }

  func testUnpinRefusesTheActiveUnknownRetiredAndUnpinnedVersions() throws {
    _ = try sealed("a.bin")
    _ = try rotate()
    func refusal(_ arguments: [String]) throws -> (Int32, String) {
      let run = try vault(["--home", home, "unpin"] + arguments + ["--yes"])
      return (run.status, run.error)
    }
    let active = try refusal(["2"])
    XCTAssertEqual(active.0, 1)
    XCTAssertTrue(active.1.contains("key version 2 is the active version"), active.1)
    let unknown = try refusal(["9"])
    XCTAssertEqual(unknown.0, 1)
    XCTAssertTrue(unknown.1.contains("this vault has no key version 9"), unknown.1)
    XCTAssertEqual(try refusal(["1"]).0, 0)
    let unpinned = try refusal(["1"])
    XCTAssertEqual(unpinned.0, 1)
    XCTAssertTrue(unpinned.1.contains("key version 1 is not kept for envelopes sealed outside containers"), unpinned.1)
    _ = try rotate()
    let retired = try refusal(["1"])
    XCTAssertEqual(retired.0, 1)
    XCTAssertTrue(retired.1.contains("key version 1 is already retired"), retired.1)
    XCTAssertEqual(try refusal(["one"]).0, 64)
    XCTAssertEqual(try refusal(["0"]).0, 64)
    XCTAssertEqual(try vault(["--home", home, "unpin"]).status, 64)
  }

  /// On a terminal `unpin` asks; only "y" or "yes" releases the pin (in-process, with a terminal).
  func testUnpinAsksOnATerminal() throws {
    _ = try sealed("a.bin")
    _ = try rotate()
    func unpin(answer: String) -> (Int32, String) {
      let capture = Capture()
      let terminal = Terminal(
        environment: [:], readInput: { _ in [] }, writeOutput: { capture.output += $0 },
        writeError: { capture.error += $0 })
      terminal.askLine = { question in
        capture.error += question
        return answer
      }
      let status = VaultCommandLine(terminal: terminal).run(["--home", home, "unpin", "1"])
      return (status, capture.error + String(decoding: capture.output, as: UTF8.self))
    }
    let declined = unpin(answer: "n")
    XCTAssertEqual(declined.0, 1)
    XCTAssertTrue(declined.1.contains("Release the pin on version 1? (y/N)"), declined.1)
    XCTAssertTrue(declined.1.contains("become unreadable for good"), declined.1)
    XCTAssertTrue(declined.1.contains("nothing was changed"), declined.1)
    let accepted = unpin(answer: "yes")
    XCTAssertEqual(accepted.0, 0, accepted.1)
    XCTAssertTrue(accepted.1.contains("version 1 is no longer kept"), accepted.1)
  }
}
