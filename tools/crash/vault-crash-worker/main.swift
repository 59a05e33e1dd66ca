// A worker for tools/crash-campaign: it enqueues, delivers or rotates against one vault and its
// containers until it is killed, writing what it is about to do and what has been *confirmed* to
// its log first-hand. Each line is `TAG VALUE T0 T1`: T0 is CLOCK_MONOTONIC (nanoseconds, one
// clock for every process) just before the operation began and T1 just after it returned, so the
// analysis can order lines of processes that ran at the same time. A line is written with
// write(2) before the worker goes on: SIGKILL cannot take back what the kernel already has (the
// campaign kills processes, it does not cut power, so the log needs no fsync).
//
//   S <pid>  started: the vault and container are open; work begins when standard input closes
//   T <id>   about to enqueue <id>            C <id>   enqueue of <id> returned (durable)
//   D <id>   claimed, opened, payload checked  X <id>   a claimed payload did not match its id
//   A <id>   ack returned: never delivered again, gone from the queue
//   F <id>   fail returned "retry": still queued, delivered later
//   P <id>   park (or a fail at the attempt ceiling) returned: not claimed again until resent
//   u <id>   about to resend <id>              U <id>   resend of <id> returned (pending again)
//   R <n>    rotation to version n finished    K <n>    ... and it kept older versions (n of them)
//   E <code> rotation refused or failed (a damaged container), with the error's code
//
//   vault-crash-worker HOME LOG enqueue|deliver|rotate|drain
//   vault-crash-worker HOME LOG seed PATH COUNT     enqueue COUNT records into a second container
//   vault-crash-worker HOME LOG verify PATH…        open every record of each container
//   vault-crash-worker HOME LOG claim-within PATH MiB
//       claim up to three records of queue "seed" from PATH with the address space limited to what
//       the process maps now plus MiB (Tests/VaultCLITests/ResourceLimitTests.swift); prints
//       `claimed N` or `error CODE`
import Foundation
import Vault
import VaultQueue

let arguments = CommandLine.arguments
let usage =
  "usage: vault-crash-worker HOME LOG enqueue|deliver|rotate|drain | seed PATH COUNT | verify PATH… "
  + "| claim-within PATH MiB\n"
guard arguments.count >= 4 else {
  FileHandle.standardError.write(Data(usage.utf8))
  exit(64)
}
let home = arguments[1]
let log = open(arguments[2], O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0o600)
guard log >= 0 else { exit(2) }

/// CLOCK_MONOTONIC in nanoseconds: the same clock in every process (Python's time.monotonic_ns).
func now() -> UInt64 {
  var time = timespec()
  clock_gettime(CLOCK_MONOTONIC, &time)
  return UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_nsec)
}

func note(_ tag: String, _ value: String, _ started: UInt64, _ ended: UInt64) {
  let line = "\(tag) \(value) \(started) \(ended)\n"
  _ = line.withCString { write(log, $0, strlen($0)) }
}

/// The payload record `id` must hold. One record in sixteen (its id ends in 0) is long enough for its
/// envelope to be stored in two parts (the header in its row, the rest in `envelope_tails`), so kills
/// land in those writes too.
func payload(for id: String) -> [UInt8] {
  Array("crash-payload \(id) ".utf8) + Array(repeating: 0x2E, count: id.hasSuffix("0") ? 8_192 : 200)
}

func lower(_ id: UUID) -> String { id.uuidString.lowercased() }

/// The process's address space in use now (VmSize in /proc/self/status), in bytes.
func mappedBytes() -> Int? {
  let status = (try? String(contentsOfFile: "/proc/self/status", encoding: .utf8)) ?? ""
  for line in status.split(separator: "\n") where line.hasPrefix("VmSize:") {
    return line.split(separator: " ").dropFirst().first.flatMap { Int($0) }.map { $0 * 1024 }
  }
  return nil
}

/// One configuration for every connection (leases and due times are judged by each reader's):
/// three server refusals park a record (at once: no least span), and retries come back within a
/// fifth of a second.
let configuration = QueueConfiguration(attemptCeiling: 3, backoff: BackoffPolicy(base: 0.02, cap: 0.2), parkAfter: 0)
let queueName = "crash"

/// Rotates once; false when the rotation refused or failed (noted as `E` with the error's code).
@discardableResult
func rotateOnce(_ vault: Vault) -> Bool {
  let started = now()
  do {
    let report = try vault.rotate(containers: QueueContainerProvider(configuration: configuration))
    let ended = now()
    note("R", String(report.newVersion), started, ended)
    if !report.keptVersions.isEmpty { note("K", String(report.keptVersions.count), started, ended) }
    return true
  } catch {
    // Expected only while the campaign has damaged the second container; the analysis checks.
    let code = (error as? any CodedError)?.code ?? "other"
    note("E", code, started, now())
    return false
  }
}

