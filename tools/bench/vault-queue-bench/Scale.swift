// The three figures at scale, each beside plain SQLite in the same run (tools/bench-queue.sh):
// durable enqueue from 4 threads on one container, from 2 processes on one container file, and
// the rotation of a 1 GiB container with its peak resident memory.
import CSQLite
import Foundation
import Vault
import VaultKeys
import VaultQueue

/// Latencies gathered from several threads, read once they have all finished.
final class Latencies: @unchecked Sendable {
  private let lock = NSLock()
  private var collected: [Double] = []

  func add(_ more: [Double]) { lock.withLock { collected += more } }
  var values: [Double] { lock.withLock { collected } }
}

/// A field of /proc/self/status (`VmRSS`, `VmHWM`) in MiB.
func statusMiB(_ field: String) -> Double {
  let status = (try? String(contentsOfFile: "/proc/self/status", encoding: .utf8)) ?? ""
  let line = status.split(separator: "\n").first { $0.hasPrefix(field + ":") } ?? ""
  return (Double(line.split(separator: " ").dropFirst().first ?? "0") ?? 0) / 1024
}

/// Sets the process's peak resident size (VmHWM) back to its current size (Linux ≥ 4.0), so the
/// peak read afterwards belongs to what runs next.
func resetPeakResident() -> Bool {
  let descriptor = open("/proc/self/clear_refs", O_WRONLY)
  guard descriptor >= 0 else { return false }
  defer { close(descriptor) }
  return write(descriptor, "5", 1) == 1
}

func removeDatabase(_ path: String) {
  for suffix in ["", "-wal", "-shm"] { unlink(path + suffix) }
}

/// The most a group commit of `callers` synchronous callers can give, measured: each caller waits
/// for its record to be durable before it makes the next, so at most `callers` records share a
/// commit, and that commit writes at least what plain SQLite's commit of as many rows writes (the
/// same pragmas and rows, no seal, no hand-off between callers, no due-record index). Rows per
/// second of such plain commits from one thread, on a fresh file at `path` (removed after).
func plainGroupedRate(path: String, body: [UInt8], callers: Int, seconds: Double) -> Double {
  defer { removeDatabase(path) }
  let table = PlainTable(path: path)
  var rows = 0
  let start = now()
  while now() - start < seconds {
    table.put(body, committingTogether: callers)
    rows += callers
  }
  return Double(rows) / (now() - start)
}

/// The most a group commit of `callers` synchronous callers can give vault, with a perfect
/// hand-off: one thread enqueues `callers` records in one transaction (one seal each, one
/// fsync), as a leader committing for its followers would, with no waiting and no waking. Records
/// per second on a fresh container at `path` (removed after).
func vaultBatchedRate(path: String, vault: Vault, body: [UInt8], callers: Int, seconds: Double) throws -> Double {
  defer { removeDatabase(path) }
  let queue = try QueueContainer(path: path, vault: vault, configuration: QueueConfiguration(byteCap: 1 << 40))
  var records = 0
  let start = now()
  while now() - start < seconds {
    try queue.enqueue(contentsOf: (0..<callers).map { _ in (randomUUID(), body) }, queue: "bench")
    records += callers
  }
  return Double(records) / (now() - start)
}

/// Runs one round's measurements, starting at a different one each round, so that none always
/// runs first (just after the previous round's files were removed) or last.
func inRotatedOrder(round: Int, _ steps: [() throws -> Void]) throws {
  for index in 0..<steps.count { try steps[(index + round) % steps.count]() }
}

/// The two ceilings of a figure, measured once a round: plain SQLite's and vault's, one thread
/// committing `callers` records at a time (see `plainGroupedRate` and `vaultBatchedRate`).
final class Ceilings {
  private(set) var plain: [Double] = []
  private(set) var vault: [Double] = []

