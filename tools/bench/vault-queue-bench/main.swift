// Queue benchmarks for tools/bench-queue.sh. Every vault figure is measured beside a baseline in
// the same process and run: plain SQLite with the same pragmas (WAL, synchronous=FULL,
// secure_delete=ON) and no encryption, through the same C library.
//
//   vault-queue-bench DIR SECONDS                 queue benchmarks
//   vault-queue-bench DIR SECONDS telemetry URL   telemetry: log from 4 threads, drain to URL
//   vault-queue-bench DIR SECONDS threads         durable enqueue from 4 threads (Scale.swift)
//   vault-queue-bench DIR SECONDS procs           durable enqueue from 2 processes (Scale.swift)
//   vault-queue-bench DIR SECONDS rotate MIB      rotation of a MIB-MiB container (Scale.swift)
//   vault-queue-bench DIR COUNT profile enqueue|enqueue-4threads|log|plain
//                                                 COUNT single 200-byte enqueues (from one thread
//                                                 or four), `Telemetry.log` calls or plain inserts
//                                                 and nothing else, for `valgrind --tool=callgrind`
//                                                 (instructions per call)
//
// With `procs`, VAULT_QUEUE_BENCH_SHARED_SYNC=MICROSECONDS adds an experiment: plain SQLite from 2
// processes committing with synchronous=NORMAL and sharing each WAL fdatasync across processes
// (`SharedSync`, its syncer waiting up to MICROSECONDS for the other process's insert), beside
// plain FULL: the most a group commit across processes could give on this machine.
//
// Prints lines "name value" (rates in records/s, latencies in ms, memory in MiB).
import CSQLite
import Foundation
import Telemetry
import Vault
import VaultCrypto
import VaultKeys
import VaultQueue

let arguments = CommandLine.arguments
guard arguments.count >= 3, let seconds = Double(arguments[2]) else {
  FileHandle.standardError.write(
    Data("usage: vault-queue-bench DIR SECONDS [telemetry URL | threads | procs | rotate MIB]\n".utf8))
  exit(64)
}
// One of the two processes `procs` starts: it opens the vault in its own way, so before the one below.
if arguments.count > 3, arguments[3] == "proc-worker" {
  try processWorker(arguments)
  exit(0)
}
let directory = arguments[1]
let vault = try Vault.create(
  home: directory + "/home", store: StoreDescriptor(kind: .memory), resolver: .fixed(InMemoryKeyStore()))

@Sendable func now() -> Double { Double(DispatchTime.now().uptimeNanoseconds) / 1e9 }
func report(_ name: String, _ value: Double) { print("\(name) \(String(format: "%.3f", value))") }
func residentMiB() -> Double {
  let status = (try? String(contentsOfFile: "/proc/self/status", encoding: .utf8)) ?? ""
  let line = status.split(separator: "\n").first { $0.hasPrefix("VmRSS:") } ?? ""
  return (Double(line.split(separator: " ").dropFirst().first ?? "0") ?? 0) / 1024
}

/// Plain SQLite: the same pragmas and a comparable row, no encryption. With `queueIndex`, it also
/// has the index a queue needs to find due records (the same indexes as vault's table).
final class PlainTable {
  var db: OpaquePointer?
  var insert: OpaquePointer?

  init(path: String, queueIndex: Bool = false) {
    sqlite3_open(path, &db)
    for pragma in [
      "PRAGMA journal_mode = WAL", "PRAGMA synchronous = FULL", "PRAGMA secure_delete = ON",
      "PRAGMA busy_timeout = 10000",
      """
      CREATE TABLE records (seq INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, queue TEXT NOT NULL,
        created_at INTEGER NOT NULL, size INTEGER NOT NULL, body BLOB NOT NULL)
      """,
    ] { sqlite3_exec(db, pragma, nil, nil, nil) }
    if queueIndex {
      sqlite3_exec(db, "ALTER TABLE records ADD COLUMN state TEXT NOT NULL DEFAULT 'pending'", nil, nil, nil)
      sqlite3_exec(db, "ALTER TABLE records ADD COLUMN next_attempt_at INTEGER NOT NULL DEFAULT 0", nil, nil, nil)
      sqlite3_exec(db, "CREATE INDEX records_due ON records (queue, state, next_attempt_at)", nil, nil, nil)
    }
    sqlite3_prepare_v2(
      db, "INSERT INTO records (id, queue, created_at, size, body) VALUES (?, ?, ?, ?, ?)", -1, &insert, nil)
  }

