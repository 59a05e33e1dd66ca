import CProcessHardening
import Foundation
import Vault
import VaultCrypto
import VaultKeys
import VaultQueue
import VaultTestSupport
import XCTest

@testable import VaultScan

/// A scan run inside a process that has the scanned containers open (an app auditing its own
/// home). SQLite's locks are POSIX record locks, and closing any descriptor of a file drops every
/// lock the closing descriptor table holds on it: the scan opens and closes each file it reads, so
/// it must do so in a table of its own, or another process could take itself for a container's
/// last connection and delete the WAL this process is still writing to.
final class InProcessScanTests: XCTestCase {
  var temporary: TemporaryDirectory!
  var vault: Vault!
  var path: String { temporary.sub("data/queue.sqlite") }

  override func setUpWithError() throws {
    temporary = TemporaryDirectory()
    vault = try Vault.create(
      home: temporary.sub("home"), store: StoreDescriptor(kind: .memory), resolver: .fixed(InMemoryKeyStore()))
    try FileManager.default.createDirectory(atPath: temporary.sub("data"), withIntermediateDirectories: true)
  }

  override func tearDown() {
    vault = nil
    temporary = nil
  }

  /// This process's POSIX record locks, from /proc/locks: inode, kind and byte range, sorted.
  private func ourLocks() throws -> [String] {
    let text = try String(contentsOfFile: "/proc/locks", encoding: .utf8)
    let pid = String(getpid())
    return text.split(separator: "\n").compactMap { line -> String? in
      let fields = line.split(whereSeparator: \.isWhitespace).map(String.init)
      // "1: POSIX  ADVISORY  READ 4242 08:01:1234 128 128" ("->" marks a waiter, not a holder)
      guard fields.count >= 8, fields[1] == "POSIX", fields[4] == pid else { return nil }
      return fields[3...].filter { $0 != pid }.joined(separator: " ")
    }.sorted()
  }

  private func storedIDs() throws -> Set<String> {
    let script = """
      import sqlite3,sys
      c=sqlite3.connect(sys.argv[1])
      print(' '.join(sorted(r[0] for r in c.execute('SELECT id FROM records'))))
      """
    let listed = try Spawn.run("/usr/bin/env", ["python3", "-c", script, path])
    XCTAssertEqual(listed.status, 0, listed.error)
    return Set(listed.outputText.split(whereSeparator: \.isWhitespace).map { $0.lowercased() })
  }

  func testAScanInTheProcessThatHasTheContainerOpenLeavesItsLocksAndItsLog() throws {
    let queue = try QueueContainer(path: path, vault: vault)
    let first = UUID()
    let second = UUID()
    XCTAssertEqual(try queue.enqueue(Array("first".utf8), queue: "q", id: first), .stored)
    let before = try ourLocks()
    XCTAssertFalse(before.isEmpty, "the open connection holds no lock: this test would show nothing")

    let report = try Scanner(canaries: ["canary-not-here-7Qz"], verifyingWith: vault).scan([temporary.sub("data")])
    XCTAssertTrue(report.clean, "\(report.findings)")
    XCTAssertTrue(report.complete, "\(report.incomplete)")
    XCTAssertEqual(report.filesScanned, 3, "the database, its -wal and its -shm")
    XCTAssertEqual(report.verify?.opened, 1, "the record was audited through the scan's own descriptor")
    XCTAssertEqual(try ourLocks(), before, "the scan dropped locks of this process's connection")

    // Another process connects and disconnects: with this process's locks gone it would take
    // itself for the last connection, checkpoint, and delete the log still in use here.
    let other = try Spawn.run(
      "/usr/bin/env",
      [
        "python3", "-c",
        "import sqlite3,sys; sqlite3.connect(sys.argv[1]).execute('SELECT count(*) FROM records').fetchall()", path,
      ])
    XCTAssertEqual(other.status, 0, other.error)
    XCTAssertTrue(FileManager.default.fileExists(atPath: path + "-wal"), "another process deleted the log")
    XCTAssertEqual(try queue.enqueue(Array("second".utf8), queue: "q", id: second), .stored)
    XCTAssertEqual(try storedIDs(), [first.uuidString.lowercased(), second.uuidString.lowercased()])
  }

