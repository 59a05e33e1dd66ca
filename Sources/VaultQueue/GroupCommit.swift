import Foundation

/// Group commit: enqueues from several threads that arrive while a commit is under way share the
/// next transaction and its one fsync, as a database's log writer does. The first caller to find
/// no commit running leads: it takes every request waiting, commits them together, and wakes the
/// others; each caller still returns only after the commit that holds its records has returned,
/// so the durability promise of a single enqueue is unchanged. A lone caller leads a group of one,
/// paying nothing but an uncontended lock.
final class GroupCommit: @unchecked Sendable {
  /// One enqueue waiting to be committed, and what became of it.
  final class Request {
    let records: [(id: UUID, payload: [UInt8])]
    let queue: String
    /// Set under the lock by the leader once the group's commit returned (or failed).
    fileprivate(set) var result: Result<[EnqueueOutcome], any Error>?

    init(records: [(id: UUID, payload: [UInt8])], queue: String) {
      self.records = records
      self.queue = queue
    }
  }

  private let condition = NSCondition()
  private var waiting: [Request] = []
  private var leading = false

  /// How many commits ran, and how many requests they held (for tests and benchmarks).
  private(set) var statistics = (commits: 0, requests: 0)

  /// How many requests wait for the next commit (for tests).
  var waitingCount: Int {
    condition.lock()
    defer { condition.unlock() }
    return waiting.count
  }

  /// Adds `request` to the next group and returns once a commit has settled it.
  ///
  /// - Parameters:
  ///   - request: the records to store.
  ///   - commit: stores a group in one transaction and returns each request's result, in order;
  ///     called by one thread at a time, without this object's lock held.
  /// - Returns: the request's outcomes.
  /// - Throws: the request's own error, or the group's when the transaction failed.
  func submit(_ request: Request, commit: ([Request]) -> [Result<[EnqueueOutcome], any Error>]) throws
    -> [EnqueueOutcome]
  {
    condition.lock()
    waiting.append(request)
    while request.result == nil {
      if leading {
        condition.wait()
        continue
      }
      leading = true
      let group = waiting
      waiting = []
      condition.unlock()
      let results = commit(group)
      condition.lock()
      for (member, result) in zip(group, results) { member.result = result }
      statistics.commits += 1
      statistics.requests += group.count
      leading = false
      // Wakes the group's callers, and those that arrived meanwhile: one of them leads next.
      condition.broadcast()
    }
    condition.unlock()
    return try request.result!.get()
  }
}
