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

  private func inode() throws -> UInt64 {
    var info = stat()
    guard stat(path, &info) == 0 else { throw POSIXError(.ENOENT) }
    return UInt64(info.st_ino)
  }

  func testTheHolderIsNamedAndSeenStopped() throws {
    let holder = try FlockHolder(path: path)
    XCTAssertEqual(
      LockWait.holder(of: try inode(), conflictingWithExclusive: true),
      LockHolder(pid: holder.pid, command: "python3", stopped: false))
    holder.stop()
    let deadline = Date().addingTimeInterval(10)
    while LockWait.holder(of: try inode(), conflictingWithExclusive: true)?.stopped != true, Date() < deadline {
      Thread.sleep(forTimeInterval: 0.02)
    }
    XCTAssertEqual(
      LockWait.holder(of: try inode(), conflictingWithExclusive: true),
      LockHolder(pid: holder.pid, command: "python3", stopped: true))
    // A shared hold keeps only a writer waiting: for a shared request the exclusive holder conflicts.
    XCTAssertEqual(LockWait.holder(of: try inode(), conflictingWithExclusive: false)?.pid, holder.pid)
  }

  /// Another thread of this process (a rotation inside the app) is nobody to name.
  func testThisProcessAloneIsNoHolderToTell() throws {
    let descriptor = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
    XCTAssertGreaterThanOrEqual(descriptor, 0)
    defer { close(descriptor) }
    XCTAssertEqual(flock(descriptor, LOCK_EX), 0)
    XCTAssertNil(LockWait.holder(of: try inode(), conflictingWithExclusive: true))
    // Not found at all (no such lock): an unnamed holder, never a wrong name.
    XCTAssertEqual(LockWait.holder(of: 1, conflictingWithExclusive: true), LockHolder())
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
    let taken = LockedValue<Int32?>(nil)
    let done = DispatchSemaphore(value: 0)
    DispatchQueue.global().async {
      let code = LockWait.lock(descriptor, LOCK_SH)
      taken.withLock { $0 = code }
      done.signal()
    }
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
    let taken = LockedValue<Int32?>(nil)
    let done = DispatchSemaphore(value: 0)
    DispatchQueue.global().async {
      let code = LockWait.lock(descriptor, LOCK_EX)
      taken.withLock { $0 = code }
      done.signal()
    }
    Thread.sleep(forTimeInterval: 0.3)
    XCTAssertNil(taken.withLock { $0 }, "still waiting")
    holder.release()
    XCTAssertEqual(done.wait(timeout: .now() + 30), .success)
    XCTAssertEqual(taken.withLock { $0 }, 0)
  }
}
