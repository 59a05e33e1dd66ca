import Foundation
import VaultCrypto
import VaultTestSupport
import XCTest

@testable import VaultKeys

/// A wait for the vault's lock says who holds it: a rotation stopped with Ctrl-Z held it while
/// `seal`, `backup` and another `rotate` waited without a word (found at a terminal by an outside
/// review).
final class LockWaitTests: XCTestCase {
  private var temporary: TemporaryDirectory!
  private var path: String { temporary.sub("vault.lock") }

  override func setUp() { temporary = TemporaryDirectory() }
  override func tearDown() {
    LockWait.stopObserving()
    temporary = nil
  }

  /// Calls `LockWait.lock` on another thread: what it returned once it has (nil while it waits),
  /// and a semaphore signalled then.
  private func lockInBackground(_ descriptor: Int32, _ operation: Int32) -> (LockedValue<Int32?>, DispatchSemaphore) {
    let taken = LockedValue<Int32?>(nil)
    let done = DispatchSemaphore(value: 0)
    DispatchQueue.global().async {
      let code = LockWait.lock(descriptor, operation)
      taken.withLock { $0 = code }
      done.signal()
    }
    return (taken, done)
  }

  /// The lock file, open (read-only) to ask about.
  private func opened() throws -> Int32 {
    let descriptor = open(path, O_RDONLY | O_CLOEXEC)
    guard descriptor >= 0 else { throw POSIXError(.ENOENT) }
    return descriptor
  }

  func testTheHolderIsNamedAndSeenStopped() throws {
    let holder = try FlockHolder(path: path)
    let file = try opened()
    defer { close(file) }
    XCTAssertEqual(
      LockWait.holder(of: file, conflictingWithExclusive: true),
      LockHolder(pid: holder.pid, command: "python3", stopped: false))
    holder.stop()
    let deadline = Date().addingTimeInterval(10)
    while LockWait.holder(of: file, conflictingWithExclusive: true)?.stopped != true, Date() < deadline {
      Thread.sleep(forTimeInterval: 0.02)
    }
    XCTAssertEqual(
      LockWait.holder(of: file, conflictingWithExclusive: true),
      LockHolder(pid: holder.pid, command: "python3", stopped: true))
    // A shared hold keeps only a writer waiting: for a shared request the exclusive holder conflicts.
    XCTAssertEqual(LockWait.holder(of: file, conflictingWithExclusive: false)?.pid, holder.pid)
  }

  /// A flock is shown in /proc/locks under the process that took it: after a fork and that
  /// process's exit, its child holds the lock under the dead pid (or the pid's next owner). The
  /// holder is named only when it has the file open now; otherwise it is not named (the first
  /// version named the dead pid; found by an outside review).
  func testAHolderThatCannotBeConfirmedIsNotNamed() throws {
    let marker = temporary.sub("forked")
    let script = """
      import fcntl, os, sys, time
      f = open(sys.argv[1], "a+")
      fcntl.flock(f, fcntl.LOCK_EX)
      if os.fork() == 0:
          os.setsid()
          open(sys.argv[2], "w").close()
          time.sleep(30)
          os._exit(0)
      os._exit(0)
      """
    let parent = try Spawn.start("/usr/bin/python3", ["-c", script, path, marker])
    let started = parent.finish()
    XCTAssertEqual(started.status, 0, started.error)
    let deadline = Date().addingTimeInterval(30)
    while !FileManager.default.fileExists(atPath: marker), Date() < deadline { Thread.sleep(forTimeInterval: 0.02) }
    let file = try opened()
    defer { close(file) }
    let holder = LockWait.holder(of: file, conflictingWithExclusive: true)
    // The child still holds it (it has the file open): it is named, or nobody; never the dead parent.
    XCTAssertNotEqual(holder?.pid, parent.pid)
    XCTAssertNotNil(holder)
    // Let the child go (it is in its own session): find it by its open lock file and end it.
    for pid in (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? [] {
      guard let number = Int32(pid), number != getpid(),
        let fds = try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd")
      else { continue }
      if fds.contains(where: {
        (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/fd/\($0)")) == path
      }) {
        kill(number, SIGKILL)
      }
    }
  }

  /// Another thread of this process (a rotation inside the app) is nobody to name.
  func testThisProcessAloneIsNoHolderToTell() throws {
    let descriptor = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
    XCTAssertGreaterThanOrEqual(descriptor, 0)
    defer { close(descriptor) }
    XCTAssertEqual(flock(descriptor, LOCK_EX), 0)
    XCTAssertNil(LockWait.holder(of: descriptor, conflictingWithExclusive: true))
    // Not found at all (no such lock): an unnamed holder, never a wrong name.
    let other = open(temporary.sub("unlocked"), O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
    defer { close(other) }
    XCTAssertEqual(LockWait.holder(of: other, conflictingWithExclusive: true), LockHolder())
  }

  /// The observer hears of a wait once, after its delay, while the lock is still awaited; the lock
  /// is then taken as a plain flock would take it, and an uncontended lock tells nothing.
  func testAWaitIsToldAfterItsDelayAndTheLockIsThenTaken() throws {
    let heard = LockedValue<[(LockHolder, Date)]>([])
    LockWait.observe(after: 0.3) { holder in heard.withLock { $0.append((holder, Date())) } }
    let holder = try FlockHolder(path: path)
    let descriptor = open(path, O_RDWR | O_CLOEXEC)
    defer { close(descriptor) }
    let started = Date()
    let (taken, done) = lockInBackground(descriptor, LOCK_SH)
    Thread.sleep(forTimeInterval: 1)
    XCTAssertNil(taken.withLock { $0 }, "still waiting")
    let told = heard.withLock { $0 }
    XCTAssertEqual(told.map(\.0), [LockHolder(pid: holder.pid, command: "python3", stopped: false)])
    XCTAssertGreaterThanOrEqual(told.first.map { $0.1.timeIntervalSince(started) } ?? 0, 0.3)
    holder.release()
    XCTAssertEqual(done.wait(timeout: .now() + 30), .success)
    XCTAssertEqual(taken.withLock { $0 }, 0)
    XCTAssertEqual(flock(descriptor, LOCK_UN), 0)
    XCTAssertEqual(LockWait.lock(descriptor, LOCK_EX), 0)
    Thread.sleep(forTimeInterval: 0.5)
    XCTAssertEqual(heard.withLock { $0.count }, 1, "an uncontended lock tells nothing")
  }
}

extension LockWaitTests {
  /// With nobody observing, a lock held elsewhere is waited for, as a plain flock waits (the first
  /// version of `LockWait.lock` returned EWOULDBLOCK as an error then: every in-process seal
  /// behind a rotation failed; ExternalSealTests and VaultLifecycleTests caught it).
  func testWithoutAnObserverTheLockIsWaitedForAndTaken() throws {
    LockWait.stopObserving()
    let holder = try FlockHolder(path: path)
    let descriptor = open(path, O_RDWR | O_CLOEXEC)
    defer { close(descriptor) }
    let (taken, done) = lockInBackground(descriptor, LOCK_EX)
    Thread.sleep(forTimeInterval: 0.3)
    XCTAssertNil(taken.withLock { $0 }, "still waiting")
    holder.release()
    XCTAssertEqual(done.wait(timeout: .now() + 30), .success)
    XCTAssertEqual(taken.withLock { $0 }, 0)
  }
}