  /// The round's two measurements, as steps for `inRotatedOrder`; vault's records hold
  /// `vaultBody` when given (the log's are as large as its events), else `body`.
  func steps(
    _ name: String, round: Int, directory: String, vault: Vault, body: [UInt8], vaultBody: [UInt8]? = nil,
    callers: Int, seconds: Double
  ) -> [() throws -> Void] {
    [
      {
        self.plain.append(
          plainGroupedRate(
            path: directory + "/\(name)-grouped-\(round).sqlite", body: body, callers: callers, seconds: seconds))
      },
      {
        self.vault.append(
          try vaultBatchedRate(
            path: directory + "/\(name)-batched-\(round).sqlite", vault: vault, body: vaultBody ?? body,
            callers: callers, seconds: seconds))
      },
    ]
  }
}

/// A ceiling measured beside a figure, as ratios taken round by round (a rate and its baseline
/// from the same round, never medians of different rounds): the median ratio of the figure, of
/// vault's ceiling and of plain's, and the rounds where the figure passed vault's ceiling, which
/// only a round the machine's other work disturbed can do (a single-threaded loop starved of CPU
/// collapses where four threads still get their share).
func reportCeilings(
  _ prefix: String, figure: [Double], vaultCeiling: [Double], plainCeiling: [Double], baseline: [Double]
) {
  func median(_ values: [Double]) -> Double { percentile(values.sorted(), 0.5) }
  let rounds = baseline.indices
  report(prefix + "_vs_plain_by_round", median(rounds.map { figure[$0] / baseline[$0] }))
  report(prefix + "_ceiling_vs_plain", median(rounds.map { vaultCeiling[$0] / baseline[$0] }))
  report(prefix + "_plain_ceiling_vs_plain", median(rounds.map { plainCeiling[$0] / baseline[$0] }))
  report(prefix + "_rounds_above_ceiling", Double(rounds.filter { figure[$0] > vaultCeiling[$0] }.count))
  for round in rounds {
    let line = String(
      format: "%@ round %d: figure %.0f/s, vault's ceiling %.0f/s, plain's %.0f/s, baseline %.0f/s\n", prefix, round,
      figure[round], vaultCeiling[round], plainCeiling[round], baseline[round])
    FileHandle.standardError.write(Data(line.utf8))
  }
}

func fileMiB(_ path: String) -> Double {
  var info = stat()
  return stat(path, &info) == 0 ? Double(info.st_size) / 1_048_576 : 0
}

/// Runs `count` threads of their own at once for `seconds`, each repeating the operation its
/// `setUp` returned (set-up, such as opening a connection, happens before the clock starts).
/// Returns the operations per second of all threads together, and every latency (ms), sorted.
func timedOnThreads(
  _ count: Int, seconds: Double, setUp: @escaping @Sendable (Int) throws -> () throws -> Void
) -> (rate: Double, latencies: [Double]) {
  let ready = DispatchGroup()
  let done = DispatchGroup()
  let go = DispatchSemaphore(value: 0)
  let collected = Latencies()
  for index in 0..<count {
    ready.enter()
    done.enter()
    Thread {
      let operation: () throws -> Void
      do { operation = try setUp(index) } catch { fatalError("set-up failed: \(error)") }
      ready.leave()
      go.wait()
      var local: [Double] = []
      let deadline = now() + seconds
      while now() < deadline {
        let t = now()
        do { try operation() } catch { fatalError("operation failed: \(error)") }
        local.append((now() - t) * 1000)
      }
      collected.add(local)
      done.leave()
    }.start()
  }
  ready.wait()
  let start = now()
  for _ in 0..<count { go.signal() }
  done.wait()
  let elapsed = now() - start
  let latencies = collected.values.sorted()
  return (Double(latencies.count) / elapsed, latencies)
}

