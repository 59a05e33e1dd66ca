import Foundation
import Vault
import VaultKeys
import VaultTestSupport
import XCTest

@testable import VaultQueue

/// Faults that need a real file system: a full disk and a read-only one (size-limited tmpfs
/// mounts, so root is required; CI runs as root).
final class QueueFaultTests: XCTestCase {
  var temporary: TemporaryDirectory!
  var vault: Vault!
  var mountPoint: String { temporary.sub("mnt") }

  override func setUpWithError() throws {
    try XCTSkipUnless(geteuid() == 0, "mounting a tmpfs needs root (CI runs as root)")
    temporary = TemporaryDirectory()
    vault = try Vault.create(
      home: temporary.sub("home"), store: StoreDescriptor(kind: .memory), resolver: .fixed(InMemoryKeyStore()))
    try FileManager.default.createDirectory(atPath: mountPoint, withIntermediateDirectories: true)
  }

  override func tearDown() {
    if let temporary {
      _ = try? Spawn.run("/bin/umount", [temporary.sub("mnt")])
    }
    vault = nil
    temporary = nil
  }

  private func mount(size: String, inodes: Int? = nil) throws {
    // mode=0700: a tmpfs's root is 1777 by default, a directory others may write.
    let options = "size=\(size),mode=0700" + (inodes.map { ",nr_inodes=\($0)" } ?? "")
    let result = try Spawn.run("/bin/mount", ["-t", "tmpfs", "-o", options, "tmpfs", mountPoint])
    XCTAssertEqual(result.status, 0, result.error)
  }

  func testFullDiskFailsTheEnqueueClearlyAndKeepsTheQueueConsistent() throws {
    try mount(size: "512k")
    let queue = try QueueContainer(path: mountPoint + "/queue.sqlite", vault: vault)
    var stored: [UUID] = []
    var failure: (any Error)?
    let payload = [UInt8](repeating: 0x42, count: 4000)
    for _ in 0..<1000 {
      let id = UUID()
      do {
        try queue.enqueue(payload, queue: "q", id: id)
        stored.append(id)
      } catch {
        failure = error
        break
      }
    }
    XCTAssertEqual(failure as? QueueError, .diskFull(path: mountPoint + "/queue.sqlite"))
    XCTAssertTrue(String(describing: failure!).contains("free space"))
    XCTAssertGreaterThan(stored.count, 10)
    // Everything confirmed before the failure is intact; nothing half-written shows up.
    XCTAssertEqual(try queue.stats().total, stored.count)
    XCTAssertEqual(try queue.list().map(\.id), stored)
    // Once space is freed (the tmpfs grows), the same queue accepts records and delivers them all.
    let grow = try Spawn.run("/bin/mount", ["-o", "remount,size=8m", mountPoint])
    XCTAssertEqual(grow.status, 0, grow.error)
    let late = UUID()
    XCTAssertNoThrow(try queue.enqueue(payload, queue: "q", id: late))
    let claimed = try queue.claim(queue: "q", maxCount: 10_000, maxBytes: 1 << 30)
    XCTAssertEqual(claimed.map(\.id), stored + [late])
    XCTAssertTrue(claimed.allSatisfy { $0.payloadBytes == payload })
  }

  /// A disk with blocks to spare but no free inode cannot make the -wal and -shm an open needs;
  /// SQLite then retries read-only and reports that retry's ENOENT, which read as "could not
  /// open queue.sqlite: No such file or directory" on every command, rotate included.
  func testADiskWithoutFreeInodesIsReportedFullNotMissing() throws {
    try mount(size: "4m", inodes: 64)
    let path = mountPoint + "/queue.sqlite"
    let id = UUID()
    do {
      let queue = try QueueContainer(path: path, vault: vault)
      try queue.enqueue([1, 2, 3], queue: "q", id: id)
    }
    XCTAssertFalse(FileManager.default.fileExists(atPath: path + "-wal"), "the last close removes the log")
    var fillers: [String] = []
    while true {
      let filler = mountPoint + "/filler-\(fillers.count)"
      let fd = open(filler, O_CREAT | O_EXCL | O_WRONLY, 0o600)
      if fd < 0 {
        XCTAssertEqual(errno, ENOSPC)
        break
      }
      close(fd)
      fillers.append(filler)
    }
    XCTAssertThrowsError(try QueueContainer(path: path, vault: vault).enqueue([4], queue: "q")) { error in
      XCTAssertEqual(error as? QueueError, .diskFull(path: path), "\(error)")
    }
    XCTAssertThrowsError(try QueueContainer(path: path, vault: vault).stats()) { error in
      XCTAssertEqual(error as? QueueError, .diskFull(path: path), "\(error)")
    }
    for filler in fillers { unlink(filler) }
    let queue = try QueueContainer(path: path, vault: vault)
    XCTAssertEqual(try queue.claim(queue: "q").map(\.id), [id])
  }

  func testReadOnlyFileSystemIsReportedAndNothingChanges() throws {
    try assertReadOnlyIsReported(full: false)
  }

  /// A read-only file system with no free inode (squashfs and ISO images report none) is read-only
  /// to the operator, not full: freeing space there is not the fix (the full-disk check of a
  /// failed open must not come first).
  func testAFullReadOnlyFileSystemIsReportedReadOnly() throws {
    try assertReadOnlyIsReported(full: true)
  }

  private func assertReadOnlyIsReported(full: Bool) throws {
    try mount(size: "4m", inodes: full ? 64 : nil)
    let path = mountPoint + "/queue.sqlite"
    let id = UUID()
    do {
      let queue = try QueueContainer(path: path, vault: vault)
      try queue.enqueue([1, 2, 3], queue: "q", id: id)
      try queue.checkpoint()
    }
    var fillers = 0
    while full, case let fd = open(mountPoint + "/filler-\(fillers)", O_CREAT | O_EXCL | O_WRONLY, 0o600), fd >= 0 {
      close(fd)
      fillers += 1
    }
    let remount = try Spawn.run("/bin/mount", ["-o", "remount,ro", mountPoint])
    XCTAssertEqual(remount.status, 0, remount.error)
    XCTAssertThrowsError(try QueueContainer(path: path, vault: vault).enqueue([4], queue: "q")) { error in
      XCTAssertEqual(error as? QueueError, .readOnly(path: path), "\(error)")
      XCTAssertTrue(String(describing: error).contains("read-only"))
    }
    // A container to be made there: not "full" either.
    XCTAssertThrowsError(try QueueContainer(path: mountPoint + "/new.sqlite", vault: vault)) { error in
      XCTAssertEqual(error as? QueueError, .readOnly(path: mountPoint + "/new.sqlite"), "\(error)")
    }
    _ = try Spawn.run("/bin/mount", ["-o", "remount,rw", mountPoint])
    for filler in 0..<fillers { unlink(mountPoint + "/filler-\(filler)") }
    let queue = try QueueContainer(path: path, vault: vault)
    XCTAssertEqual(try queue.claim(queue: "q").map(\.payloadBytes), [[1, 2, 3]])
  }
}