/// Claims up to sixteen records and settles each one at random: ack (6 in 10), fail (3 in 10;
/// the third refusal parks it) or park (1 in 10).
func deliverOnce(_ container: QueueContainer, lease: TimeInterval, settleRandomly: Bool) throws -> Int {
  let started = now()
  let claimed = try container.claim(queue: queueName, maxCount: 16, lease: lease)
  let ended = now()
  var ack: [UUID] = []
  var fail: [UUID] = []
  var park: [UUID] = []
  for record in claimed {
    let id = lower(record.id)
    note(record.payloadBytes == payload(for: id) ? "D" : "X", id, started, ended)
    switch settleRandomly ? Int.random(in: 0..<10) : 0 {
    case 0..<6: ack.append(record.id)
    case 6..<9: fail.append(record.id)
    default: park.append(record.id)
    }
  }
  if !ack.isEmpty {
    let started = now()
    try container.ack(ack)
    let ended = now()
    for id in ack { note("A", lower(id), started, ended) }
  }
  if !fail.isEmpty {
    let started = now()
    let outcomes = try container.fail(fail, errorKind: "crash-test")
    let ended = now()
    for (id, outcome) in outcomes {
      switch outcome {
      case .retryAt: note("F", lower(id), started, ended)
      case .parked: note("P", lower(id), started, ended)
      }
    }
  }
  if !park.isEmpty {
    let started = now()
    try container.park(park, errorKind: "crash-test")
    let ended = now()
    for id in park { note("P", lower(id), started, ended) }
  }
  return claimed.count
}

/// Sends parked records back, one by one, so each `U` names a record that really moved.
func resendParked(_ container: QueueContainer, limit: Int?) throws -> Int {
  var ids = try container.list(queue: queueName, state: .parked).map(\.id)
  if let limit { ids = Array(ids.prefix(limit)) }
  var moved = 0
  for id in ids {
    let started = now()
    note("u", lower(id), started, started)
    if try container.resend([id]) == 1 {
      note("U", lower(id), started, now())
      moved += 1
    }
  }
  return moved
}

do {
  let vault = try Vault.open(home: home)
  let mode = arguments[3]
  switch mode {
  case "seed":
    guard arguments.count == 6, let count = Int(arguments[5]) else { exit(64) }
    let container = try QueueContainer(path: arguments[4], vault: vault, configuration: configuration)
    for _ in 0..<count {
      let id = UUID()
      let started = now()
      note("T", lower(id), started, started)
      try container.enqueue(payload(for: lower(id)), queue: "seed", id: id)
      note("C", lower(id), started, now())
    }
    _ = try container.checkpoint()
    exit(0)
  case "verify":
    // Every record of each container must open (the key its header names is in the store and
    // the envelope authenticates); prints `verify PATH records=N unopenable=K versions=V,…`.
    for path in arguments[4...] {
      let container = try QueueContainer(path: path, vault: vault, configuration: configuration, mode: .readOnly)
      let counts = try container.recordCounts()
      let unopenable = try container.unopenableRecords(with: vault)
      let versions = counts.byVersion.filter { $0.value > 0 }.keys.sorted().map(String.init).joined(separator: ",")
      print(
        "verify \(path) records=\(try container.stats().total) unopenable=\(unopenable) foreign=\(counts.foreign) "
          + "versions=\(versions.isEmpty ? "-" : versions)")
    }
    exit(0)
  case "claim-within":
    guard arguments.count == 6, let mebibytes = Int(arguments[5]), mebibytes > 0 else { exit(64) }
    let container = try QueueContainer(
      path: arguments[4], vault: vault, configuration: QueueConfiguration(byteCap: 1 << 30))
    // Limited here rather than by the shell's `ulimit -v`, so that the room left does not depend
    // on how much this build maps before it gets here.
    var limit = rlimit()
    guard let mapped = mappedBytes(), getrlimit(Int32(RLIMIT_AS.rawValue), &limit) == 0 else { exit(2) }
    limit.rlim_cur = rlim_t(mapped + mebibytes << 20)
    guard setrlimit(Int32(RLIMIT_AS.rawValue), &limit) == 0 else { exit(2) }
    do {
      print("claimed \(try container.claim(queue: "seed", maxCount: 3, maxBytes: 1 << 30, lease: 60).count)")
    } catch {
      print("error \((error as? any CodedError)?.code ?? "other")")
    }
    exit(0)
  default: break
  }

  let container = try QueueContainer(
    path: vault.home + "/queue.sqlite", vault: vault, configuration: configuration)
  note("S", String(getpid()), now(), now())
  // The campaign starts the next round's workers while this round runs: each waits here, opened,
  // until its standard input closes, so its whole life after that is work.
  var gate: UInt8 = 0
  while read(0, &gate, 1) > 0 {}
  switch mode {
  case "enqueue":
    var enqueued = 0
    while true {
      // A backlog of at most a few hundred records keeps each rotation (which re-seals them all
      // under the vault's lock, while starting workers wait for it) short.
      enqueued += 1
      if enqueued % 8 == 0 {
        while try container.count(queue: queueName, state: .pending) > 300 { usleep(2_000) }
      }
      let id = UUID()
      let started = now()
      note("T", lower(id), started, started)
      try container.enqueue(payload(for: lower(id)), queue: queueName, id: id)
      note("C", lower(id), started, now())
    }
  case "deliver":
    var passes = 0
    while true {
      passes += 1
      if passes % 4 == 0 { _ = try resendParked(container, limit: 8) }
      if try deliverOnce(container, lease: 1, settleRandomly: true) == 0 { usleep(2_000) }
    }
  case "rotate":
    while true { if !rotateOnce(vault) { usleep(5_000) } }
  case "drain":
    // Finish any interrupted rotation, then send every parked record back and deliver (acking
    // everything) until nothing is left, waiting out the leases killed deliverers left behind.
    rotateOnce(vault)
    let deadline = Date() + 60
    while Date() < deadline {
      _ = try resendParked(container, limit: nil)
      if try deliverOnce(container, lease: 30, settleRandomly: false) == 0 {
        if try container.stats().byQueue[queueName] ?? 0 == 0 { break }
        usleep(50_000)
      }
    }
  default:
    exit(64)
  }
} catch {
  FileHandle.standardError.write(Data("vault-crash-worker: \(error)\n".utf8))
  exit(1)
}