/// Durable enqueue of 200 B records from 4 threads on one container, beside 4 threads of plain
/// SQLite inserts (each thread its own connection, as a plain app would do; every insert its own
/// durable commit). Alternates three times; medians of the rates, latencies of all three.
func threadsBenchmark(directory: String, seconds: Double, vault: Vault) throws {
  let body = [UInt8](repeating: 0x61, count: 200)
  var plainRates: [Double] = []
  var vaultRates: [Double] = []
  var plainLatencies: [Double] = []
  var vaultLatencies: [Double] = []
  var singleRates: [Double] = []
  let ceilings = Ceilings()
  for round in 0..<3 {
    try inRotatedOrder(
      round: round,
      [
        {
          let plainPath = directory + "/threads-plain-\(round).sqlite"
          _ = PlainTable(path: plainPath)  // the table exists before the four connections open
          let plain = timedOnThreads(4, seconds: seconds) { _ in
            let table = PlainTable(path: plainPath)
            return { table.put(body) }
          }
          plainRates.append(plain.rate)
          plainLatencies += plain.latencies
          removeDatabase(plainPath)
        },
        {
          // One thread of plain inserts: what the disk gives a single writer, the most four plain
          // writers can share, since each of their commits holds one record.
          let onePath = directory + "/threads-one-\(round).sqlite"
          let one = PlainTable(path: onePath)
          var count = 0
          let start = now()
          while now() - start < seconds {
            one.put(body)
            count += 1
          }
          singleRates.append(Double(count) / (now() - start))
          removeDatabase(onePath)
        },
        {
          let vaultPath = directory + "/threads-vault-\(round).sqlite"
          let queue = try QueueContainer(
            path: vaultPath, vault: vault, configuration: QueueConfiguration(byteCap: 1 << 40))
          let vaulted = timedOnThreads(4, seconds: seconds) { _ in
            { try queue.enqueue(body, queue: "bench") }
          }
          vaultRates.append(vaulted.rate)
          vaultLatencies += vaulted.latencies
        },
      ]
        + ceilings.steps(
          "threads", round: round, directory: directory, vault: vault, body: body, callers: 4, seconds: seconds))
  }
  // The figure's baseline: the faster of plain's four connections and its single thread.
  reportCeilings(
    "threads_4", figure: vaultRates, vaultCeiling: ceilings.vault, plainCeiling: ceilings.plain,
    baseline: zip(plainRates, singleRates).map { max($0, $1) })
  plainLatencies.sort()
  vaultLatencies.sort()
  report("threads_1_plain_per_s", singleRates.sorted()[1])
  report("threads_4_plain_per_s", plainRates.sorted()[1])
  report("threads_4_vault_per_s", vaultRates.sorted()[1])
  report("threads_4_plain_p99_ms", percentile(plainLatencies, 0.99))
  report("threads_4_vault_p50_ms", percentile(vaultLatencies, 0.5))
  report("threads_4_vault_p99_ms", percentile(vaultLatencies, 0.99))
}