  /// This process's descriptors and what each is open on.
  private func descriptors() throws -> [String: String] {
    var table: [String: String] = [:]
    for name in try FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd") {
      table[name] = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/" + name)
    }
    return table
  }

  /// The scan's own descriptors live and die in its own table: none is left in the process's, and
  /// the process's own are untouched (a pipe's write end the scan's table copied does not keep the
  /// reader waiting after the scan).
  func testTheScanLeavesTheProcessDescriptorTableAsItWas() throws {
    var queue: QueueContainer? = try QueueContainer(path: path, vault: vault)
    XCTAssertEqual(try queue?.enqueue(Array("first".utf8), queue: "q", id: UUID()), .stored)
    for index in 0..<20 {
      try Data("file \(index)\n".utf8).write(to: URL(fileURLWithPath: temporary.sub("data/f\(index)")))
    }
    var ends: [Int32] = [0, 0]
    XCTAssertEqual(pipe(&ends), 0)
    XCTAssertEqual(fcntl(ends[0], F_SETFL, O_NONBLOCK), 0)
    let before = try descriptors()

    for _ in 0..<3 {
      let report = try Scanner(canaries: ["canary-not-here-7Qz"], verifyingWith: vault).scan([temporary.sub("data")])
      XCTAssertEqual(report.filesScanned, 23)
      XCTAssertEqual(report.verify?.opened, 1)
    }
    // The audit's connection is SQLite's: while the queue's connection holds its locks, SQLite
    // keeps the audit's descriptor of the database open (closing it would drop them) and reuses it
    // for the next audit, so there is one, whatever the number of scans, until the queue closes.
    let added = try descriptors().filter { before[$0.key] != $0.value }
    XCTAssertEqual(Array(added.values), [path], "\(added)")
    queue = nil
    XCTAssertEqual(try descriptors(), before.filter { !$0.value.hasPrefix(path) }, "the queue's own are closed now")

    close(ends[1])
    var byte: UInt8 = 0
    // 0 is the end of the pipe; -1 (EAGAIN) would mean a copy of its write end is still open.
    XCTAssertEqual(read(ends[0], &byte, 1), 0, "the pipe's write end is still open somewhere")
    close(ends[0])
  }
}

/// What the scan does where it cannot get a descriptor table of its own, and where its objects end.
final class PrivateTableTests: XCTestCase {
  var temporary: TemporaryDirectory!
  let privateDescriptorTable = FilePipeline.privateDescriptorTable
  let spawnThread = FilePipeline.spawnThread

  override func setUp() { temporary = TemporaryDirectory() }
  override func tearDown() {
    FilePipeline.privateDescriptorTable = privateDescriptorTable
    FilePipeline.spawnThread = spawnThread
    temporary = nil
  }

  /// A seccomp filter may deny unshare: a scan in a process that may have containers open then
  /// reads nothing and says why; `vault scan` (a process of its own) may share the process's table.
  func testARefusedPrivateTableStopsAnInProcessScanBeforeItOpensAnything() throws {
    try Data("canary-here-7Qz".utf8).write(to: URL(fileURLWithPath: temporary.sub("a.txt")))
    FilePipeline.privateDescriptorTable = { EPERM }
    var scanner = Scanner(canaries: ["canary-here-7Qz"])
    XCTAssertThrowsError(try scanner.scan([temporary.path])) { error in
      XCTAssertEqual(error as? ScanError, .noPrivateDescriptorTable(errno: EPERM))
      XCTAssertTrue("\(error)".contains("run `vault scan` in a process of its own"), "\(error)")
    }
    scanner.sharesProcessDescriptorTable = true
    let report = try scanner.scan([temporary.path])
    XCTAssertEqual(report.findings.map(\.detector), ["canary"])
  }

  /// The scanner (its vault, its progress handler and what they hold) is released on the thread
  /// that called `scan`, never on a scan thread, whose descriptor table is not the process's: a
  /// deinit there that closes a descriptor would close the wrong one (found by an outside review:
  /// each `Vault` released there leaked its lock file's descriptor).
  func testTheScannerIsReleasedOnTheCallingThread() throws {
    final class Witness: @unchecked Sendable {
      let onRelease: (Bool) -> Void
      let caller = pthread_self()
      init(_ onRelease: @escaping (Bool) -> Void) { self.onRelease = onRelease }
      deinit { onRelease(pthread_equal(pthread_self(), caller) != 0) }
    }
    for index in 0..<20 {
      try Data("file \(index)\n".utf8).write(to: URL(fileURLWithPath: temporary.sub("f\(index)")))
    }
    var elsewhere = 0
    var released = 0
    for _ in 0..<100 {
      let witness = Witness { onCaller in
        released += 1
        if !onCaller { elsewhere += 1 }
      }
      var scanner = Scanner(canaries: ["canary-not-here-7Qz"])
      scanner.progress = { _, _ in _ = witness }
      _ = try scanner.scan([temporary.path])
    }
    XCTAssertEqual(released, 100)
    XCTAssertEqual(elsewhere, 0, "released on a scan thread")
  }

