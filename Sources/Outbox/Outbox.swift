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
  public func deliverDue(batch: Int = 50) throws -> Pass {
    var pass = Pass()
    var attempted = Set<UUID>()
    let start = container.now
    while true {
      let claimed = try container.claim(queue: queue, maxCount: batch, maxBytes: 4 << 20, lease: lease, dueBy: start)
        .filter { !attempted.contains($0.id) }
      if claimed.isEmpty { break }
      var delivered: [UUID] = []
      for record in claimed {
        attempted.insert(record.id)
        switch transport.deliver(id: record.id, payload: record.payload) {
        case .delivered:
          delivered.append(record.id)
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
      try container.ack(delivered)
      pass.delivered += delivered.count
    }
    pass.pending = try container.count(queue: queue, state: .pending)
    return pass
  }
}