/// Durable enqueue of 200 B records from 2 processes on one container file, beside 2 processes of
/// plain SQLite inserts on one file. Both processes of a pair open the vault (a keyfile store, as
/// two processes of an app would share it) or the plain file, then start at the same instant.
/// Alternates three times; medians of the rates, latencies of all three.
func processesBenchmark(directory: String, seconds: Double) throws {
  let keys = directory + "/procs-keys"
  try FileManager.default.createDirectory(atPath: keys, withIntermediateDirectories: true)
  guard chmod(keys, 0o700) == 0 else { fatalError("chmod failed") }
  let home = directory + "/procs-home"
  let vault = try Vault.create(home: home, store: StoreDescriptor(kind: .keyfile, keyfile: keys + "/vault.keys"))
  var plainRates: [Double] = []
  var vaultRates: [Double] = []
  var plainLatencies: [Double] = []
  var vaultLatencies: [Double] = []
  // VAULT_QUEUE_BENCH_PREFILL=N: both files start with N records of 200 B (default none).
  var plainCPU: [Double] = []
  var vaultCPU: [Double] = []
  let ceilings = Ceilings()
  let prefill = ProcessInfo.processInfo.environment["VAULT_QUEUE_BENCH_PREFILL"].flatMap { Int($0) } ?? 0
  let body = [UInt8](repeating: 0x61, count: 200)
  for round in 0..<3 {
    try inRotatedOrder(
      round: round,
      [
        {
          let plainPath = directory + "/procs-plain-\(round).sqlite"
          let table = PlainTable(path: plainPath)
          for offset in stride(from: 0, to: prefill, by: 1000) {
            table.begin()
            for _ in offset..<min(prefill, offset + 1000) { table.put(body) }
            table.commit()
          }
          let plain = try runWorkers("plain", path: plainPath, home: home, directory: directory, seconds: seconds)
          plainRates.append(plain.rate)
          plainLatencies += plain.latencies
          plainCPU.append(plain.cpuPerRecord)
          removeDatabase(plainPath)
        },
        {
          let vaultPath = directory + "/procs-vault-\(round).sqlite"
          let queue = try QueueContainer(
            path: vaultPath, vault: vault, configuration: QueueConfiguration(byteCap: 1 << 40))
          for offset in stride(from: 0, to: prefill, by: 1000) {
            try queue.enqueue(
              contentsOf: (offset..<min(prefill, offset + 1000)).map { _ in (UUID(), body) }, queue: "bench")
          }
          let vaulted = try runWorkers("vault", path: vaultPath, home: home, directory: directory, seconds: seconds)
          vaultRates.append(vaulted.rate)
          vaultLatencies += vaulted.latencies
          vaultCPU.append(vaulted.cpuPerRecord)
        },
      ]
        + ceilings.steps(
          "procs", round: round, directory: directory, vault: vault, body: body, callers: 2, seconds: seconds))
  }
  reportCeilings(
    "procs_2", figure: vaultRates, vaultCeiling: ceilings.vault, plainCeiling: ceilings.plain, baseline: plainRates)
  if ProcessInfo.processInfo.environment["VAULT_QUEUE_BENCH_POLL"] == "1" {
    // An experiment, not a baseline: how much of the plain rate is lost to SQLite's sleeping wait.
    var pollRates: [Double] = []
    for round in 0..<3 {
      let pollPath = directory + "/procs-poll-\(round).sqlite"
      _ = PlainTable(path: pollPath)
      pollRates.append(
        try runWorkers("plain-poll", path: pollPath, home: home, directory: directory, seconds: seconds).rate)
      removeDatabase(pollPath)
    }
    report("procs_2_plain_poll_per_s", pollRates.sorted()[1])
  }
  if let gather = ProcessInfo.processInfo.environment["VAULT_QUEUE_BENCH_SHARED_SYNC"].flatMap(Int.init) {
    // An experiment, not a baseline: the most a group commit shared between processes could give
    // here, measured on plain SQLite (no encryption, so an upper bound for vault). Each insert
    // commits with synchronous=NORMAL, then waits for an fdatasync of the WAL that began after its
    // commit, made by whichever process gets there first (`SharedSync`); the syncer first waits up
    // to `gather` µs for the other process's insert in flight. Alternated with plain FULL rounds.
    var fullRates: [Double] = []
    var sharedRates: [Double] = []
    var perSync: [Double] = []
    for round in 0..<3 {
      let fullPath = directory + "/procs-full-\(round).sqlite"
      _ = PlainTable(path: fullPath)
      fullRates.append(try runWorkers("plain", path: fullPath, home: home, directory: directory, seconds: seconds).rate)
      removeDatabase(fullPath)
      let sharedPath = directory + "/procs-shared-\(round).sqlite"
      _ = PlainTable(path: sharedPath)
      let shared = try runWorkers(
        "plain-shared-sync-\(gather)", path: sharedPath, home: home, directory: directory, seconds: seconds)
      sharedRates.append(shared.rate)
      let counters = SharedSync(path: sharedPath + "-sync").counters()
      perSync.append(shared.rate * seconds / Double(max(counters.completed, 1)))
      removeDatabase(sharedPath)
      unlink(sharedPath + "-sync")
    }
    report("procs_2_plain_full_per_s", fullRates.sorted()[1])
    report("procs_2_plain_shared_sync_per_s", sharedRates.sorted()[1])
    report("procs_2_plain_shared_sync_records_per_fsync", perSync.sorted()[1])
    report("procs_2_plain_shared_sync_vs_full", sharedRates.sorted()[1] / fullRates.sorted()[1])
  }
  plainLatencies.sort()
  vaultLatencies.sort()
  report("procs_2_plain_per_s", plainRates.sorted()[1])
  report("procs_2_vault_per_s", vaultRates.sorted()[1])
  report("procs_2_plain_p99_ms", percentile(plainLatencies, 0.99))
  report("procs_2_vault_p50_ms", percentile(vaultLatencies, 0.5))
  report("procs_2_vault_p99_ms", percentile(vaultLatencies, 0.99))
  report("procs_2_plain_cpu_us_per_record", plainCPU.sorted()[1] * 1e6)
  report("procs_2_vault_cpu_us_per_record", vaultCPU.sorted()[1] * 1e6)
}

