import Foundation
import VaultTestSupport
import XCTest

@testable import VaultBackup

/// The work directory that holds snapshots and a bundle being written, and what a new one
/// removes that killed processes left (`WorkDirectory`).
final class WorkDirectoryTests: XCTestCase {
  var temporary: TemporaryDirectory!

  override func setUp() { temporary = TemporaryDirectory() }
  override func tearDown() { temporary = nil }

  /// What a new work directory removes beside itself: only this user's real directories with the
  /// work prefix, a minute old, whose lock no process holds (another process is checked for real:
  /// `flock(1)`, not forking, holds one until it is killed).
  func testOnlyStaleUnlockedWorkDirectoriesOfThisUserAreRemoved() throws {
    let parent = temporary.sub("parent")
    try FileManager.default.createDirectory(atPath: parent, withIntermediateDirectories: true)
    func make(_ name: String, lockFile: Bool = true) throws -> String {
      let path = parent + "/" + name
      try FileManager.default.createDirectory(
        atPath: path, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o700])
      if lockFile { XCTAssertTrue(FileManager.default.createFile(atPath: path + "/.lock", contents: nil)) }
      XCTAssertTrue(FileManager.default.createFile(atPath: path + "/0.sqlite", contents: Data("snapshot".utf8)))
      return path
    }
    func age(_ path: String, seconds: Int = 120) {
      let then = time(nil) - seconds
      var old = [timeval(tv_sec: then, tv_usec: 0), timeval(tv_sec: then, tv_usec: 0)]
      XCTAssertEqual(lutimes(path, &old), 0)
    }
    let dead = try make(".vault-backup-work-dead")
    let noLock = try make(".vault-backup-work-nolock", lockFile: false)
    // Without a lock file (an earlier release's, perhaps in use): a day old, not a minute.
    let noLockRecent = try make(".vault-backup-work-nolock-recent", lockFile: false)
    _ = try make(".vault-backup-work-young")
    let held = try make(".vault-backup-work-held")
    let notOurs = try make(".vault-backup-work-other")
    let unrelated = try make("vault-backup-work-unrelated")
    let target = try make("target")
    XCTAssertEqual(symlink(target, parent + "/.vault-backup-work-link"), 0)
    let holder = try Spawn.start("/usr/bin/flock", ["--exclusive", "--no-fork", held + "/.lock", "sleep", "600"])
    defer {
      holder.kill(SIGKILL)
      _ = holder.finish()
    }
    // Until flock(1) holds the lock, a probe of ours takes it.
    let deadline = Date().addingTimeInterval(10)
    while Date() < deadline {
      let probe = open(held + "/.lock", O_RDWR)
      defer { close(probe) }
      if flock(probe, LOCK_EX | LOCK_NB) != 0 { break }
      flock(probe, LOCK_UN)
      usleep(5_000)
    }
    if geteuid() == 0 { XCTAssertEqual(chown(notOurs, 65534, 65534), 0) }
    age(noLock, seconds: 2 * 86_400)
    for path in [dead, noLockRecent, held, notOurs, unrelated, target, parent + "/.vault-backup-work-link"] {
      age(path)
    }

    let work = try WorkDirectory(parent: parent)
    var remaining = Set(try FileManager.default.contentsOfDirectory(atPath: parent))
    XCTAssertFalse(remaining.contains(".vault-backup-work-dead"))
    XCTAssertFalse(remaining.contains(".vault-backup-work-nolock"))
    XCTAssertTrue(
      remaining.isSuperset(of: [
        ".vault-backup-work-young", ".vault-backup-work-nolock-recent", ".vault-backup-work-held",
        ".vault-backup-work-link", "vault-backup-work-unrelated",
        "target",
      ]))
    XCTAssertEqual(remaining.contains(".vault-backup-work-other"), geteuid() == 0)
    XCTAssertTrue(FileManager.default.fileExists(atPath: target + "/0.sqlite"), "a link's target is not entered")
    XCTAssertTrue(remaining.contains(URL(fileURLWithPath: work.path).lastPathComponent))

