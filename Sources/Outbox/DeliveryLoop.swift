import Foundation

/// The background loop of the outbox and of telemetry (one implementation, so they cannot drift
/// apart): a pass at start, then after the shorter of the period and the time until the earliest
/// record the pass knows is due, at once on `trigger`, and at once, restarting the backoff of
/// records that waited for the network, on every network change.
///
/// The loop runs on a thread of its own: a pass may block it (a blocking transport, SQLite's
/// fsync) without holding a thread of Swift's concurrency pool. Triggers do not pile up: any
/// number of them while a pass runs make one more pass.
package final class DeliveryLoop: @unchecked Sendable {
  /// What a pass tells the loop.
  package enum Step: Sendable {
    /// Wait for the next trigger, the period, or `dueIn` seconds when given (the earliest
    /// record known to be waiting is due then).
    case wait(dueIn: TimeInterval?)
    /// The owner is gone: the loop ends.
    case finish
  }

  private let name: String
  private let period: @Sendable () -> TimeInterval
  private let pass: @Sendable (_ resetBackoff: Bool) -> Step
  private let condition = NSCondition()
  private var running = false
  private var wanted = false
  private var resetWanted = false
  private var watch: (any NetworkWatch)?
  private var finished: DispatchSemaphore?
  private var thread: Thread?

  /// A wake this much after a record's due time finds it due (the container keeps milliseconds).
  static let slack: TimeInterval = 0.01

  /// The longest wait between passes for a configured `period`: NaN is 60 s (a period that is not
  /// a number made every wait end at once, a busy loop); at least 10 ms (0 or less made a pass
  /// every millisecond, an outside review); at most a week (an infinite period, or one of 1e10 s,
  /// made `NSCondition.wait(until:)` trap, killing the app after its first pass; a week keeps
  /// `vault telemetry watch --interval 86400` four times longer in power-saver, as it says).
  package static func waitingPeriod(_ period: TimeInterval) -> TimeInterval {
    period.isNaN ? 60 : min(max(period, minimumPeriod), maximumPeriod)
  }

  /// The shortest and longest waits between passes.
  package static let minimumPeriod: TimeInterval = 0.01
  package static let maximumPeriod: TimeInterval = 604_800

  /// - Parameters:
  ///   - name: the thread's name.
  ///   - period: the longest wait between passes, read before each wait (a power policy may stretch it).
  ///   - pass: one delivery pass; `resetBackoff` asks it to make due what waited for the network first.
  package init(
    name: String, period: @escaping @Sendable () -> TimeInterval,
    pass: @escaping @Sendable (_ resetBackoff: Bool) -> Step
  ) {
    self.name = name
    self.period = period
    self.pass = pass
  }

  package var isRunning: Bool { condition.withLock { running } }

  /// Starts the loop (a pass at once) and, when given, the network watch. Calling it again while
  /// running does nothing.
  /// - Throws: what `network.watch` throws; the loop is then not started.
  package func start(network: (any NetworkChangeSource)?) throws {
    let claimed = condition.withLock { () -> Bool in
      guard !running, finished == nil else { return false }
      running = true
      wanted = true
      return true
    }
    guard claimed else { return }
    if let network {
      do {
        let watch = try network.watch { [weak self] in self?.trigger(resetBackoff: true) }
        condition.withLock { self.watch = watch }
      } catch {
        condition.withLock { running = false }
        throw error
      }
    }
    let done = DispatchSemaphore(value: 0)
    let thread = Thread { [self] in
      run()
      done.signal()
    }
    thread.name = name
    condition.withLock {
      finished = done
      self.thread = thread
    }
    thread.start()
  }

  /// Asks for a pass now. With `resetBackoff`, the pass first makes due what waited for the network.
  package func trigger(resetBackoff: Bool = false) {
    condition.withLock {
      guard running else { return }
      wanted = true
      if resetBackoff { resetWanted = true }
      condition.signal()
    }
  }

  /// Stops the loop: no pass starts after it returns (a pass already running finishes first). From
  /// the loop's own thread (a callback of a pass) it returns without waiting.
  package func stop() {
    let (watch, done, thread) = condition.withLock { () -> ((any NetworkWatch)?, DispatchSemaphore?, Thread?) in
      running = false
      condition.signal()
      defer {
        self.watch = nil
        finished = nil
        self.thread = nil
      }
      return (self.watch, finished, self.thread)
    }
    watch?.stop()
    guard let done, thread !== Thread.current else { return }
    done.wait()
  }

  private func run() {
    var deadline = Date.distantPast
    while true {
      condition.lock()
      while running, !wanted, Date() < deadline { _ = condition.wait(until: deadline) }
      guard running else {
        condition.unlock()
        return
      }
      let reset = resetWanted
      wanted = false
      resetWanted = false
      condition.unlock()
      switch pass(reset) {
      case .finish: return
      case .wait(let dueIn):
        deadline = Date() + min(Self.waitingPeriod(period()), dueIn.map { max($0, 0) + Self.slack } ?? .infinity)
      }
    }
  }
}