  func put(_ body: [UInt8]) {
    let id = randomUUID().uuidString.lowercased()
    sqlite3_reset(insert)
    sqlite3_bind_text(insert, 1, id, -1, vault_sqlite_transient())
    sqlite3_bind_text(insert, 2, "bench", -1, vault_sqlite_transient())
    sqlite3_bind_int64(insert, 3, Int64(Date().timeIntervalSince1970 * 1000))
    sqlite3_bind_int64(insert, 4, Int64(body.count))
    _ = body.withUnsafeBytes { sqlite3_bind_blob(insert, 5, $0.baseAddress, Int32($0.count), vault_sqlite_transient()) }
    guard sqlite3_step(insert) == SQLITE_DONE else { fatalError("plain insert failed") }
  }

  func begin() { sqlite3_exec(db, "BEGIN IMMEDIATE", nil, nil, nil) }
  func commit() { sqlite3_exec(db, "COMMIT", nil, nil, nil) }

  /// Inserts `count` rows in one durable commit: what a group commit of `count` callers writes,
  /// with nothing else (no seal, no hand-off between callers, no other index).
  func put(_ body: [UInt8], committingTogether count: Int) {
    begin()
    for _ in 0..<count { put(body) }
    commit()
  }

  deinit {
    sqlite3_finalize(insert)
    sqlite3_close(db)
  }
}

/// A random version-4 UUID from one `getrandom(2)` call, made as vault makes a record's id
/// (`SecureRandom.uuid`). Foundation's `UUID()` opens, reads and closes /dev/urandom on every call
/// here (three system calls, seen with strace), which a plain app need not pay: the plain baseline
/// used it until 2026-12-05.
func randomUUID() -> UUID {
  do { return try SecureRandom.uuid() } catch { fatalError("no random bytes: \(error)") }
}

/// Calls `body` until `seconds` pass; returns (operations per second, latencies in ms).
func timed(_ body: () throws -> Void) rethrows -> (Double, [Double]) {
  var latencies: [Double] = []
  let start = now()
  while now() - start < seconds {
    let t = now()
    try body()
    latencies.append((now() - t) * 1000)
  }
  return (Double(latencies.count) / (now() - start), latencies.sorted())
}

func percentile(_ sorted: [Double], _ p: Double) -> Double {
  sorted.isEmpty ? 0 : sorted[min(sorted.count - 1, Int(Double(sorted.count) * p))]
}

func freshPath() -> String { directory + "/bench-\(UUID().uuidString).sqlite" }

switch arguments.dropFirst(3).first {
case "telemetry":
  try telemetryBenchmark(endpoint: URL(string: arguments[4])!)
  exit(0)
case "threads":
  try threadsBenchmark(directory: directory, seconds: seconds, vault: vault)
  exit(0)
case "procs":
  try processesBenchmark(directory: directory, seconds: seconds)
  exit(0)
case "rotate":
  try rotationBenchmark(directory: directory, vault: vault, mebibytes: Int(arguments[4]) ?? 1024)
  exit(0)
case "profile":
  try profile(arguments[4], count: Int(seconds))
  exit(0)
default:
  break
}

/// Runs `body` on `count` threads of their own at once and waits for all of them.
func onThreads(_ count: Int, _ body: @escaping @Sendable (Int) -> Void) {
  let done = DispatchGroup()
  for index in 0..<count {
    done.enter()
    Thread {
      body(index)
      done.leave()
    }.start()
  }
  done.wait()
}

/// `count` calls of one kind and nothing else, so that an instruction count (callgrind) divided by
/// `count` is the cost of one call: a 200-byte enqueue, a `Telemetry.log` of the benchmark's event,
/// or a plain insert.
func profile(_ kind: String, count: Int) throws {
  let body = [UInt8](repeating: 0x61, count: 200)
  let container = try QueueContainer(
    path: freshPath(), vault: vault, configuration: QueueConfiguration(byteCap: 1 << 40))
  switch kind {
  case "enqueue":
    for _ in 0..<count { try container.enqueue(body, queue: "bench") }
  case "enqueue-4threads":
    // As the `threads` benchmark's callers: group commit puts concurrent calls in one transaction.
    onThreads(4) { _ in
      for _ in 0..<count / 4 {
        do { try container.enqueue(body, queue: "bench") } catch { fatalError("enqueue failed: \(error)") }
      }
    }
  case "log":
    struct Token: TokenProvider { func token(refresh: Bool) throws -> String { "test-token" } }
    let telemetry = Telemetry(
      container: container, tokens: Token(), sender: try HTTPBatchSender(endpoint: URL(string: "http://127.0.0.1:9")!))
    for _ in 0..<count { _ = try telemetry.log(type: "screen_view", payload: telemetryPayload()) }
  default:
    let plain = PlainTable(path: freshPath())
    for _ in 0..<count { plain.put(body) }
  }
}

