import Foundation
import VaultTestSupport
import XCTest

/// What `vault scan` walks, opens and skips, through the real binary: names that are not UTF-8,
/// unreadable paths, special files, symlinks, deep trees and directory loops. Every scan runs with
/// a deadline, so a scan that hangs fails the test instead of the run.
final class ScanWalkTests: XCTestCase {
  /// Runs `vault scan` (or `prefix` + the binary + arguments) and fails the test when it has not
  /// ended within `seconds`.
  private func scan(
    _ arguments: [String], prefix: [String] = [], home: String? = nil, seconds: Double = 120,
    file: StaticString = #filePath, line: UInt = #line
  ) throws -> Finished? {
    let command = prefix + [vaultBinary()] + (home.map { ["--home", $0] } ?? []) + ["scan"] + arguments
    let child = try Spawn.start(command[0], Array(command.dropFirst()))
    guard let status = child.exitStatus(within: seconds) else {
      child.kill(SIGKILL)
      _ = child.finish()
      XCTFail("the scan did not finish within \(Int(seconds)) s", file: file, line: line)
      return nil
    }
    let finished = child.finish()
    return Finished(status: status, output: finished.output, error: finished.error)
  }

  /// A scan that ended: its exit status and what it printed.
  struct Finished {
    let status: Int32
    let output: [UInt8]
    let error: String
    var outputText: String { String(decoding: output, as: UTF8.self) }
  }

  private func json(_ run: Finished) throws -> [String: Any] {
    try JSONSerialization.jsonObject(with: Data(run.output)) as! [String: Any]
  }

  private func paths(_ report: [String: Any], _ key: String) -> [String: String] {
    var found: [String: String] = [:]
    for entry in report[key] as? [[String: Any]] ?? [] {
      found[entry["path"] as? String ?? ""] = entry["reason"] as? String ?? ""
    }
    return found
  }