/// Starts two worker processes (this executable, `proc-worker`) that begin together two seconds
/// from now; returns their records per second together and all their latencies.
private func runWorkers(_ kind: String, path: String, home: String, directory: String, seconds: Double) throws
  -> (rate: Double, latencies: [Double], cpuPerRecord: Double)
{
  let start = Date().timeIntervalSince1970 + 2
  var workers: [(Process, Pipe)] = []
  for _ in 0..<2 {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
    process.arguments = [directory, String(seconds), "proc-worker", kind, path, home, String(start)]
    let pipe = Pipe()
    process.standardOutput = pipe
    try process.run()
    workers.append((process, pipe))
  }
  var count = 0
  var elapsed = 0.0
  var cpu = 0.0
  var latencies: [Double] = []
  for (process, pipe) in workers {
    let output = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
    process.waitUntilExit()
    guard process.terminationStatus == 0 else { fatalError("a \(kind) worker failed") }
    var lines = output.split(separator: "\n")
    let summary = lines.removeFirst().split(separator: " ")  // "count N elapsed SECONDS cpu SECONDS"
    count += Int(summary[1])!
    elapsed = max(elapsed, Double(summary[3])!)
    cpu += Double(summary[5])!
    latencies += lines.map { Double($0)! }
  }
  return (Double(count) / elapsed, latencies, cpu / Double(max(count, 1)))
}

/// User and system CPU time this process has used, in seconds: unlike the rates, barely touched
/// by the other work on the machine.
func cpuSeconds() -> Double {
  var usage = rusage()
  getrusage(RUSAGE_SELF.rawValue, &usage)
  return Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec)
    + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6
}

/// One process of `processesBenchmark`:
///   vault-queue-bench DIR SECONDS proc-worker vault|plain PATH HOME START
/// opens PATH (the container, with the vault in HOME; or the plain file), waits for the wall-clock
/// time START, enqueues for SECONDS and prints "count N elapsed SECONDS cpu SECONDS", then each
/// latency (ms).
func processWorker(_ arguments: [String]) throws {
  guard arguments.count == 8, let seconds = Double(arguments[2]), let start = Double(arguments[7]) else {
    fatalError("usage: vault-queue-bench DIR SECONDS proc-worker vault|plain PATH HOME START")
  }
  let body = [UInt8](repeating: 0x61, count: 200)
  let operation: () throws -> Void
  if arguments[4].hasPrefix("plain") {
    let table = PlainTable(path: arguments[5])
    if arguments[4] == "plain-poll" {
      // Instead of SQLite's sleeps of 1, 2, 5, 10 … ms, retry the write lock every 0.1 ms.
      sqlite3_busy_handler(
        table.db,
        { _, tries in
          guard tries < 100_000 else { return 0 }
          usleep(100)
          return 1
        }, nil)
    }
    if arguments[4].hasPrefix("plain-shared-sync-"), let gather = Int(arguments[4].split(separator: "-").last!) {
      sqlite3_exec(table.db, "PRAGMA synchronous = NORMAL", nil, nil, nil)
      let sync = SharedSync(path: arguments[5] + "-sync")
      var wal: Int32 = -1
      operation = {
        sync.add(busy: 1)
        table.put(body)
        sync.add(busy: -1)
        if wal < 0 { wal = open(arguments[5] + "-wal", O_RDWR) }
        sync.awaitSync(of: wal, gatherMicroseconds: gather)
      }
    } else {
      operation = { table.put(body) }
    }
  } else {
    let vault = try Vault.open(home: arguments[6])
    let queue = try QueueContainer(
      path: arguments[5], vault: vault, configuration: QueueConfiguration(byteCap: 1 << 40))
    operation = { try queue.enqueue(body, queue: "bench") }
  }
  let wait = start - Date().timeIntervalSince1970
  guard wait > 0 else { fatalError("the worker was ready too late to start with the other") }
  usleep(UInt32(wait * 1_000_000))
  var latencies: [Double] = []
  let cpuBefore = cpuSeconds()
  let began = now()
  let deadline = began + seconds
  while now() < deadline {
    let t = now()
    try operation()
    latencies.append((now() - t) * 1000)
  }
  let elapsed = now() - began
  var output = "count \(latencies.count) elapsed \(elapsed) cpu \(cpuSeconds() - cpuBefore)\n"
  for latency in latencies { output += String(format: "%.4f\n", latency) }
  FileHandle.standardOutput.write(Data(output.utf8))
}