  /// A thread that cannot be created (a cgroup's pids limit, `ulimit -v`): without a walk thread
  /// the scan fails at once and says which limit; without workers the walk thread reads every file
  /// itself, and the report is the same as with them.
  func testAScanWithoutItsThreadsFailsOrReadsOnOneThread() throws {
    for index in 0..<12 {
      let text = index == 7 ? "a canary-here-7Qz in file \(index)\n" : "file \(index)\n"
      try Data(text.utf8).write(to: URL(fileURLWithPath: temporary.sub("f\(index)")))
    }
    let scanner = Scanner(canaries: ["canary-here-7Qz"])
    let expected = try scanner.scan([temporary.path])
    XCTAssertEqual(expected.filesScanned, 12)
    XCTAssertEqual(expected.findings.map(\.detector), ["canary"])

    let calls = LockedValue(0)
    FilePipeline.spawnThread = { _, _ in
      calls.withLock { $0 += 1 }
      return (nil, EAGAIN)
    }
    XCTAssertThrowsError(try scanner.scan([temporary.path])) { error in
      guard case .threads(let errno, _, _) = error as? ProcessResources.Shortage else {
        return XCTFail("\(error)")
      }
      XCTAssertEqual(errno, EAGAIN)
      XCTAssertTrue("\(error)".contains("thread"), "\(error)")
    }
    XCTAssertEqual(calls.withLock { $0 }, 1, "nothing more is tried without the walk thread")

    // The walk thread starts; no worker does.
    calls.withLock { $0 = 0 }
    FilePipeline.spawnThread = { stack, body in
      guard
        calls.withLock({ count in
          count += 1
          return count == 1
        })
      else { return (nil, EAGAIN) }
      return self.spawnThread(stack, body)
    }
    let inline = try scanner.scan([temporary.path])
    XCTAssertEqual(calls.withLock { $0 }, 2, "the walk thread, then one worker: no more after it failed")
    XCTAssertEqual(inline, expected)
  }

  /// Both ways of closing the copies a private table starts with (close_range, and one by one as
  /// /proc/thread-self/fd lists them, where close_range fails: Linux before 5.9, a seccomp filter)
  /// leave the scan thread's table with 0, 1 and 2 alone, and the process's own descriptors open.
  func testAPrivateTableKeepsOnlyTheStandardDescriptorsEitherWay() throws {
    /// The calling thread's descriptors, without the one its listing uses.
    @Sendable func threadDescriptors() -> [Int32] {
      guard let listing = opendir("/proc/thread-self/fd") else { return [-1] }
      defer { closedir(listing) }
      var found: [Int32] = []
      while let entry = readdir(listing) {
        // In place: copying d_name's 256-byte tuple can read past the last entry of readdir's buffer.
        let name = String(decoding: directoryEntryName(entry), as: UTF8.self)
        if let number = Int32(name), number != dirfd(listing) { found.append(number) }
      }
      return found.sorted()
    }
    var ends: [Int32] = [0, 0]
    XCTAssertEqual(pipe(&ends), 0)
    defer { _ = ends.map { close($0) } }
    let processBefore = threadDescriptors()
    XCTAssertTrue(Set(ends).isSubset(of: processBefore))
    for tryCloseRange: Int32 in [1, 0] {
      let seen = LockedValue<(status: Int32, descriptors: [Int32])>((-1, []))
      let (thread, error) = SystemThread.spawn {
        let status = vault_private_descriptor_table_closing(tryCloseRange)
        let descriptors = threadDescriptors()
        seen.withLock { $0 = (status, descriptors) }
      }
      let started = try XCTUnwrap(thread, "no thread: errno \(error)")
      SystemThread.join(started)
      let (status, descriptors) = seen.withLock { $0 }
      XCTAssertEqual(status, 0, "close_range tried: \(tryCloseRange)")
      XCTAssertEqual(descriptors, [0, 1, 2], "close_range tried: \(tryCloseRange)")
      // The process's own are all still open (others may have been opened meanwhile by the runtime).
      XCTAssertTrue(Set(processBefore).isSubset(of: threadDescriptors()), "close_range tried: \(tryCloseRange)")
      var byte: UInt8 = 0x2a
      XCTAssertEqual(write(ends[1], &byte, 1), 1, "the process's write end was closed")
      byte = 0
      XCTAssertEqual(read(ends[0], &byte, 1), 1, "the process's read end was closed")
      XCTAssertEqual(byte, 0x2a)
    }
  }

  /// A database removed after it was opened reads back from /proc as "PATH (deleted)": whatever
  /// sits at that path is not the file (a FIFO there blocked the audit's open forever, found by an
  /// outside review). The audit refuses at once.
  func testTheAuditRefusesAPathThatNoLongerNamesTheOpenFile() throws {
    let path = temporary.sub("gone.sqlite")
    try python("import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); c.execute('create table t(x)'); c.commit()", [path])
    let descriptor = open(path, O_RDONLY | O_CLOEXEC)
    XCTAssertGreaterThanOrEqual(descriptor, 0)
    defer { close(descriptor) }
    XCTAssertEqual(unlink(path), 0)
    XCTAssertEqual(mkfifo(path + " (deleted)", 0o600), 0)
    XCTAssertThrowsError(try ContainerReader(descriptor: descriptor, path: "gone.sqlite", live: true)) { error in
      XCTAssertTrue("\(error)".contains("removed or replaced"), "\(error)")
    }
  }
}
