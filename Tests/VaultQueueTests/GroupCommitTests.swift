import Foundation
import VaultKeys
import VaultTestSupport
import XCTest

@testable import Vault
@testable import VaultQueue

/// Group commit: enqueues that arrive during a commit share the next one; each caller still
/// returns only after its own records are committed, and one caller's failure is its own.
final class GroupCommitTests: XCTestCase {
  /// Callers that arrive while a commit runs are committed together, in one call, and each gets
  /// its own result.
  func testCallersArrivingDuringACommitShareTheNextOne() throws {
    let group = GroupCommit()
    let firstInside = DispatchSemaphore(value: 0)
    let release = DispatchSemaphore(value: 0)
    let log = CommitLog()
    let commit: @Sendable ([GroupCommit.Request]) -> [Result<[EnqueueOutcome], any Error>] = { requests in
      let queues = requests.map(\.queue)
      log.add(queues)
      if queues == ["first"] {
        firstInside.signal()
        release.wait()
      }
      return requests.map { $0.queue == "fails" ? .failure(QueueError.invalidQueueName) : .success([.stored]) }
    }
    let results = Results()
    let first = Thread {
      results.set(
        "first", Result { try group.submit(GroupCommit.Request(records: [], queue: "first"), commit: commit) })
    }
    first.start()
    firstInside.wait()
    // Three more arrive while the first commit is still running.
    let others = ["a", "fails", "b"].map { name in
      Thread {
        results.set(name, Result { try group.submit(GroupCommit.Request(records: [], queue: name), commit: commit) })
      }
    }
    for thread in others { thread.start() }
    XCTAssertTrue(waitUntil { group.waitingCount == 3 }, "the three wait for the running commit")
    release.signal()
    XCTAssertTrue(waitUntil { results.count == 4 })
    XCTAssertEqual(log.groups.count, 2, "one commit for the first, one for the three that waited: \(log.groups)")
    XCTAssertEqual(Set(log.groups[1]), ["a", "fails", "b"])
    for name in ["first", "a", "b"] { XCTAssertEqual(try results.get(name)?.get(), [.stored], name) }
    XCTAssertThrowsError(try results.get("fails")?.get()) { XCTAssertEqual($0 as? QueueError, .invalidQueueName) }
  }

  /// Four threads that each enqueue again as soon as the last returned: the leader gathers all
  /// four before committing, so there is about one commit per round, not two groups of two
  /// (which is what they settled into before gathering: 2.3 requests per commit).
  func testCallersComingBackAreGatheredIntoOneCommit() {
    // A thread that finished its rounds one commit before the others costs the last group one
    // whole gather: half a second, long enough that no arrival is missed on a loaded machine.
    let group = GroupCommit(gatherLimit: 0.5)
    let rounds = 50
    enqueueFromFourThreads(into: group, rounds: rounds)
    XCTAssertEqual(group.statistics.requests, 4 * rounds)
    // About one commit per round (the first commits may find threads still starting, and on a
    // loaded machine a thread can miss a gather: 56 under two sanitizer runs and two CI runs at
    // once). Without the gather, the leader's own request and the three that came during its
    // commit alternate as groups of one and three: two requests per commit, 100 commits.
    XCTAssertLessThanOrEqual(group.statistics.commits, rounds + rounds / 2, "\(group.statistics)")
  }

  /// A gathering leader is woken as soon as every caller it waits for has come, not at the end of
  /// its gather: four threads of 30 rounds with a gather limit of 2 s finish in seconds (a few
  /// gathers can time out, at the start and when one thread finishes before the others), where a
  /// leader left to wait out its limit every round would take a minute.
  func testALeaderStopsGatheringOnceTheCallersItWaitsForCame() {
    let group = GroupCommit(gatherLimit: 2)
    let started = DispatchTime.now()
    enqueueFromFourThreads(into: group, rounds: 30)
    let seconds = Double(DispatchTime.now().uptimeNanoseconds - started.uptimeNanoseconds) / 1e9
    XCTAssertEqual(group.statistics.requests, 120)
    XCTAssertLessThan(seconds, 20, "\(group.statistics)")
  }