/// Rotation of a container holding `mebibytes` MiB of 1 KiB envelopes, beside plain SQLite
/// rewriting the same number of 1 KiB blobs (each read, and written back changed, in batches of
/// the rotation's batch size, then a TRUNCATE checkpoint as rotation does), before and after the
/// rotation. Both files are built fast (10,000 rows per transaction) and removed after. The
/// rotation's peak resident memory (VmHWM, reset just before it) and its resident memory at every
/// 16th progress report show whether memory grows with the container.
func rotationBenchmark(directory: String, vault: Vault, mebibytes: Int) throws {
  let envelopeSize = 1024
  let records = mebibytes * 1024 * 1024 / envelopeSize
  let batch = QueueConfiguration().resealBatch
  let chunk = 10_000

  // The plain rewrite runs before and after the rotation and its figure is the mean of the two:
  // the load of the other work on this machine drifts over the minutes between them.
  let plainPath = directory + "/rotate-plain.sqlite"
  let plain = PlainTable(path: plainPath)
  let blob = [UInt8](repeating: 0x63, count: envelopeSize)
  let plainBuild = now()
  for offset in stride(from: 0, to: records, by: chunk) {
    plain.begin()
    for _ in offset..<min(records, offset + chunk) { plain.put(blob) }
    plain.commit()
  }
  report("rotate_big_plain_build_seconds", now() - plainBuild)
  report("rotate_big_plain_file_mib", fileMiB(plainPath))
  var plainCPU: [Double] = []
  func rewritePlain() -> Double {
    let start = now()
    let startCPU = cpuSeconds()
    let rewritten = plain.rewriteAll(batch: batch)
    guard rewritten == records else { fatalError("plain rewrite saw \(rewritten) of \(records) rows") }
    plainCPU.append(cpuSeconds() - startCPU)
    return now() - start
  }
  let plainBefore = rewritePlain()

  let path = directory + "/rotate-vault.sqlite"
  let buildStart = now()
  do {
    let queue = try QueueContainer(path: path, vault: vault, configuration: QueueConfiguration(byteCap: 1 << 40))
    let payload = [UInt8](repeating: 0x63, count: envelopeSize - Envelope.overhead)
    for offset in stride(from: 0, to: records, by: chunk) {
      try queue.enqueue(
        contentsOf: (offset..<min(records, offset + chunk)).map { _ in (UUID(), payload) }, queue: "bench")
    }
  }
  report("rotate_big_build_seconds", now() - buildStart)
  report("rotate_big_vault_file_mib", fileMiB(path))

  /// Resident memory at each progress report, and when the last one came.
  final class Samples: @unchecked Sendable {
    let lock = NSLock()
    var reports = 0
    var resident: [(resealed: Int, mib: Double)] = []
    var lastReport = 0.0
  }
  let samples = Samples()
  let progress: @Sendable (RotationProgress) -> Void = { progress in
    // Reading /proc/self/status after every batch cost about 4 % of the rotation (perf): every
    // 16th report (the first batch's included) shows the trend as well.
    let sample = samples.lock.withLock { samples.reports % 16 == 1 }
    let mib = sample ? statusMiB("VmRSS") : 0
    samples.lock.withLock {
      samples.reports += 1
      if sample { samples.resident.append((progress.resealed, mib)) }
      samples.lastReport = now()
    }
  }
  let before = statusMiB("VmRSS")
  guard resetPeakResident() else { fatalError("cannot reset the peak resident size") }
  let start = now()
  let startCPU = cpuSeconds()
  let rotation = try vault.rotate(
    containers: QueueContainerProvider(configuration: QueueConfiguration(byteCap: 1 << 40)),
    options: RotationOptions(progress: progress))
  let end = now()
  let rotationCPU = cpuSeconds() - startCPU
  let peak = statusMiB("VmHWM")
  let resealed = rotation.resealed[path] ?? 0
  guard resealed == records else { fatalError("rotation re-sealed \(resealed) of \(records) records") }
  let resident = samples.lock.withLock { samples.resident }
  // The first report comes as the container starts; the second (sampled) after its first batch.
  let early = resident.first { $0.resealed > 0 }?.mib ?? 0
  report("rotate_big_records", Double(records))
  report("rotate_big_vault_seconds", end - start)
  // User and system time of all the process's threads: beside the wall-clock time, how much of the
  // rotation waited on the disk rather than the CPU.
  report("rotate_big_vault_cpu_seconds", rotationCPU)
  report("rotate_big_vault_after_last_batch_seconds", end - samples.lock.withLock { samples.lastReport })
  report("rotate_big_progress_reports", Double(samples.lock.withLock { samples.reports }))
  report("rotate_big_rss_before_mib", before)
  report("rotate_big_rss_first_batch_mib", early)
  report("rotate_big_rss_last_batch_mib", resident.last?.mib ?? 0)
  report("rotate_big_rss_peak_mib", peak)
  // The part of the rotation after re-sealing that reads every record again: counting per version.
  let countStart = now()
  _ = try QueueContainer(path: path, vault: vault, configuration: QueueConfiguration(byteCap: 1 << 40)).recordCounts()
  report("rotate_big_count_seconds", now() - countStart)
  removeDatabase(path)
  let plainAfter = rewritePlain()
  removeDatabase(plainPath)
  report("rotate_big_plain_before_seconds", plainBefore)
  report("rotate_big_plain_after_seconds", plainAfter)
  report("rotate_big_plain_seconds", (plainBefore + plainAfter) / 2)
  report("rotate_big_plain_cpu_seconds", plainCPU.reduce(0, +) / Double(plainCPU.count))
  report("rotate_big_crypto_only_seconds", try openAndSealSeconds(vault: vault, records: records, size: envelopeSize))
}

