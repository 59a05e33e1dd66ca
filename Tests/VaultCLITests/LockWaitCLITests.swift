import Foundation
import VaultQueue
import VaultTestSupport
import XCTest

@testable import VaultCLI

/// A rotation stopped with Ctrl-Z holds the vault's lock until it is resumed; `seal`, `backup` and
/// another `rotate` behind it waited without a word (found at a terminal by an outside review).
/// After a second they now say which process holds it and, when it is stopped, how to resume it;
/// they go on once it lets go.
final class LockWaitCLITests: XCTestCase {
  private var temporary: TemporaryDirectory!
  private var home: String { temporary.sub("home") }

  override func setUpWithError() throws {
    temporary = TemporaryDirectory()
    try initKeyfileVault(home: home, keyfile: temporary.sub("k/v.keys"))
  }

  override func tearDown() { temporary = nil }

  /// Starts vault with `arguments` behind `holder`, waits for its note on standard error, checks
  /// it is still waiting, then releases the holder and returns how vault ended.
  private func waitBehind(
    _ holder: FlockHolder, _ arguments: [String], input: [UInt8] = [], note expected: String
  ) throws -> (status: Int32, output: String, error: String) {
    let errorPath = temporary.sub("stderr-\(arguments[0])")
    let errorFile = open(errorPath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
    XCTAssertGreaterThanOrEqual(errorFile, 0)
    let child = try Spawn.start(vaultBinary(), ["--home", home] + arguments, standardError: errorFile)
    close(errorFile)
    let result = LockedResult()
    DispatchQueue.global().async { result.set(child.finish(input: input)) }
    var error = ""
    let deadline = Date().addingTimeInterval(30)
    while !error.contains("waiting for the vault's lock"), Date() < deadline {
      Thread.sleep(forTimeInterval: 0.05)
      error = (try? String(contentsOfFile: errorPath, encoding: .utf8)) ?? ""
    }
    XCTAssertTrue(error.contains(expected), "\(arguments): \(error)")
    XCTAssertNil(result.get(), "\(arguments) still waits")
    holder.release()
    let finished = try XCTUnwrap(result.wait(seconds: 60), "\(arguments) went on once the lock was free")
    return (finished.status, finished.outputText, (try? String(contentsOfFile: errorPath, encoding: .utf8)) ?? "")
  }

  func testACommandBehindAStoppedHolderSaysWhoAndHowToResumeIt() throws {
    let holder = try FlockHolder(path: home + "/vault.lock")
    holder.stop()
    let sealed = try waitBehind(
      holder, ["seal", "--context", "c"], input: Array("x".utf8),
      note: "vault: waiting for the vault's lock, which process \(holder.pid) (python3) holds while it is stopped "
        + "(Ctrl-Z or SIGSTOP): resume it (`fg` in its shell, or `kill -CONT \(holder.pid)`)")
    XCTAssertEqual(sealed.status, 0, sealed.error)
    XCTAssertFalse(sealed.output.isEmpty, "the envelope was written")
    XCTAssertEqual(sealed.error.components(separatedBy: "waiting for").count, 2, "said once: \(sealed.error)")
  }

  func testARotationBehindARunningHolderSaysWhoHoldsIt() throws {
    let holder = try FlockHolder(path: home + "/vault.lock")
    let rotated = try waitBehind(
      holder, ["rotate"],
      note: "vault: waiting for the vault's lock, which process \(holder.pid) (python3) holds (a "
        + "rotation, backup or restore holds it while it runs)")
    XCTAssertEqual(rotated.status, 0, rotated.error)
    XCTAssertFalse(rotated.error.contains("stopped"), rotated.error)
    XCTAssertTrue(rotated.output.contains("version 1 -> 2"), rotated.output)
  }

  /// A `queue put` behind a stopped rotation (which holds the container's SQLite write lock) fails
  /// after the 10 s busy timeout saying "retry", which cannot help while the holder is stopped:
  /// the error now names the holder and how to resume it. Here a stopped python3 holds the lock.
  func testABusyContainerNamesTheStoppedProcessThatHoldsIt() throws {
    let container = home + "/queue.sqlite"
    XCTAssertEqual(try vault(["--home", home, "queue", "put", "--queue", "q"], input: [1]).status, 0)
    let marker = temporary.sub("writing")
    let script = """
      import sqlite3, sys
      c = sqlite3.connect(sys.argv[1], isolation_level=None)
      c.execute("BEGIN IMMEDIATE")
      open(sys.argv[2], "w").close()
      sys.stdin.read()
      """
    let writer = try Spawn.start("/usr/bin/python3", ["-c", script, container, marker])
    defer {
      writer.kill(SIGCONT)
      _ = writer.finish()
    }
    let deadline = Date().addingTimeInterval(30)
    while !FileManager.default.fileExists(atPath: marker), Date() < deadline { Thread.sleep(forTimeInterval: 0.02) }
    writer.kill(SIGSTOP)
    // The kernel marks it stopped once the signal is delivered: look until it does (10 s at most).
    var suffix = ""
    let stopping = Date().addingTimeInterval(10)
    repeat {
      suffix = Advice.suffix(for: QueueError.busy(path: container))
      if suffix.contains("stopped") { break }
      Thread.sleep(forTimeInterval: 0.02)
    } while Date() < stopping
    XCTAssertEqual(
      suffix,
      " (process \(writer.pid) (python3) holds it while it is stopped (Ctrl-Z or SIGSTOP): resume it (`fg` in its "
        + "shell, or `kill -CONT \(writer.pid)`))")
    writer.kill(SIGCONT)
    let resuming = Date().addingTimeInterval(10)
    repeat {
      suffix = Advice.suffix(for: QueueError.busy(path: container))
      if !suffix.contains("stopped") { break }
      Thread.sleep(forTimeInterval: 0.02)
    } while Date() < resuming
    XCTAssertEqual(suffix, " (process \(writer.pid) (python3) holds it)")
    // No holder at all: nothing added.
    XCTAssertEqual(Advice.suffix(for: QueueError.busy(path: temporary.sub("none.sqlite"))), "")
  }
}

/// A child's result, set by the thread that waits for it.
private final class LockedResult: @unchecked Sendable {
  private let lock = NSLock()
  private let ready = DispatchSemaphore(value: 0)
  private var value: Spawned?

  func set(_ spawned: Spawned) {
    lock.withLock { value = spawned }
    ready.signal()
  }

  func get() -> Spawned? { lock.withLock { value } }

  func wait(seconds: Double) -> Spawned? {
    guard ready.wait(timeout: .now() + seconds) == .success else { return nil }
    return get()
  }
}