  /// Creates a file (or directory) whose path is raw bytes, any of which may be invalid UTF-8.
  private func make(_ path: [UInt8], contents: String? = nil, directory: Bool = false) throws {
    let cPath = (path + [0]).map { CChar(bitPattern: $0) }
    if directory {
      XCTAssertEqual(mkdir(cPath, 0o755), 0)
      return
    }
    let fd = open(cPath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
    XCTAssertGreaterThanOrEqual(fd, 0)
    let bytes = Array((contents ?? "").utf8)
    XCTAssertEqual(write(fd, bytes, bytes.count), bytes.count)
    close(fd)
  }

  /// A vault home with `count` records in `queue.sqlite`.
  private func makeHome(_ temporary: TemporaryDirectory, records count: Int) throws -> String {
    let home = temporary.sub("home")
    try initKeyfileVault(home: home, keyfile: temporary.sub("k/v.keys"))
    for i in 0..<count { try vault(["--home", home, "queue", "put", "--queue", "q"], input: Array("r\(i)".utf8)) }
    return home
  }

  /// `FileManager.contentsOfDirectory` dropped such names and the scan said clean; they are read,
  /// and shown with the bytes that are not UTF-8 escaped (a backslash itself doubled).
  func testNamesThatAreNotUTF8AreScannedAndShownEscaped() throws {
    let temporary = TemporaryDirectory()
    let root = Array(temporary.path.utf8)
    try make(root + Array("/leak-".utf8) + [0xff] + Array(".log".utf8), contents: "left: raw-name-canary")
    try make(root + Array("/d".utf8) + [0xfe], directory: true)
    try make(root + Array("/d".utf8) + [0xfe] + Array("/inner.log".utf8), contents: "also raw-name-canary")
    try make(root + Array(#"/lit\xff.log"#.utf8), contents: "raw-name-canary in a name with a backslash")
    guard let run = try scan([temporary.path, "--canary", "raw-name-canary", "--json"]) else { return }
    XCTAssertEqual(run.status, 1, run.outputText + run.error)
    XCTAssertNotNil(String(validating: run.output, as: UTF8.self), "the output is valid UTF-8")
    let report = try json(run)
    XCTAssertEqual(report["files_scanned"] as? Int, 3)
    let files = Set((report["findings"] as? [[String: Any]] ?? []).compactMap { $0["file"] as? String })
    XCTAssertEqual(
      files,
      [
        temporary.path + #"/leak-\xff.log"#, temporary.path + #"/d\xfe/inner.log"#,
        temporary.path + #"/lit\\xff.log"#,
      ])
    guard let text = try scan([temporary.path, "--canary", "raw-name-canary"]) else { return }
    XCTAssertTrue(
      text.outputText.contains(temporary.path + #"/leak-\xff.log @6  file  canary (utf8)"#), text.outputText)
    XCTAssertNotNil(String(validating: text.output, as: UTF8.self))
  }

  /// Run as an unprivileged user, files and directories it may not read leave the audit incomplete:
  /// exit 2 with each one listed, and never exit 0.
  func testUnreadableFilesAndDirectoriesMakeTheAuditIncomplete() throws {
    try XCTSkipUnless(getuid() == 0, "needs root to drop to another user with setpriv")
    let temporary = TemporaryDirectory()
    XCTAssertEqual(chmod(temporary.path, 0o755), 0)
    let tree = temporary.sub("tree")
    try make(Array(tree.utf8), directory: true)
    try make(Array((tree + "/ok.log").utf8), contents: "nothing to see")
    try make(Array((tree + "/secret.log").utf8), contents: "unreadable-canary")
    try make(Array((tree + "/locked").utf8), directory: true)
    try make(Array((tree + "/locked/inner.log").utf8), contents: "unreadable-canary")
    try make(Array((tree + "/listonly").utf8), directory: true)
    try make(Array((tree + "/listonly/inner.log").utf8), contents: "unreadable-canary")
    XCTAssertEqual(chmod(tree + "/secret.log", 0), 0)
    XCTAssertEqual(chmod(tree + "/locked", 0), 0)
    XCTAssertEqual(chmod(tree + "/listonly", 0o444), 0)  // names can be listed, not opened
    let nobody = ["/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    guard let run = try scan([tree, "--canary", "unreadable-canary", "--json"], prefix: nobody) else { return }
    XCTAssertEqual(run.status, 2, run.outputText + run.error)
    let report = try json(run)
    XCTAssertEqual(report["complete"] as? Bool, false)
    XCTAssertEqual(report["files_scanned"] as? Int, 1)
    let incomplete = paths(report, "incomplete")
    XCTAssertEqual(
      Set(incomplete.keys), [tree + "/secret.log", tree + "/locked", tree + "/listonly/inner.log"], "\(incomplete)")
    XCTAssertFalse(run.outputText.contains("unreadable-canary"))
    guard let text = try scan([tree, "--canary", "unreadable-canary"], prefix: nobody) else { return }
    XCTAssertEqual(text.status, 2)
    XCTAssertTrue(text.error.contains("the audit is incomplete: 3 path(s)"), text.error)
  }

  /// FIFOs, sockets and devices are never opened (a FIFO hung the scan forever), symlinks are never
  /// followed by any pass (the container pass followed them), and loops of symlinks end nothing.
  func testSpecialFilesAndSymlinksAreReportedNeverOpenedOrFollowed() throws {
    let temporary = TemporaryDirectory()
    // Outside the tree: a file holding the canary and a vault container with plaintext in it.
    let home = try makeHome(temporary, records: 2)
    try SQLiteScript.run(home + "/queue.sqlite", "UPDATE records SET envelope = CAST('plain words here' AS BLOB)")
    try make(Array(temporary.sub("outside.log").utf8), contents: "special-canary")
    let tree = temporary.sub("tree")
    try make(Array(tree.utf8), directory: true)
    try make(Array((tree + "/ok.log").utf8), contents: "nothing to see")
    XCTAssertEqual(mkfifo(tree + "/pipe", 0o644), 0)
    let socketScript = "import socket,sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])"
    XCTAssertEqual(try Spawn.run("/usr/bin/env", ["python3", "-c", socketScript, tree + "/socket"]).status, 0)
    XCTAssertEqual(symlink(temporary.sub("outside.log"), tree + "/outside-link.log"), 0)
    XCTAssertEqual(symlink(home + "/queue.sqlite", tree + "/container-link.sqlite"), 0)
    XCTAssertEqual(symlink(tree + "/loop-b", tree + "/loop-a"), 0)
    XCTAssertEqual(symlink(tree + "/loop-a", tree + "/loop-b"), 0)
    XCTAssertEqual(symlink("..", tree + "/up"), 0)
    var expected: Set<String> = [
      "pipe", "socket", "outside-link.log", "container-link.sqlite", "loop-a", "loop-b", "up",
    ]
    if getuid() == 0 {  // a character device like /dev/null (makedev(1, 3))
      XCTAssertEqual(mknod(tree + "/null", S_IFCHR | 0o666, dev_t(1 << 8 | 3)), 0)
      expected.insert("null")
    }
    guard let run = try scan([tree, "--canary", "special-canary", "--json"], seconds: 60) else { return }
    XCTAssertEqual(run.status, 0, run.outputText + run.error)
    let report = try json(run)
    XCTAssertEqual((report["findings"] as? [[String: Any]])?.count, 0, "nothing behind a symlink was read")
    XCTAssertEqual(report["complete"] as? Bool, true)
    XCTAssertEqual(report["files_scanned"] as? Int, 1)
    let skipped = paths(report, "skipped")
    XCTAssertEqual(Set(skipped.keys), Set(expected.map { tree + "/" + $0 }), "\(skipped)")
    for name in ["outside-link.log", "container-link.sqlite", "loop-a", "up"] {
      XCTAssertEqual(skipped[tree + "/" + name], "symlink (not followed)")
    }
    XCTAssertEqual(skipped[tree + "/pipe"], "FIFO (never opened)")
    XCTAssertEqual(skipped[tree + "/socket"], "socket (never opened)")
    if expected.contains("null") { XCTAssertEqual(skipped[tree + "/null"], "character device (never opened)") }
  }

  /// A PATH that is itself a symlink is not followed either, and since nothing of it was read the
  /// audit is incomplete (it said clean, exit 0, having read nothing).
  func testAPathThatIsASymlinkIsNotFollowedAndNotClean() throws {
    let temporary = TemporaryDirectory()
    try make(Array(temporary.sub("real").utf8), directory: true)
    try make(Array(temporary.sub("real/leak.log").utf8), contents: "root-link-canary")
    XCTAssertEqual(symlink(temporary.sub("real"), temporary.sub("link")), 0)
    guard let run = try scan([temporary.sub("link"), "--canary", "root-link-canary", "--json"]) else { return }
    XCTAssertEqual(run.status, 2, run.outputText + run.error)
    let report = try json(run)
    XCTAssertEqual(report["files_scanned"] as? Int, 0)
    XCTAssertEqual(
      paths(report, "incomplete"),
      [temporary.sub("link"): "symlink given as a path (not followed: scan what it points to)"])
    guard let real = try scan([temporary.sub("real"), "--canary", "root-link-canary"]) else { return }
    XCTAssertEqual(real.status, 1, real.outputText + real.error)
  }

  /// A directory bind-mounted inside itself is the same directory (device and inode) as one on the
  /// path to it: reported, not walked again (each file was scanned twice, each leak found twice).
  func testADirectoryLoopIsSkippedNotWalkedAgain() throws {
    let temporary = TemporaryDirectory()
    let tree = temporary.sub("tree")
    try make(Array(tree.utf8), directory: true)
    try make(Array((tree + "/a").utf8), directory: true)
    try make(Array((tree + "/a/loop").utf8), directory: true)
    try make(Array((tree + "/leak.log").utf8), contents: "loop-canary")
    let mount = try Spawn.run("/usr/bin/mount", ["--bind", tree, tree + "/a/loop"])
    try XCTSkipUnless(mount.status == 0, "bind mounts need CAP_SYS_ADMIN: \(mount.error)")
    defer {
      _ = try? Spawn.run("/usr/bin/umount", ["-l", tree + "/a/loop"])
      _ = temporary  // unmounted before the directory is removed
    }
    guard let run = try scan([tree, "--canary", "loop-canary", "--json"]) else { return }
    XCTAssertEqual(run.status, 1, run.outputText + run.error)
    let report = try json(run)
    let files = (report["findings"] as? [[String: Any]] ?? []).compactMap { $0["file"] as? String }
    XCTAssertEqual(files, [tree + "/leak.log"])
    XCTAssertEqual(paths(report, "skipped")[tree + "/a/loop"], "directory loop (already being scanned above)")
  }

  /// A tree deeper than the descriptors allow finishes: what it could not descend into is listed as
  /// incomplete (exit 2 when nothing was found), and what it read is still reported.
  func testADeepTreeFinishesWithinTheDescriptorLimit() throws {
    let temporary = TemporaryDirectory()
    var path = temporary.sub("deep")
    for level in 0..<150 {
      try make(Array(path.utf8), directory: true)
      if level == 5 { try make(Array((path + "/shallow.log").utf8), contents: "deep-canary") }
      path += "/d"
    }
    let limited = ["/bin/bash", "-c", "ulimit -n 64 && exec \"$@\"", "bash"]
    guard let run = try scan([temporary.sub("deep"), "--canary", "deep-canary", "--json"], prefix: limited) else {
      return
    }
    XCTAssertEqual(run.status, 1, run.outputText + run.error)
    let report = try json(run)
    XCTAssertEqual((report["findings"] as? [[String: Any]])?.count, 1)
    let incomplete = paths(report, "incomplete")
    XCTAssertEqual(incomplete.count, 1, "\(incomplete)")
    XCTAssertTrue(incomplete.values.first?.hasPrefix("directory nested deeper than") ?? false, "\(incomplete)")
    // Wide is not deep: every file and every container is closed after it is read.
    let home = try makeHome(temporary, records: 2)
    let container = try Data(contentsOf: URL(fileURLWithPath: home + "/queue.sqlite"))
    let wide = temporary.sub("wide")
    try make(Array(wide.utf8), directory: true)
    for index in 0..<150 {
      try container.write(to: URL(fileURLWithPath: wide + "/c\(index).sqlite"))
      try make(Array((wide + "/f\(index).log").utf8), contents: "nothing here \(index)")
    }
    guard let all = try scan([wide, "--canary", "deep-canary", "--json"], prefix: limited) else { return }
    XCTAssertEqual(all.status, 0, all.outputText + all.error)
    XCTAssertEqual(try json(all)["files_scanned"] as? Int, 300)
    // Without the finding, the same tree is an incomplete audit.
    XCTAssertEqual(unlink(temporary.sub("deep/d/d/d/d/d/shallow.log")), 0)
    guard let alone = try scan([temporary.sub("deep"), "--canary", "deep-canary"], prefix: limited) else { return }
    XCTAssertEqual(alone.status, 2, alone.outputText + alone.error)
  }

  /// A tree 2,000 levels deep (its path far longer than PATH_MAX) is read to the bottom: the CLI
  /// raises the soft open-file limit to the hard one, and the walk goes as deep as that allows.
  /// (Before: cut at 256 levels, exit 2 with the canary at the bottom unread.)
  func testATreeTwoThousandLevelsDeepIsReadToTheBottom() throws {
    let temporary = TemporaryDirectory()
    let script = """
      import os,sys
      os.chdir(sys.argv[1])
      for _ in range(2000):
        os.mkdir('d'); os.chdir('d')
      open('bottom.log', 'w').write('bottom-canary-2000')
      """
    XCTAssertEqual(try Spawn.run("/usr/bin/env", ["python3", "-c", script, temporary.path]).status, 0)
    let limited = ["/bin/bash", "-c", "ulimit -S -n 1024 && exec \"$@\"", "bash"]
    guard let run = try scan([temporary.path, "--canary", "bottom-canary-2000", "--json"], prefix: limited) else {
      return
    }
    XCTAssertEqual(run.status, 1, run.outputText + run.error)
    XCTAssertEqual((try json(run)["findings"] as? [[String: Any]])?.count, 1)
    XCTAssertEqual(try json(run)["complete"] as? Bool, true)
  }

  /// The container audit reads the files the walker chose, so a container whose name is not UTF-8
  /// is audited too (plaintext in its envelope column, and `--verify` counts its records).
  func testContainersWithNamesThatAreNotUTF8AreAudited() throws {
    let temporary = TemporaryDirectory()
    let home = try makeHome(temporary, records: 3)
    let tree = temporary.sub("tree")
    try make(Array(tree.utf8), directory: true)
    let good = try Data(contentsOf: URL(fileURLWithPath: home + "/queue.sqlite"))
    try SQLiteScript.run(
      home + "/queue.sqlite", "UPDATE records SET envelope = CAST('plain words here' AS BLOB) WHERE seq = 1")
    let bad = try Data(contentsOf: URL(fileURLWithPath: home + "/queue.sqlite"))
    for (name, data) in [([0x67, 0xff] as [UInt8], good), ([0x62, 0xfe], bad)] {
      let cPath = (Array(tree.utf8) + [0x2f] + name + [0]).map { CChar(bitPattern: $0) }
      let fd = open(cPath, O_WRONLY | O_CREAT | O_CLOEXEC, 0o600)
      XCTAssertGreaterThanOrEqual(fd, 0)
      XCTAssertEqual(data.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }, data.count)
      close(fd)
    }
    guard let verified = try scan([tree, "--verify", "--json"], home: home) else { return }
    XCTAssertEqual(verified.status, 1, verified.outputText + verified.error)
    let report = try json(verified)
    let columns = (report["findings"] as? [[String: Any]] ?? []).filter {
      $0["detector"] as? String == "envelope-column"
    }
    XCTAssertEqual(columns.compactMap { $0["file"] as? String }, [tree + #"/b\xfe"#])
    let verify = report["verify"] as? [String: Any] ?? [:]
    XCTAssertEqual((verify["containers"] as? [String: [String: Int]])?[tree + #"/g\xff"#], ["1": 3], "\(verify)")
    XCTAssertEqual(verify["opened"] as? Int, 5)
    XCTAssertEqual(verify["failed"] as? Int, 1)
  }

  /// The audit reads a container through the descriptor the walker opened; a container with a live
  /// writer still has its committed records read from the WAL (a plaintext record there is found),
  /// and a quiet one is read without creating a -wal or -shm file.
  func testCommittedRecordsStillInTheWALAreAudited() throws {
    let temporary = TemporaryDirectory()
    let home = try makeHome(temporary, records: 2)
    let database = home + "/queue.sqlite"
    let before = try FileManager.default.contentsOfDirectory(atPath: home).sorted()
    guard let quiet = try scan([home]) else { return }
    XCTAssertEqual(quiet.status, 0, quiet.outputText + quiet.error)
    XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: home).sorted(), before, "the scan wrote nothing")
    let script = """
      import sqlite3,sys,time
      c=sqlite3.connect(sys.argv[1], isolation_level=None)
      c.execute("UPDATE records SET envelope = CAST('plain words here' AS BLOB) WHERE seq = 1")
      open(sys.argv[2], 'w').close()
      time.sleep(120)
      """
    let writer = try Spawn.start("/usr/bin/env", ["python3", "-c", script, database, temporary.sub("ready")])
    defer {
      writer.kill(SIGKILL)
      _ = writer.finish()
    }
    for _ in 0..<200 where !FileManager.default.fileExists(atPath: temporary.sub("ready")) {
      Thread.sleep(forTimeInterval: 0.05)
    }
    var info = stat()
    XCTAssertEqual(stat(database + "-wal", &info), 0)
    XCTAssertGreaterThan(info.st_size, 0, "the change is in the WAL, not yet in the database file")
    guard let run = try scan([home, "--json"], home: home) else { return }
    XCTAssertEqual(run.status, 1, run.outputText + run.error)
    let findings = (try json(run)["findings"] as? [[String: Any]] ?? []).filter {
      $0["detector"] as? String == "envelope-column"
    }
    XCTAssertEqual(findings.compactMap { $0["file"] as? String }, [database])
    XCTAssertEqual(findings.compactMap { $0["encoding"] as? String }, ["not-an-envelope"])
  }
}