/// What opening and sealing `records` envelopes of `size` bytes costs alone (no SQLite), the way
/// re-sealing calls them, extrapolated from 50,000 (or fewer).
private func openAndSealSeconds(vault: Vault, records: Int, size: Int) throws -> Double {
  let sample = min(records, 50_000)
  let payload = [UInt8](repeating: 0x63, count: size - Envelope.overhead)
  let containerID = "0123456789abcdef"
  let sealed = try (0..<sample).map { _ in
    let context = EnvelopeContext.queue(containerID: containerID, queue: "bench", id: UUID().uuidString.lowercased())
    return (context, try vault.seal(payload, context: context))
  }
  let start = now()
  for (context, envelope) in sealed {
    let plaintext = try vault.open(envelope, context: context)
    _ = try vault.seal(plaintext, context: context)
  }
  return (now() - start) * Double(records) / Double(sample)
}

extension PlainTable {
  /// Reads every row's blob and writes a changed blob of the same size back, `batch` rows per
  /// transaction in seq order (as re-sealing does), then empties the WAL. Returns the rows rewritten.
  func rewriteAll(batch: Int) -> Int {
    var select: OpaquePointer?
    var update: OpaquePointer?
    sqlite3_prepare_v2(db, "SELECT seq, body FROM records WHERE seq > ? ORDER BY seq LIMIT ?", -1, &select, nil)
    sqlite3_prepare_v2(db, "UPDATE records SET body = ? WHERE seq = ?", -1, &update, nil)
    defer {
      sqlite3_finalize(select)
      sqlite3_finalize(update)
    }
    var after: Int64 = 0
    var total = 0
    while true {
      begin()
      var rows: [(seq: Int64, body: [UInt8])] = []
      sqlite3_reset(select)
      sqlite3_bind_int64(select, 1, after)
      sqlite3_bind_int64(select, 2, Int64(batch))
      while sqlite3_step(select) == SQLITE_ROW {
        let bytes = UnsafeRawBufferPointer(
          start: sqlite3_column_blob(select, 1), count: Int(sqlite3_column_bytes(select, 1)))
        rows.append((sqlite3_column_int64(select, 0), Array(bytes)))
      }
      for row in rows {
        let changed = row.body.map { $0 ^ 0x5A }
        sqlite3_reset(update)
        _ = changed.withUnsafeBytes {
          sqlite3_bind_blob(update, 1, $0.baseAddress, Int32($0.count), vault_sqlite_transient())
        }
        sqlite3_bind_int64(update, 2, row.seq)
        guard sqlite3_step(update) == SQLITE_DONE else { fatalError("plain update failed") }
      }
      commit()
      guard let last = rows.last?.seq else { break }
      after = last
      total += rows.count
    }
    sqlite3_wal_checkpoint_v2(db, nil, SQLITE_CHECKPOINT_TRUNCATE, nil, nil)
    return total
  }
}