    // Killed, the holder's lock is free: the next work directory removes that one too.
    holder.kill(SIGKILL)
    XCTAssertEqual(holder.exitStatus(within: 10), 128 + SIGKILL)
    age(held)
    let next = try WorkDirectory(parent: parent)
    remaining = Set(try FileManager.default.contentsOfDirectory(atPath: parent))
    XCTAssertFalse(remaining.contains(".vault-backup-work-held"))
    XCTAssertTrue(remaining.contains(URL(fileURLWithPath: work.path).lastPathComponent), "held by this process")
    XCTAssertTrue(remaining.contains(URL(fileURLWithPath: next.path).lastPathComponent))
  }

  /// Where another user could rename entries (a group-writable parent without the sticky bit),
  /// nothing is swept: they could rename their own directory, or one they may not delete, to a
  /// work directory's name. With the sticky bit (as /tmp) it is. A stale directory holding a
  /// directory, or not 0700, is left; one whose time is in the future (the clock set back) is
  /// stale by its distance from now.
  func testNothingIsSweptWhereOthersCanRenameEntriesAndOnlyFlatPrivateDirectoriesElsewhere() throws {
    let parent = temporary.sub("shared")
    try FileManager.default.createDirectory(atPath: parent, withIntermediateDirectories: true)
    func make(_ name: String, mode: mode_t = 0o700, seconds: Int = -120) throws -> String {
      let path = parent + "/" + name
      XCTAssertEqual(mkdir(path, mode), 0)
      XCTAssertEqual(chmod(path, mode), 0)
      XCTAssertTrue(FileManager.default.createFile(atPath: path + "/.lock", contents: nil))
      let then = time(nil) + seconds
      var times = [timeval(tv_sec: then, tv_usec: 0), timeval(tv_sec: then, tv_usec: 0)]
      XCTAssertEqual(utimes(path, &times), 0)
      return path
    }
    func exists(_ path: String) -> Bool { FileManager.default.fileExists(atPath: path) }
    let stale = try make(".vault-backup-work-stale")

    XCTAssertEqual(chmod(parent, 0o775), 0)
    WorkDirectory.removeStale(in: parent)
    XCTAssertTrue(exists(stale), "group-writable without the sticky bit: nothing swept")
    XCTAssertEqual(chmod(parent, 0o777), 0)
    WorkDirectory.removeStale(in: parent)
    XCTAssertTrue(exists(stale), "world-writable without the sticky bit: nothing swept")

    XCTAssertEqual(chmod(parent, 0o1777), 0)
    let nested = try make(".vault-backup-work-nested")
    XCTAssertEqual(mkdir(nested + "/inner", 0o700), 0)
    XCTAssertTrue(FileManager.default.createFile(atPath: nested + "/inner/kept", contents: nil))
    var back = [timeval(tv_sec: time(nil) - 120, tv_usec: 0), timeval(tv_sec: time(nil) - 120, tv_usec: 0)]
    XCTAssertEqual(utimes(nested, &back), 0)
    let open = try make(".vault-backup-work-open", mode: 0o755)
    let future = try make(".vault-backup-work-future", seconds: 7200)
    WorkDirectory.removeStale(in: parent)
    XCTAssertFalse(exists(stale), "sticky, as /tmp: swept")
    XCTAssertFalse(exists(future), "two hours in the future is two hours away: swept")
    XCTAssertTrue(exists(nested + "/inner/kept"), "a directory inside is never entered")
    XCTAssertTrue(exists(open), "not 0700: not made by mkdtemp")
  }

  /// Outside review: a stopped backup could leave its work directory, with snapshots, while
  /// saying it was removed: the removal listed the directory once while the backup's main thread
  /// went on making files in it, so the last `rmdir` failed, unnoticed. Now a step that makes
  /// entries runs under the directory's gate: abandoning waits for the step under way, removes
  /// everything, reports what it could not, and refuses the steps after it.
  func testAbandoningWaitsForTheStepThatMakesFilesAndRefusesTheNextOnes() throws {
    let parent = temporary.sub("parent")
    try FileManager.default.createDirectory(atPath: parent, withIntermediateDirectories: true)
    let work = try WorkDirectory(parent: parent)
    let inStep = DispatchSemaphore(value: 0)
    let stepEnded = LockedFlag()
    let step = Thread {
      _ = try? work.making {
        inStep.signal()
        for index in 0..<5 {
          Thread.sleep(forTimeInterval: 0.05)
          _ = FileManager.default.createFile(atPath: work.path + "/\(index).sqlite", contents: Data([1]))
        }
        stepEnded.set()
      }
    }
    step.start()
    inStep.wait()
    let left = WorkDirectory.abandonAll()
    XCTAssertTrue(stepEnded.value, "the removal waited for the step under way")
    XCTAssertEqual(left, [], "nothing could not be removed")
    XCTAssertFalse(FileManager.default.fileExists(atPath: work.path), "every file the step made went too")
    XCTAssertThrowsError(
      try work.making { _ = FileManager.default.createFile(atPath: work.path + "/late", contents: nil) }
    ) {
      XCTAssertEqual($0 as? BackupError, .io(path: work.path, operation: "create", errno: ECANCELED))
    }
    XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: parent), [])
  }
}

/// A flag set on one thread and read on another.
private final class LockedFlag: @unchecked Sendable {
  private let lock = NSLock()
  private var isSet = false
  var value: Bool { lock.withLock { isSet } }
  func set() { lock.withLock { isSet = true } }
}