  /// Callers waiting for a commit are handed the lead when it ends: three that arrived during a
  /// commit are committed by one of them, with no fourth caller to start the next commit.
  func testCallersWaitingWhenACommitEndsAreCommittedWithoutANewCaller() throws {
    let group = GroupCommit(gatherLimit: 0.01)
    let inside = DispatchSemaphore(value: 0)
    let release = DispatchSemaphore(value: 0)
    let log = CommitLog()
    let done = DispatchGroup()
    done.enter()
    Thread {
      _ = try? group.submit(GroupCommit.Request(records: [], queue: "first")) { requests in
        log.add(requests.map(\.queue))
        inside.signal()
        release.wait()
        return requests.map { _ in .success([.stored]) }
      }
      done.leave()
    }.start()
    inside.wait()
    for name in ["a", "b", "c"] {
      done.enter()
      Thread {
        _ = try? group.submit(GroupCommit.Request(records: [], queue: name)) { requests in
          log.add(requests.map(\.queue))
          return requests.map { _ in .success([.stored]) }
        }
        done.leave()
      }.start()
    }
    XCTAssertTrue(waitUntil { group.waitingCount == 3 })
    release.signal()
    XCTAssertEqual(done.wait(timeout: .now() + 10), .success, "the three waiting were committed")
    XCTAssertEqual(log.groups.count, 2, "\(log.groups)")
    XCTAssertEqual(Set(log.groups.last ?? []), ["a", "b", "c"])
  }

  /// Four threads, started together, each submitting `rounds` times to commits that take a
  /// millisecond (as an fsync does), so that the others arrive while one runs.
  private func enqueueFromFourThreads(into group: GroupCommit, rounds: Int) {
    let start = DispatchSemaphore(value: 0)
    let done = DispatchGroup()
    for _ in 0..<4 {
      done.enter()
      Thread {
        start.wait()
        for _ in 0..<rounds {
          _ = try? group.submit(GroupCommit.Request(records: [], queue: "q")) { requests in
            usleep(1000)
            return requests.map { _ in .success([.stored]) }
          }
        }
        done.leave()
      }.start()
    }
    for _ in 0..<4 { start.signal() }
    done.wait()
  }

  /// A gather that times out expects only the callers that came: a caller left alone after the
  /// others stopped waits once, then never again; a lone caller from the start never waits.
  func testALoneCallerStopsWaitingForCallersThatLeft() throws {
    let group = GroupCommit(gatherLimit: 0.05)
    let commit: @Sendable ([GroupCommit.Request]) -> [Result<[EnqueueOutcome], any Error>] = {
      $0.map { _ in .success([.stored]) }
    }
    // A first commit held until three others wait: it saw four callers, whatever the timing.
    let inside = DispatchSemaphore(value: 0)
    let release = DispatchSemaphore(value: 0)
    let done = DispatchGroup()
    done.enter()
    Thread {
      _ = try? group.submit(GroupCommit.Request(records: [], queue: "first")) { requests in
        inside.signal()
        release.wait()
        return commit(requests)
      }
      done.leave()
    }.start()
    inside.wait()
    for _ in 0..<3 {
      done.enter()
      Thread {
        _ = try? group.submit(GroupCommit.Request(records: [], queue: "other"), commit: commit)
        done.leave()
      }.start()
    }
    XCTAssertTrue(waitUntil { group.waitingCount == 3 })
    release.signal()
    done.wait()
    XCTAssertGreaterThan(group.expectedCallers, 1, "the last commit saw the other threads")
    let started = Date()
    _ = try group.submit(GroupCommit.Request(records: [], queue: "alone"), commit: commit)
    XCTAssertGreaterThanOrEqual(Date().timeIntervalSince(started), 0.05, "it waited for the others once")
    XCTAssertEqual(group.expectedCallers, 1)
    for _ in 0..<20 {
      _ = try group.submit(GroupCommit.Request(records: [], queue: "alone"), commit: commit)
      XCTAssertEqual(group.expectedCallers, 1, "a lone caller leads at once")
    }
    let fresh = GroupCommit(gatherLimit: 60)
    for _ in 0..<20 {
      _ = try fresh.submit(GroupCommit.Request(records: [], queue: "alone"), commit: commit)
      XCTAssertEqual(fresh.expectedCallers, 1)
    }
  }