/// The event the telemetry benchmarks log (about 360 bytes of JSON). A function: a global of
/// main.swift is set only when the top-level code reaches it, after the `switch` above has run.
func telemetryPayload() -> [String: JSONValue] {
  [
    "screen": .string("settings/notifications"), "duration_ms": .number(1234), "ok": .bool(true),
    "detail": .string(String(repeating: "abcdefghij", count: 15)),
  ]
}

/// Telemetry: `log` from four threads (rate and latency), then a drain of a full queue to the mock
/// server (claim, gzip batch, POST, ack), beside plain SQLite single-row inserts.
func telemetryBenchmark(endpoint: URL) throws {
  struct Token: TokenProvider { func token(refresh: Bool) throws -> String { "test-token" } }
  let payload = telemetryPayload()
  let body = [UInt8](repeating: 0x61, count: 300)
  // Three rounds, plain and vault alternated, medians reported (as the queue benchmarks do): one
  // plain measurement before all of vault's was at the mercy of whatever else the machine did.
  var plainRates: [Double] = []
  var logRates: [Double] = []
  let ceilings = Ceilings()
  var pooled: [Double] = []
  var telemetry: Telemetry?
  var container: QueueContainer?
  // Vault's ceiling stores records as large as the log's events (their JSON as the log writes it).
  let sample = TelemetryEvent(
    id: try SecureRandom.uuid(), date: Date(), type: "screen_view", payload: payload, sessionID: "bench")
  let sortedKeys = JSONEncoder()
  sortedKeys.outputFormatting = [.sortedKeys]
  let eventSized = [UInt8](repeating: 0x61, count: try sortedKeys.encode(sample).count)
  for round in 0..<3 {
    try inRotatedOrder(
      round: round,
      [
        {
          let plain = PlainTable(path: freshPath())
          plainRates.append(timed { plain.put(body) }.0)
        },
        {
          let roundContainer = try QueueContainer(
            path: freshPath(), vault: vault, configuration: QueueConfiguration(byteCap: 1 << 40))
          let roundTelemetry = Telemetry(
            container: roundContainer, tokens: Token(), sender: try HTTPBatchSender(endpoint: endpoint))
          let collected = Latencies()
          let failed = LockedValue(false)
          let start = now()
          // Four real threads: concurrentPerform runs only as many at once as there are CPUs (two
          // here), which measured two loggers, not four.
          onThreads(4) { _ in
            var local: [Double] = []
            while now() - start < seconds {
              let t = now()
              do {
                _ = try roundTelemetry.log(type: "screen_view", payload: payload)
              } catch {
                // A call that failed is not an event logged (an outside review: `try?` counted them).
                failed.withLock { $0 = true }
                break
              }
              local.append((now() - t) * 1000)
            }
            collected.add(local)
          }
          guard !failed.withLock({ $0 }) else {
            FileHandle.standardError.write(Data("vault-queue-bench: Telemetry.log failed; no figure\n".utf8))
            exit(1)
          }
          let values = collected.values
          logRates.append(Double(values.count) / (now() - start))
          pooled += values
          (telemetry, container) = (roundTelemetry, roundContainer)
        },
      ]
        + ceilings.steps(
          "telemetry", round: round, directory: directory, vault: vault, body: body, vaultBody: eventSized, callers: 4,
          seconds: seconds))
  }
  reportCeilings(
    "telemetry_log_4", figure: logRates, vaultCeiling: ceilings.vault, plainCeiling: ceilings.plain,
    baseline: plainRates)
  guard let telemetry, let container else { return }
  let latencies = pooled.sorted()
  report("telemetry_plain_insert_per_s", plainRates.sorted()[1])
  report("telemetry_log_4_threads_per_s", logRates.sorted()[1])
  report("telemetry_log_p50_ms", percentile(latencies, 0.5))
  report("telemetry_log_p99_ms", percentile(latencies, 0.99))

  // Fill to 40,000 events (group commits, so the fill is quick), then time the drain.
  let missing = max(0, 40_000 - (try container.count(queue: Telemetry.queueName, state: .pending)))
  let encoder = JSONEncoder()
  encoder.outputFormatting = [.sortedKeys]
  var json: [UInt8] = []
  for offset in stride(from: 0, to: missing, by: 1000) {
    let events = try (0..<min(1000, missing - offset)).map { _ in
      TelemetryEvent(
        id: try SecureRandom.uuid(), date: Date(), type: "screen_view", payload: payload, sessionID: "bench")
    }
    let records = try events.map { event in (id: event.id, payload: Array(try encoder.encode(event))) }
    json = records.last?.payload ?? json
    try container.enqueue(contentsOf: records, queue: Telemetry.queueName)
  }
  report("telemetry_event_json_bytes", Double(json.count))
  let total = try container.count(queue: Telemetry.queueName, state: .pending)
  let drainStart = now()
  let flushed = try telemetry.flush()
  let drainSeconds = now() - drainStart
  report("telemetry_drain_events", Double(flushed.delivered))
  report("telemetry_drain_batches", Double(flushed.batches))
  report("telemetry_drain_per_s", Double(flushed.delivered) / drainSeconds)
  report("telemetry_drain_pending_before", Double(total))
}

