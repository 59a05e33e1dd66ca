import Foundation
import VaultCrypto
import VaultQueue

/// Send-then-deliver: `send` returns once the message is sealed and committed to disk; delivery
/// happens in the background through a `Transport`, with retries, backoff and parking owned here
/// (and only here).
///
/// Delivery runs on start (leftovers from an earlier run), after each send, on a timer, and on
/// `trigger()`. Thread-safe.
public final class Outbox: @unchecked Sendable {
  public let container: QueueContainer
  public let queue: String
  let transport: any Transport
  let interval: TimeInterval
  let lease: TimeInterval
  private let worker = DispatchQueue(label: "vault.outbox.delivery")
  private let lock = NSLock()
  private var timer: DispatchSourceTimer?
  private var passScheduled = false

  /// What one delivery pass did.
  public struct Pass: Sendable, Equatable, Codable {
    public var delivered = 0
    public var retrying = 0
    public var parked = 0
    public var rejected = 0
    /// Records still waiting (not yet due, or left for a later pass) after this pass.
    public var pending = 0

    public init() {}
  }

  /// The moment a message is safe: it is sealed and on disk.
  public struct Receipt: Sendable, Equatable {
    public let id: UUID
    public let duplicate: Bool
  }

  public init(
    container: QueueContainer, queue: String = "outbox", transport: any Transport, interval: TimeInterval = 30,
    lease: TimeInterval = 120
  ) {
    self.container = container
    self.queue = queue
    self.transport = transport
    self.interval = interval
    self.lease = lease
  }

  /// Saves `message` durably (the "saved" moment an app uses to clear its editor) and asks the
  /// background loop, if started, to deliver it. Never waits for the network.
  @discardableResult
  public func send(_ message: [UInt8], id: UUID? = nil) throws -> Receipt {
    // Random ids come from the DRBG: Foundation's UUID() repeats itself without /dev/urandom.
    let id = try id ?? SecureRandom.uuid()
    let outcome = try container.enqueue(message, queue: queue, id: id)
    trigger()
    return Receipt(id: id, duplicate: outcome == .duplicate)
  }

  /// Starts background delivery: a pass now (leftovers from a previous run), then on every
  /// trigger and every `interval` seconds.
  public func start() {
    lock.withLock {
      guard timer == nil else { return }
      let source = DispatchSource.makeTimerSource(queue: worker)
      source.schedule(deadline: .now(), repeating: interval)
      source.setEventHandler { [weak self] in self?.runScheduledPass() }
      source.resume()
      timer = source
    }
  }

  public func stop() {
    lock.withLock {
      timer?.cancel()
      timer = nil
    }
    worker.sync {}
  }

  /// Asks for a delivery pass soon (after a send, or when connectivity returns). Passes do not pile up.
  public func trigger() {
    let start = lock.withLock { () -> Bool in
      guard timer != nil, !passScheduled else { return false }
      passScheduled = true
      return true
    }
    if start { worker.async { [weak self] in self?.runScheduledPass() } }
  }

  private func runScheduledPass() {
    lock.withLock { passScheduled = false }
    _ = try? deliverDue()
  }

  /// One delivery pass on the calling thread: every record that is due is attempted at most once.
  ///
  /// Each record is acked as soon as the server has it, and the leases of the records still
  /// waiting are renewed as the pass goes (see `Claim`), so a slow server cannot make them due
  /// again under another deliverer. Once `HTTPCancellation.cancelAll()` is called the pass stops
  /// before the next record, gives back every record it claimed and did not settle (the one whose
  /// request was cut short too: it may or may not have arrived, and stays queued), and returns.
  public func deliverDue(batch: Int = 50) throws -> Pass {
    var pass = Pass()
    var attempted = Set<UUID>()
    let start = container.now
    while !HTTPCancellation.isCancelled {
      let records = try container.claim(queue: queue, maxCount: batch, maxBytes: 4 << 20, lease: lease, dueBy: start)
      if records.isEmpty { break }
      let claim = Claim(container: container, records: records, lease: lease)
      // Only records this pass already attempted (a retry due again at once): they go back, and
      // the pass is over.
      let fresh = records.contains { !attempted.contains($0.id) }
      do {
        if fresh { try deliver(claim, attempted: &attempted, pass: &pass) }
        try claim.releaseUnsettled()
      } catch {
        _ = try? claim.releaseUnsettled()
        throw error
      }
      if !fresh { break }
    }
    pass.pending = try container.count(queue: queue, state: .pending)
    return pass
  }

  private func deliver(_ claim: Claim, attempted: inout Set<UUID>, pass: inout Pass) throws {
    for record in claim.records where !attempted.contains(record.id) {
      if HTTPCancellation.isCancelled { return }
      // Lost (the process was suspended past the lease and another deliverer took it): not ours.
      guard try claim.keep().contains(record.id) else { continue }
      attempted.insert(record.id)
      switch transport.deliver(id: record.id, payload: record.payload) {
      case .delivered:
        try container.ack([record.id])
        pass.delivered += 1
      case .unreachable(let kind) where kind == "cancelled" && HTTPCancellation.isCancelled:
        // Cut short by a stop: given back with the rest of the claim, not counted as a failure.
        return
      case .retry(let kind, let after):
        if try container.fail([record.id], errorKind: kind, retryAfter: after)[record.id] == .parked {
          pass.parked += 1
        } else {
          pass.retrying += 1
        }
      case .unreachable(let kind):
        _ = try container.fail([record.id], errorKind: kind, serverAnswered: false)
        pass.retrying += 1
      case .reject(let kind):
        try container.reject([record.id], errorKind: kind)
        pass.rejected += 1
      }
    }
  }
}
