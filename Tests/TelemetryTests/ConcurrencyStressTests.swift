import Foundation
import Outbox
import Vault
import VaultKeys
import VaultQueue
import VaultTestSupport
import XCTest

@testable import Telemetry

/// What the stress test's threads did, kept under one lock so the checks at the end see all of it.
private final class StressLedger: @unchecked Sendable {
  private let lock = NSLock()
  private(set) var sealed: [(context: String, plaintext: [UInt8], envelope: Data)] = []
  private(set) var enqueued: [UUID: [UInt8]] = [:]
  private(set) var acked: [UUID] = []
  private(set) var logged: [UUID] = []
  private(set) var unexpected: [String] = []
  private(set) var busy = 0
  private(set) var rotationsRunning = 0

  func add(sealed context: String, _ plaintext: [UInt8], _ envelope: Data) {
    lock.withLock { sealed.append((context, plaintext, envelope)) }
  }
  func add(enqueued id: UUID, _ payload: [UInt8]) { lock.withLock { enqueued[id] = payload } }
  func remove(enqueued id: UUID) { _ = lock.withLock { enqueued.removeValue(forKey: id) } }
  func payload(of id: UUID) -> [UInt8]? { lock.withLock { enqueued[id] } }
  func add(acked ids: [UUID]) { lock.withLock { acked += ids } }
  func add(logged id: UUID) { lock.withLock { logged.append(id) } }
  func add(unexpected text: String) { lock.withLock { unexpected.append(text) } }
  func countBusy() { lock.withLock { busy += 1 } }
  func rotationStarted() { lock.withLock { rotationsRunning += 1 } }
  func rotationEnded() { lock.withLock { rotationsRunning -= 1 } }
  var rotating: Bool { lock.withLock { rotationsRunning > 0 } }

  /// Runs `body`, retrying while the container answers "busy" (the one expected failure under
  /// contention); any other error is recorded with what was being done, and nil comes back.
  func attempt<T>(_ what: String, _ body: () throws -> T) -> T? {
    for _ in 0..<50 {
      do {
        return try body()
      } catch QueueError.busy {
        countBusy()
        usleep(10_000)
      } catch {
        add(unexpected: "\(what): \(error)")
        return nil
      }
    }
    add(unexpected: "\(what): still busy after 50 tries")
    return nil
  }
}

/// Issue 15: the sanitizers' workload. Threads seal and open through `Vault`, enqueue, claim and
/// ack through a `QueueContainer`, and log through `Telemetry`, all at once, while rotations run
/// in this process and in a separate `vault rotate` process. Nothing may be lost, every envelope
/// must open, and "busy" is the only error allowed.
final class ConcurrencyStressTests: XCTestCase {
  private static let workers = 8
  /// Each worker does at least this many rounds, and keeps going while a rotation still runs.
  private static let minimumRounds = 40
  private static let maximumRounds = 400
  private static let rotationsHere = 3
  private static let rotationsElsewhere = 2

  private func vaultBinary() -> String {
    ProcessInfo.processInfo.environment["VAULT_BINARY"] ?? packageRoot() + "/.build/debug/vault"
  }