/// The cross-process sync of the shared-sync experiment (`VAULT_QUEUE_BENCH_SHARED_SYNC`), on a
/// side file of three counters: syncs started, syncs completed, inserts in flight. Byte 0 of the
/// file is locked (fcntl) around an fdatasync; byte 1 around any read or write of the counters,
/// never across an fdatasync. A commit is durable once a sync numbered above the "started" count
/// read after the commit has completed: that sync's fdatasync began after the commit was written.
final class SharedSync {
  let descriptor: Int32

  init(path: String) {
    descriptor = open(path, O_RDWR | O_CREAT, 0o600)
    guard descriptor >= 0 else { fatalError("cannot open the shared-sync file") }
  }

  deinit { close(descriptor) }

  private func lock(_ byte: Int, _ type: Int32) {
    var region = flock()
    region.l_type = Int16(type)
    region.l_whence = Int16(SEEK_SET)
    region.l_start = off_t(byte)
    region.l_len = 1
    while fcntl(descriptor, F_SETLKW, &region) != 0 {
      guard errno == EINTR else { fatalError("fcntl lock failed") }
    }
  }

  private func read() -> (started: Int64, completed: Int64, busy: Int64) {
    var values = [Int64](repeating: 0, count: 3)
    _ = values.withUnsafeMutableBytes { pread(descriptor, $0.baseAddress, 24, 0) }
    return (values[0], values[1], values[2])
  }

  private func write(_ counters: (started: Int64, completed: Int64, busy: Int64)) {
    let values = [counters.started, counters.completed, counters.busy]
    _ = values.withUnsafeBytes { pwrite(descriptor, $0.baseAddress, 24, 0) }
  }

  private func withCounters<T>(_ body: (inout (started: Int64, completed: Int64, busy: Int64)) -> T) -> T {
    lock(1, Int32(F_WRLCK))
    defer { lock(1, Int32(F_UNLCK)) }
    var counters = read()
    let before = counters
    let result = body(&counters)
    if counters != before { write(counters) }
    return result
  }

  func counters() -> (started: Int64, completed: Int64, busy: Int64) { withCounters { $0 } }

  func add(busy: Int64) { withCounters { $0.busy += busy } }

  /// Returns once an fdatasync of `wal` that began after this call has completed.
  func awaitSync(of wal: Int32, gatherMicroseconds: Int) {
    let seen = withCounters { $0.started }
    lock(0, Int32(F_WRLCK))
    defer { lock(0, Int32(F_UNLCK)) }
    if withCounters({ $0.completed > seen }) { return }
    if gatherMicroseconds > 0 {
      let until = now() + Double(gatherMicroseconds) / 1e6
      while now() < until, withCounters({ $0.busy > 0 }) { sched_yield() }
    }
    let number = withCounters { counters -> Int64 in
      counters.started += 1
      return counters.started
    }
    guard fdatasync(wal) == 0 else { fatalError("fdatasync failed") }
    withCounters { $0.completed = max($0.completed, number) }
  }
}