  /// Sixty-four threads, each submitting requests of its own size (and every seventh one failing):
  /// each caller gets back its own request's result, never another's, none is left waiting, and
  /// the commits saw every request exactly once.
  func testSixtyFourThreadsEachGetTheirOwnResult() {
    let group = GroupCommit()
    let threads = 64
    let rounds = 30
    let seen = CommitLog()
    let wrong = CommitLog()
    let done = DispatchGroup()
    for thread in 0..<threads {
      done.enter()
      Thread {
        for round in 0..<rounds {
          let count = thread % 5 + 1
          let name = "t\(thread)r\(round)"
          let request = GroupCommit.Request(records: (0..<count).map { _ in (UUID(), []) }, queue: name)
          let result = Result {
            try group.submit(request) { requests in
              seen.add(requests.map(\.queue))
              return requests.map { request in
                request.queue.hasPrefix("t7") || request.queue.hasPrefix("t14")
                  ? .failure(QueueError.invalidQueueName)
                  : .success(Array(repeating: .stored, count: request.records.count))
              }
            }
          }
          let fails = thread == 7 || thread == 14
          switch result {
          case .success(let outcomes) where !fails && outcomes.count == count: break
          case .failure where fails: break
          default: wrong.add([name])
          }
        }
        done.leave()
      }.start()
    }
    XCTAssertEqual(done.wait(timeout: .now() + 120), .success, "every caller returned")
    XCTAssertEqual(wrong.groups, [])
    let all = seen.groups.joined()
    XCTAssertEqual(all.count, threads * rounds)
    XCTAssertEqual(Set(all).count, threads * rounds, "each request committed once")
  }

  /// Through a real container: many threads enqueue at once; every record is stored once and
  /// opens, and there were fewer commits than records (they were grouped).
  func testManyThreadsEnqueueingLoseNothing() throws {
    let temporary = TemporaryDirectory()
    let vault = try Vault.create(
      home: temporary.sub("home"), store: StoreDescriptor(kind: .memory), resolver: .fixed(InMemoryKeyStore()))
    let container = try QueueContainer(path: temporary.sub("q.sqlite"), vault: vault)
    let threads = 8
    let each = 40
    let ids = (0..<threads).map { _ in (0..<each).map { _ in UUID() } }
    // Threads of their own: concurrentPerform would run only as many at once as there are CPUs.
    let done = DispatchGroup()
    for thread in 0..<threads {
      done.enter()
      Thread {
        for (index, id) in ids[thread].enumerated() {
          XCTAssertEqual(try? container.enqueue(Array("t\(thread) r\(index)".utf8), queue: "q", id: id), .stored)
        }
        done.leave()
      }.start()
    }
    done.wait()
    XCTAssertEqual(try container.stats().total, threads * each)
    let grouped = container.groupCommit.statistics
    XCTAssertEqual(grouped.requests, threads * each)
    print("group commit: \(grouped.requests) enqueues in \(grouped.commits) commits")
    let claimed = try container.claim(queue: "q", maxCount: threads * each)
    XCTAssertEqual(Set(claimed.map(\.id)), Set(ids.joined()))
  }

  /// Callers seal their records before they join a group: the commit stores a caller's envelope
  /// as it is while the version it was sealed under is still active, and seals the record again
  /// when a rotation came between (nothing older than the active version enters the container).
  func testACallersEnvelopeIsStoredUnlessARotationCameBetween() throws {
    let temporary = TemporaryDirectory()
    let vault = try Vault.create(
      home: temporary.sub("home"), store: StoreDescriptor(kind: .memory), resolver: .fixed(InMemoryKeyStore()))
    let container = try QueueContainer(path: temporary.sub("q.sqlite"), vault: vault)
    // An envelope of other bytes than the request's payload shows which of the two was stored.
    let (current, stale) = (UUID(), UUID())
    let sealedNow = try vault.seal(
      Array("as sealed".utf8), context: container.context(queue: "q", id: current.recordText))
    let sealedBefore = try vault.seal(
      Array("as sealed".utf8), context: container.context(queue: "q", id: stale.recordText))
    let first = vault.activeVersion
    let now = GroupCommit.Request(records: [(current, Array("payload".utf8))], queue: "q", envelopes: [sealedNow])
    XCTAssertEqual(try container.commit([now])[0].get(), [.stored])
    _ = try vault.rotate(containers: QueueContainerProvider(), options: RotationOptions(retireUnused: false))
    XCTAssertGreaterThan(vault.activeVersion, first)
    let before = GroupCommit.Request(records: [(stale, Array("payload".utf8))], queue: "q", envelopes: [sealedBefore])
    XCTAssertEqual(try container.commit([before])[0].get(), [.stored])
    let versions = Dictionary(uniqueKeysWithValues: try container.list().map { ($0.id, $0.keyVersion) })
    XCTAssertEqual(versions[stale], vault.activeVersion, "sealed again under the active version")
    let claimed = try container.claim(queue: "q", maxCount: 2)
    let payloads = Dictionary(
      uniqueKeysWithValues: claimed.map { ($0.id, String(decoding: $0.payload, as: UTF8.self)) })
    XCTAssertEqual(payloads[current], "as sealed", "the caller's envelope, stored as it was")
    XCTAssertEqual(payloads[stale], "payload", "the record, sealed again")
  }