// VAULT_QUEUE_BENCH_SIZES restricts the single-record sizes (for profiling one case).
let singleSizes =
  ProcessInfo.processInfo.environment["VAULT_QUEUE_BENCH_SIZES"].map {
    $0.split(separator: ",").compactMap { Int($0) }
  } ?? [200, 2048]

// 1. Durable single-record enqueue, alternating plain and vault three times; medians reported.
for size in singleSizes {
  let body = [UInt8](repeating: 0x61, count: size)
  var plainRates: [Double] = []
  var indexedRates: [Double] = []
  var vaultRates: [Double] = []
  var vaultLatencies: [Double] = []
  for _ in 0..<3 {
    let plain = PlainTable(path: freshPath())
    plainRates.append(timed { plain.put(body) }.0)
    let indexed = PlainTable(path: freshPath(), queueIndex: true)
    indexedRates.append(timed { indexed.put(body) }.0)
    // No cap here: past 20 MB the cap's deletions would be measured too, and plain SQLite has none.
    let queue = try QueueContainer(path: freshPath(), vault: vault, configuration: QueueConfiguration(byteCap: 1 << 40))
    let (rate, latencies) = try timed { try queue.enqueue(body, queue: "bench") }
    vaultRates.append(rate)
    vaultLatencies += latencies
  }
  vaultLatencies.sort()
  report("single_\(size)_plain_per_s", plainRates.sorted()[1])
  report("single_\(size)_plain_indexed_per_s", indexedRates.sorted()[1])
  report("single_\(size)_vault_per_s", vaultRates.sorted()[1])
  report("single_\(size)_vault_p50_ms", percentile(vaultLatencies, 0.5))
  report("single_\(size)_vault_p99_ms", percentile(vaultLatencies, 0.99))
}

// 2. Group commit: 1,000 records of 200 B per transaction.
do {
  let body = [UInt8](repeating: 0x62, count: 200)
  var plainRates: [Double] = []
  var vaultRates: [Double] = []
  for _ in 0..<3 {
    let plain = PlainTable(path: freshPath())
    plainRates.append(
      timed {
        plain.begin()
        for _ in 0..<1000 { plain.put(body) }
        plain.commit()
      }.0 * 1000)
    let queue = try QueueContainer(path: freshPath(), vault: vault, configuration: QueueConfiguration(byteCap: 1 << 40))
    vaultRates.append(
      try timed { try queue.enqueue(contentsOf: (0..<1000).map { _ in (randomUUID(), body) }, queue: "bench") }.0
        * 1000)
  }
  report("group_1000_plain_per_s", plainRates.sorted()[1])
  report("group_1000_vault_per_s", vaultRates.sorted()[1])
}

// 3. Rotation of a full 20 MB queue of 1 KiB records, and memory while the queue sits at its cap.
do {
  let body = [UInt8](repeating: 0x63, count: 1024 - Envelope.overhead)
  let queue = try QueueContainer(path: freshPath(), vault: vault)  // default 20 MB cap
  var atCap = 0.0
  for round in 0..<60 {  // 60 × 1,000 KiB = 3 × the cap
    try queue.enqueue(contentsOf: (0..<1000).map { _ in (UUID(), body) }, queue: "bench")
    if round == 19 { atCap = residentMiB() }
  }
  report("cap_rss_at_cap_mib", atCap)
  report("cap_rss_after_3x_cap_mib", residentMiB())
  let stats = try queue.stats()
  report("cap_records", Double(stats.total))
  report("cap_dropped", Double(stats.dropped["cap"] ?? 0))
  let start = now()
  let rotation = try vault.rotate(containers: QueueContainerProvider())
  let elapsed = now() - start
  // Rotation re-seals every container the vault registers (the earlier measurements' too), so
  // the rate counts every record it re-sealed, not only this queue's.
  let resealed = Double(rotation.resealed.values.reduce(0, +))
  report("rotate_records", resealed)
  report("rotate_containers", Double(rotation.resealed.count))
  report("rotate_seconds", elapsed)
  report("rotate_records_per_s", resealed / elapsed)
}
