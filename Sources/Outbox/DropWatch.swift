import Foundation
import VaultQueue

/// Notices records a container's cap or age limit dropped since the last look, so that a delivery
/// pass can log them: those drops delete records the app was told were stored, as `send` or `log`
/// stores new ones, and nothing else reports them while they happen (`queue stats` counts them).
///
/// Thread-safe.
package final class DropWatch: @unchecked Sendable {
  private let lock = NSLock()
  /// The ledger's counts at the last look; nil before the first.
  private var seen: [String: Int]?

  package init() {}

  /// The drops by reason (`cap`, `age`) that grew since the last call, with how many; the first
  /// call reports every such count above zero (drops before this process looked).
  ///
  /// - Parameter ledger: the container's drop ledger now (`QueueContainer.dropped()`).
  /// - Returns: reason → records dropped since the last call, only those above zero.
  package func grown(_ ledger: [String: Int]) -> [String: Int] {
    lock.withLock {
      defer { seen = ledger }
      var grown: [String: Int] = [:]
      for reason in ["cap", "age"] {
        let count = (ledger[reason] ?? 0) - (seen?[reason] ?? 0)
        if count > 0 { grown[reason] = count }
      }
      return grown
    }
  }

  /// Reads `container`'s drop ledger and logs, as a warning, what its cap or age limit dropped
  /// since the last look (a count and a reason, never an id or a content). A ledger that cannot be
  /// read is left for the next pass.
  package func logDrops(of container: QueueContainer, to logger: DeliveryLogger) {
    guard let ledger = try? container.dropped() else { return }
    for (reason, count) in grown(ledger).sorted(by: { $0.key < $1.key }) {
      logger.warning(
        reason == "cap"
          ? "records dropped to keep the container under its byte cap" : "records dropped for their age",
        metadata: ["container": container.path, "reason": reason, "count": "\(count)"])
    }
  }
}