  /// A seal ahead of the commit that finds the key gone (a rotation in another process retired the
  /// version it had just reloaded, or deleted its key) is left to the commit, which seals the record
  /// inside its transaction; any other failure of it is the caller's at once.
  func testASealAheadThatFindsTheKeyGoneIsSealedInTheCommit() throws {
    let temporary = TemporaryDirectory()
    let shared = InMemoryKeyStore()
    let next = LockedValue<InterposedKeyStore.Answer?>(nil)
    let locked = LockedValue(false)
    let interposed = LockedValue(0)
    let store = InterposedKeyStore(shared) { call in
      guard case .loadKey = call else { return .forward }
      if locked.withLock({ fail in
        defer { fail = false }
        return fail
      }) {
        throw KeyStoreError.locked
      }
      guard
        let answer = next.withLock({ answer in
          defer { answer = nil }
          return answer
        })
      else { return .forward }
      interposed.withLock { $0 += 1 }
      return answer
    }
    let home = temporary.sub("home")
    let writer = try Vault.create(home: home, store: StoreDescriptor(kind: .memory), resolver: .fixed(store))
    let container = try QueueContainer(path: temporary.sub("q.sqlite"), vault: writer)
    let rotator = try Vault.open(home: home, resolver: .fixed(shared))
    _ = try rotator.rotate(containers: QueueContainerProvider())
    // The seal ahead reloads, finds the new version's key absent (keyMissing), and leaves the record
    // to the commit, whose own read of the key succeeds.
    next.withLock { $0 = .absent }
    let id = UUID()
    XCTAssertEqual(try container.enqueue(Array("kept".utf8), queue: "q", id: id), .stored)
    XCTAssertEqual(interposed.withLock { $0 }, 1, "the seal ahead found the key gone")
    XCTAssertEqual(writer.activeVersion, rotator.activeVersion)
    let claimed = try container.claim(queue: "q", maxCount: 1)
    XCTAssertEqual(claimed.map(\.id), [id])
    XCTAssertEqual(claimed.first.map { String(decoding: $0.payload, as: UTF8.self) }, "kept")

    // A locked store is not left to the commit: the caller hears of it, and nothing is stored.
    _ = try rotator.rotate(containers: QueueContainerProvider())
    locked.withLock { $0 = true }
    XCTAssertThrowsError(try container.enqueue(Array("refused".utf8), queue: "q")) {
      XCTAssertEqual($0 as? KeyStoreError, .locked)
    }
    XCTAssertEqual(try container.stats().total, 1)
  }

  /// A request the cap refuses fails alone; records of the same group are never the cap's victims.
  func testACapRefusalInAGroupIsThatRequestsAlone() throws {
    let temporary = TemporaryDirectory()
    let vault = try Vault.create(
      home: temporary.sub("home"), store: StoreDescriptor(kind: .memory), resolver: .fixed(InMemoryKeyStore()))
    let container = try QueueContainer(
      path: temporary.sub("q.sqlite"), vault: vault, configuration: QueueConfiguration(byteCap: 4096))
    let small = GroupCommit.Request(records: [(UUID(), Array(repeating: 1, count: 1000))], queue: "q")
    let large = GroupCommit.Request(records: [(UUID(), Array(repeating: 2, count: 3500))], queue: "q")
    let results = container.commit([small, large])
    XCTAssertEqual(try results[0].get(), [.stored])
    XCTAssertThrowsError(try results[1].get(), "the cap cannot drop the small record of the same group")
    XCTAssertEqual(try container.stats().total, 1)
  }

  private func waitUntil(_ condition: () -> Bool) -> Bool {
    let deadline = Date().addingTimeInterval(10)
    while !condition() {
      if Date() > deadline { return false }
      usleep(1000)
    }
    return true
  }
}

private final class CommitLog: @unchecked Sendable {
  private let lock = NSLock()
  private var recorded: [[String]] = []
  func add(_ group: [String]) { lock.withLock { recorded.append(group) } }
  var groups: [[String]] { lock.withLock { recorded } }
}

private final class Results: @unchecked Sendable {
  private let lock = NSLock()
  private var results: [String: Result<[EnqueueOutcome], any Error>] = [:]
  func set(_ name: String, _ result: Result<[EnqueueOutcome], any Error>) { lock.withLock { results[name] = result } }
  func get(_ name: String) -> Result<[EnqueueOutcome], any Error>? { lock.withLock { results[name] } }
  var count: Int { lock.withLock { results.count } }
}
