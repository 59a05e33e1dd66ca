import Foundation
import Synchronization
import VaultCrypto
import VaultKeys
import VaultTestSupport
import XCTest

@testable import Vault

/// Notes, for every key store read, whether it ran on a `BlockingWork` queue, and can make each
/// read slow (a Secret Service near its timeout).
final class KeyStoreReads: Sendable {
  // LockedValue, not Mutex: ThreadSanitizer does not see Mutex's lock and reported the appends below as a race.
  let delay = LockedValue<UInt32>(0)
  let offPool = LockedValue<[Bool]>([])

  /// A memory store whose reads are noted here.
  func observedStore() -> InterposedKeyStore {
    InterposedKeyStore(InMemoryKeyStore()) { [self] call in
      switch call {
      case .loadKey, .loadRecord: note()
      default: break
      }
      return .forward
    }
  }

  private func note() {
    offPool.withLock { $0.append(BlockingWork.isCurrent) }
    let microseconds = delay.withLock { $0 }
    if microseconds > 0 { usleep(microseconds) }
  }
}

/// The async forms of `Vault.open(home:)`, `seal` and `open`, against a real home on disk: same
/// results as the synchronous calls, the blocking work never on a thread of Swift's pool.
final class VaultAsyncTests: XCTestCase {
  var temporary: TemporaryDirectory!
  var reads: KeyStoreReads!
  var store: InterposedKeyStore!
  var home: String { temporary.sub("home") }

  override func setUpWithError() throws {
    temporary = TemporaryDirectory()
    reads = KeyStoreReads()
    store = reads.observedStore()
    _ = try Vault.create(home: home, store: StoreDescriptor(kind: .memory), resolver: .fixed(store))
    reads.offPool.withLock { $0 = [] }
  }

  override func tearDown() {
    temporary = nil
  }

  func testAsyncOpenSealAndOpenRoundTripOffThePool() async throws {
    let vault = try await Vault.open(home: home, resolver: .fixed(store))
    let envelope = try await vault.seal(Data("note 42".utf8), context: "notes/42")
    let opened = try await vault.open(envelope, context: "notes/42")
    XCTAssertEqual(String(decoding: opened, as: UTF8.self), "note 42")
    let bytes = try await vault.seal(Array("raw".utf8), context: Array("ctx".utf8))
    let openedBytes = try await vault.open(bytes, context: Array("ctx".utf8))
    XCTAssertEqual(openedBytes, Array("raw".utf8))
    // What async sealed, the synchronous call opens: the same calls. (In async code, Swift picks
    // the async form even inside XCTAssert's autoclosure, which cannot await: a closure of its own
    // makes the synchronous call.)
    let openedSynchronously = try { try vault.open(envelope, context: "notes/42") }()
    XCTAssertEqual(openedSynchronously, Data("note 42".utf8))
    // A wrong context fails with the synchronous call's error.
    var expected = ""
    do { _ = try { try vault.open(envelope, context: "notes/43") }() } catch let error as EnvelopeError {
      expected = error.code
    }
    do {
      _ = try await vault.open(envelope, context: "notes/43")
      XCTFail("opened under another context")
    } catch let error as EnvelopeError {
      XCTAssertEqual(error.code, expected)
    }
    let observed = reads.offPool.withLock { $0 }
    XCTAssertFalse(observed.isEmpty, "the key store was read")
    XCTAssertEqual(observed.filter { !$0 }.count, 0, "every key store read ran on a BlockingWork queue")
  }

  /// Twice as many slow opens as the pool has threads finish in about the time of one, and a task
  /// started meanwhile runs at once: the waits hold no thread of the pool.
  func testSlowOpensDoNotHoldThePoolsThreads() async throws {
    reads.delay.withLock { $0 = 400_000 }
    let calls = 2 * ProcessInfo.processInfo.activeProcessorCount
    let started = Date()
    try await withThrowingTaskGroup(of: Void.self) { group in
      for _ in 0..<calls {
        group.addTask { [home, store] in _ = try await Vault.open(home: home, resolver: .fixed(store!)) }
      }
      try await Task.sleep(nanoseconds: 100_000_000)
      let probe = Date()
      let ran = await Task.detached { Date() }.value
      XCTAssertLessThan(ran.timeIntervalSince(probe), 0.2, "a new task waited for a thread")
      try await group.waitForAll()
    }
    // Each open reads the store more than once (0.4 s each); on the pool, the calls would queue
    // behind its threads and take at least twice as long as one call.
    let one = 0.4 * Double(reads.offPool.withLock { $0.count } / calls)
    XCTAssertLessThan(Date().timeIntervalSince(started), one * 1.8)
  }

  func testCancelledBeforeStartThrowsAndDoesNothing() async throws {
    let task = Task { [home, store] in
      withUnsafeCurrentTask { $0?.cancel() }
      return try await Vault.open(home: home, resolver: .fixed(store!))
    }
    do {
      _ = try await task.value
      XCTFail("opened although cancelled")
    } catch is CancellationError {}
    XCTAssertEqual(reads.offPool.withLock { $0.count }, 0, "the key store was never read")
  }

  /// Cancelled while it runs, the call finishes and returns its result: nothing is undone.
  func testCancelledAfterStartFinishes() async throws {
    reads.delay.withLock { $0 = 300_000 }
    let task = Task { [home, store] in try await Vault.open(home: home, resolver: .fixed(store!)) }
    while reads.offPool.withLock({ $0.isEmpty }) { try await Task.sleep(nanoseconds: 10_000_000) }
    task.cancel()
    let vault = try await task.value
    let sealed = try await vault.seal(Data("x".utf8), context: "c")
    let opened = try await vault.open(sealed, context: "c")
    XCTAssertEqual(opened, Data("x".utf8))
  }
}
