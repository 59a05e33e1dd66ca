import Foundation

/// Group commit: enqueues from several threads that arrive while a commit is under way share the
/// next transaction and its one fsync, as a database's log writer does. The first caller to find
/// no commit running leads: it takes every request waiting, commits them together, and wakes the
/// others; each caller still returns only after the commit that holds its records has returned,
/// so the durability promise of a single enqueue is unchanged. A lone caller leads a group of one,
/// paying nothing but an uncontended lock.
///
/// Each caller sleeps on a `WakeUp` of its own: the leader wakes the callers whose records it
/// committed, one by one, and hands the lead to the first caller that arrived during its commit.
/// Nobody else is woken: no caller wakes to find its records not yet committed, and none wakes to
/// queue for the lock. (Through one condition broadcast, four enqueueing threads spent about half
/// of their CPU waking and switching: 27 futex calls per commit of four.)
///
/// A leader first gathers: when the last commit saw more callers than are waiting now (those it
/// just woke, about to come back with their next record), it waits for them, at most
/// `gatherLimit`, as PostgreSQL's `commit_delay` does. Without that, four threads settled into
/// two groups of about two, each paying a whole fsync (measured: 2.3 requests per commit). A
/// gather that times out lowers the expectation to the callers that came, so a caller that went
/// away costs one wait; a lone caller never waits.
final class GroupCommit: @unchecked Sendable {
  /// One enqueue waiting to be committed, and what became of it.
  final class Request {
    let records: [(id: UUID, payload: [UInt8])]
    let queue: String
    /// The only queues whose records the cap may drop to make room for these, within what the
    /// container allows; nil: what the container allows.
    let victims: Set<String>?
    /// The records' envelopes, in order, sealed by the caller before it joined a group, so that
    /// callers seal at once on their own threads rather than one after another in the leader's
    /// transaction; nil: sealed there. The commit seals a record again when the vault's active
    /// version inside the transaction is not the one it was sealed under (a rotation came between).
    let envelopes: [[UInt8]]?
    /// Set under the lock by the leader once the group's commit returned (or failed), before it
    /// signals `wakeUp`.
    fileprivate(set) var result: Result<[EnqueueOutcome], any Error>?
    /// Signalled once, when `result` is set or when this request's caller is to lead.
    fileprivate let wakeUp = WakeUp()

    init(
      records: [(id: UUID, payload: [UInt8])], queue: String, victims: Set<String>? = nil, envelopes: [[UInt8]]? = nil
    ) {
      precondition(envelopes == nil || envelopes?.count == records.count, "one envelope per record")
      self.records = records
      self.queue = queue
      self.victims = victims
      self.envelopes = envelopes
    }
  }

  /// Its lock guards the fields below; only a gathering leader waits on its condition.
  private let condition = MonotonicCondition()
  private var waiting: [Request] = []
  /// Whether a caller leads (gathers, commits, or is being handed the lead).
  private var leading = false
  /// How many callers the last commit saw (its group and those that arrived meanwhile): how many
  /// the next leader gathers.
  private var expected = 1
  /// Whether a leader is gathering (an arriving caller then wakes it).
  private var gathering = false
  /// The longest a leader waits for callers to come back: less than a commit (about 0.2–0.4 ms
  /// here, most of it the fsync), so gathering never costs more than the commit it saves.
  let gatherLimit: TimeInterval

  /// - Parameter gatherLimit: the longest a leader waits for the callers the last commit saw.
  init(gatherLimit: TimeInterval = 0.000_2) {
    self.gatherLimit = gatherLimit
  }

  /// How many commits ran, and how many requests they held (for tests and benchmarks).
  private(set) var statistics = (commits: 0, requests: 0)

  /// How many requests wait for the next commit (for tests).
  var waitingCount: Int {
    condition.lock()
    defer { condition.unlock() }
    return waiting.count
  }

  /// How many callers the next leader gathers (for tests).
  var expectedCallers: Int {
    condition.lock()
    defer { condition.unlock() }
    return expected
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
    if leading {
      // The gathering leader needs waking only once every caller it waits for has come.
      if gathering, waiting.count >= expected { condition.signal() }
      condition.unlock()
      request.wakeUp.wait()
      if let result = request.result { return try result.get() }
      // Handed the lead by the last leader: `leading` stayed true for this caller.
      condition.lock()
    } else {
      leading = true
    }
    if waiting.count < expected {
      gathering = true
      let deadline = MonotonicCondition.deadline(after: gatherLimit)
      while waiting.count < expected, condition.wait(until: deadline) {}
      gathering = false
      expected = min(expected, waiting.count)
    }
    let group = waiting
    waiting = []
    condition.unlock()
    let results = commit(group)
    // A request left without a result would take its wake-up for the lead.
    precondition(results.count == group.count, "one result per request")
    condition.lock()
    for (member, result) in zip(group, results) { member.result = result }
    statistics.commits += 1
    statistics.requests += group.count
    expected = group.count + waiting.count
    // The first caller that arrived during the commit leads the next one; with none, the next
    // caller to arrive does.
    let next = waiting.first
    if next == nil { leading = false }
    condition.unlock()
    // The group first: a next leader woken before two hundred of them were could see its gather
    // end before they came back (review: 131 requests per commit instead of 164 at 200 threads).
    for member in group where member !== request { member.wakeUp.signal() }
    next?.wakeUp.signal()
    return try request.result!.get()
  }
}