  func testThreadsSealEnqueueAndLogWhileRotationsRunHereAndInAnotherProcess() throws {
    let binary = vaultBinary()
    XCTAssertTrue(FileManager.default.isExecutableFile(atPath: binary), "build vault first: \(binary)")
    let temporary = TemporaryDirectory()
    let home = temporary.sub("home")
    let keyfile = temporary.sub("keys/vault.keys")
    try FileManager.default.createDirectory(
      atPath: temporary.sub("data"), withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
    let vault = try Vault.create(
      home: home, store: StoreDescriptor(kind: .keyfile, keyfile: keyfile),
      resolver: .fixed(KeyfileStore(path: keyfile)))
    let queue = try QueueContainer(path: temporary.sub("data/outbox.sqlite"), vault: vault)
    let sender = ScriptedSender()
    let telemetry = Telemetry(
      container: try QueueContainer(path: temporary.sub("data/telemetry.sqlite"), vault: vault),
      tokens: CountingTokens(), sender: sender)
    let ledger = StressLedger()
    let group = DispatchGroup()
    let start = DispatchSemaphore(value: 0)
    let started = Date()

    func spawnThread(_ body: @escaping @Sendable () -> Void) {
      group.enter()
      let thread = Thread {
        start.wait()
        body()
        group.leave()
      }
      thread.stackSize = 1 << 20
      thread.start()
    }

    // Both rotations count as running from before any thread starts until they are done, so the
    // workers are still busy for the whole of both.
    ledger.rotationStarted()
    ledger.rotationStarted()
    spawnThread {
      for round in 0..<Self.rotationsHere {
        _ = ledger.attempt("rotation \(round) in this process") { try vault.rotate() }
        usleep(50_000)
      }
      ledger.rotationEnded()
    }
    spawnThread {
      for round in 0..<Self.rotationsElsewhere {
        let result = ledger.attempt("spawning vault rotate") { try Spawn.run(binary, ["--home", home, "rotate"]) }
        if let result, result.status != 0 {
          ledger.add(unexpected: "vault rotate \(round) in another process: status \(result.status): \(result.error)")
        }
        usleep(50_000)
      }
      ledger.rotationEnded()
    }
    for worker in 0..<Self.workers {
      spawnThread {
        var round = 0
        while round < Self.minimumRounds || (ledger.rotating && round < Self.maximumRounds) {
          let context = "stress/\(worker)/\(round)"
          let plaintext = Array("sealed by \(worker) in round \(round)".utf8)
          if let envelope = ledger.attempt("seal", { try vault.seal(plaintext, context: context) }) {
            let opened = ledger.attempt("open") { try vault.open(envelope, context: context) }
            if opened.map(Array.init) != plaintext {
              ledger.add(unexpected: "\(context) did not open to its plaintext")
            }
            ledger.add(sealed: context, plaintext, envelope)
          }

          let id = UUID()
          let payload = Array("queued by \(worker) in round \(round)".utf8)
          // Recorded before it is enqueued: another worker may claim it before `enqueue` returns here.
          ledger.add(enqueued: id, payload)
          let outcome = ledger.attempt("enqueue") { try queue.enqueue(payload, queue: "q", id: id) }
          if outcome != .stored {
            ledger.remove(enqueued: id)
            if let outcome { ledger.add(unexpected: "enqueue of a fresh id answered \(outcome)") }
          }
          if let claimed = ledger.attempt("claim", { try queue.claim(queue: "q", maxCount: 3, lease: 600) }) {
            for record in claimed where ledger.payload(of: record.id) != Array(record.payload) {
              ledger.add(unexpected: "a claimed record's payload is not what was enqueued")
            }
            if ledger.attempt("ack", { try queue.ack(claimed.map(\.id)) }) != nil {
              ledger.add(acked: claimed.map(\.id))
            }
          }

          let event = ledger.attempt("log") {
            try telemetry.log(
              type: "stress", payload: ["worker": .number(Double(worker)), "round": .number(Double(round))])
          }
          if let event { ledger.add(logged: event) }
          if worker == 0, round % 4 == 0 { _ = ledger.attempt("flush") { try telemetry.flush() } }
          round += 1
        }
      }
    }
    for _ in 0..<(Self.workers + 2) { start.signal() }
    XCTAssertEqual(group.wait(timeout: .now() + 600), .success, "the stress threads did not finish in 10 minutes")
    let seconds = Date().timeIntervalSince(started)

    XCTAssertEqual(ledger.unexpected, [], "only 'busy' is an expected error")
    XCTAssertGreaterThanOrEqual(ledger.sealed.count, Self.workers * Self.minimumRounds)
    XCTAssertGreaterThanOrEqual(ledger.enqueued.count, Self.workers * Self.minimumRounds)
    XCTAssertGreaterThanOrEqual(ledger.logged.count, Self.workers * Self.minimumRounds)

    // Every rotation added a version: none was lost to the other process or to a racing writer.
    try vault.reload()
    XCTAssertEqual(vault.activeVersion, UInt32(1 + Self.rotationsHere + Self.rotationsElsewhere))

    // Every envelope sealed along the way still opens (`seal` keeps its key through rotations).
    for record in ledger.sealed {
      XCTAssertEqual(Array(try vault.open(record.envelope, context: record.context)), record.plaintext, record.context)
    }

    // Every record enqueued was acked or is still queued, never both, and the queued ones open.
    let acked = Set(ledger.acked)
    XCTAssertEqual(acked.count, ledger.acked.count, "a record was acked twice")
    let remaining = try queue.claim(queue: "q", maxCount: 100_000, maxBytes: 1 << 30)
    let remainingIDs = Set(remaining.map(\.id))
    XCTAssertTrue(acked.isDisjoint(with: remainingIDs), "an acked record is still queued")
    XCTAssertEqual(acked.union(remainingIDs), Set(ledger.enqueued.keys), "a record was lost or invented")
    for record in remaining { XCTAssertEqual(Array(record.payload), ledger.enqueued[record.id]) }

    // Every event logged is delivered once the queue drains.
    var report = try telemetry.flush()
    for _ in 0..<20 where report.pending > 0 { report = try telemetry.flush() }
    XCTAssertEqual(report.pending, 0)
    let delivered = Set(sender.sent.flatMap(\.batch.ids))
    XCTAssertEqual(Set(ledger.logged).subtracting(delivered), [], "a logged event was never delivered")
    XCTAssertTrue(delivered.isSubset(of: Set(ledger.logged)), "an event nobody logged was delivered")

    // After the last rotation nothing is left under an older key in either container.
    let active = vault.activeVersion
    XCTAssertEqual(Set(try queue.recordCounts().byVersion.keys).subtracting([active]), [])
    XCTAssertEqual(Set(try telemetry.container.recordCounts().byVersion.keys).subtracting([active]), [])
    print(
      "stress: \(ledger.sealed.count) sealed, \(ledger.enqueued.count) enqueued, \(ledger.logged.count) logged, "
        + "\(ledger.busy) busy retries, \(String(format: "%.1f", seconds)) s")
  }
}
