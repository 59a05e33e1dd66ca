import Foundation
import Outbox
import Telemetry
import Vault
import VaultQueue

/// What the app's unit tests use (kept here so the guide's test setup compiles with the app).
enum TestSupport {
  // guide:in-memory
  /// A vault whose keys live in memory only: for unit tests, never for data that must survive.
  static func makeTestVault(in directory: String) throws -> (Vault, QueueContainer) {
    let vault = try Vault.create(
      home: directory + "/home", store: StoreDescriptor(kind: .memory), resolver: .fixed(InMemoryKeyStore()))
    let container = try QueueContainer(
      path: directory + "/home/queue.sqlite", vault: vault,
      configuration: QueueConfiguration(attemptCeiling: 2, parkAfter: 0))  // parked at the second refusal
    return (vault, container)
  }
  // guide:end

  // guide:test-doubles
  /// A server as a test wants it: every message answered with `result`.
  struct AnsweringTransport: SynchronousTransport {
    let result: DeliveryResult
    func deliverSynchronously(id: UUID, payload: Data) -> DeliveryResult { result }
  }

  /// A collector that accepts every batch, and a token that never changes.
  struct AcceptingCollector: BatchSender {
    func send(_ batch: TelemetryBatch, token: String) -> SendResult { .status(200, retryAfter: nil) }
  }

  struct FixedToken: TokenProvider {
    func token(refresh: Bool) throws -> String { "test-token" }
  }
  // guide:end

  /// Runs the set-up above as a unit test would (`notes DIR selftest`): a message the server
  /// refuses twice is parked, and one it refuses for good goes to review.
  static func selfTest(in directory: String) async throws -> Outbox.Pass {
    let (_, container) = try makeTestVault(in: directory)
    var total = Outbox.Pass()
    for answer in [DeliveryResult.retry(kind: "http.503", after: 0), .reject(kind: "http.400")] {
      let outbox = Outbox(container: container, queue: "\(answer)", transport: AnsweringTransport(result: answer))
      _ = try outbox.send(Data("a test message".utf8))
      for round in 0..<2 {
        // A retry due at once is due from the next millisecond: a pass that starts in the same
        // millisecond as the refusal leaves it for later (CI once ran both passes in one).
        if round > 0 { try await Task.sleep(for: .milliseconds(5)) }
        let pass = try await outbox.deliverDue()
        total.retrying += pass.retrying
        total.parked += pass.parked
        total.rejected += pass.rejected
      }
    }
    return total
  }

  // guide:rotate-in-app
  /// What `vault rotate --if-due` does, from inside the app (for apps without a systemd timer).
  static func rotateIfDue(_ vault: Vault) throws {
    if vault.rotationSchedule(maxAgeDays: 90).due {
      let report = try vault.rotate()
      for (version, reasons) in report.keptBecause {
        print("kept key version \(version): \(reasons.joined(separator: "; "))")
      }
    }
  }
  // guide:end
}
