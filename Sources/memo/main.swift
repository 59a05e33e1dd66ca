// memo: an example application that uses vault's outbox. `send` saves a memo sealed on disk and
// returns at once; `relay` delivers pending memos to a relay server; `history` shows what is
// delivered, pending and parked; `resend` returns a parked memo to the queue.
import Foundation
import Outbox
import Telemetry
import Vault
import VaultQueue

// Before anything can hold a secret: no core dumps, no register dumps on a crash, descriptors
// 0–2 held open (see ProcessHardening). A reader that goes away is an error, not a death by SIGPIPE.
ProcessHardening.apply()
signal(SIGPIPE, SIG_IGN)

/// The telemetry client, once the vault is open (errors before that are not logged).
nonisolated(unsafe) var memoTelemetry: Telemetry?

let usage = """
  USAGE: memo [--home DIR] send [TEXT]       (without TEXT, or with -, the memo is read from stdin)
         memo [--home DIR] relay --endpoint URL [--telemetry-endpoint URL] [--allow-insecure-http]
         memo [--home DIR] history [--json]
         memo [--home DIR] resend ID

  The home is a vault home made by `vault init`: --home DIR (or --home=DIR), else
  $VAULT_HOME, else $XDG_DATA_HOME/vault, else $HOME/.local/share/vault, as for vault.
  Memos go to the queue "memo" of its default container. memo logs telemetry events
  (command run, send-to-saved latency, errors) to the container's "telemetry" queue;
  relay --telemetry-endpoint (or `vault telemetry flush`) delivers them. Endpoints are https://
  (http:// only to a loopback address, or anywhere with --allow-insecure-http, for test
  networks: memos and events then travel unencrypted). A TEXT argument is
  visible to other local users (in /proc/PID/cmdline and shell history) while memo runs:
  prefer standard input for anything private.
  Exit codes: 0 success, 1 failure (also when standard output cannot be written), 2 could not
  run (unreadable stdin, a memo over the queue's cap, too tight a ulimit), 64 usage error;
  relay stopped by SIGTERM, SIGINT or SIGHUP exits 128 + the signal (143, 130, 129) at once,
  every memo it did not deliver queued again.
  """

func fail(_ message: String, code: Int32 = 1, kind: String = "usage", showingUsage: Bool = false) -> Never {
  // The error event names a kind only, never the message (which may quote user input).
  _ = try? memoTelemetry?.log(type: "error", payload: ["kind": .string(kind)])
  // Escaped (Printable), newlines too: a message may quote an argument, a path or a value read
  // from the environment, and must stay one line. The usage after it is memo's own text.
  StandardStreams.writeError("Error: \(Printable.escaped(message))\n" + (showingUsage ? usage + "\n" : ""))
  exit(code)
}

/// Prints a line on stdout, escaped (`Printable.escaped`: what it quotes from the container cannot
/// start a line or send an escape); a line that cannot be written (full disk, closed pipe) is a
/// failure, reported with `done` (what already happened, e.g. that the memo is saved).
func say(_ line: String, done: String = "") { writeLine(Printable.escaped(line), done: done) }

/// Prints text of several lines that memo composed (its usage, JSON), keeping its lines.
func sayBlock(_ text: String) { writeLine(Printable.keepingLines(text), done: "") }

func writeLine(_ text: String, done: String) {
  if let problem = StandardStreams.writeOutput(text + "\n") {
    fail("could not write to standard output: \(problem)\(done)", code: 1, kind: "stdout")
  }
}

var arguments = Array(CommandLine.arguments.dropFirst())
let environment = ProcessInfo.processInfo.environment
// `--home DIR` or `--home=DIR`, anywhere on the line, as vault takes it; the default home is the
// library's (`Vault.defaultHome`, vault's own rule), VAULT_SECRET_SERVICE_TIMEOUT is read as vault
// reads it (MemoEnvironment).
var givenHome: String?
var position = 0
while position < arguments.count {
  let argument = arguments[position]
  guard argument == "--home" || argument.hasPrefix("--home=") else {
    position += 1
    continue
  }
  guard givenHome == nil else { fail("'--home' given more than once", code: 64, showingUsage: true) }
  if argument == "--home" {
    guard position + 1 < arguments.count else { fail("missing value for '--home'", code: 64, showingUsage: true) }
    givenHome = arguments[position + 1]
    arguments.removeSubrange(position...(position + 1))
  } else {
    givenHome = String(argument.dropFirst("--home=".count))
    arguments.remove(at: position)
  }
  if givenHome == "" { fail(MemoEnvironment.emptyHomeMessage, code: 64) }
}
if givenHome == nil, let name = MemoEnvironment.homeVariableNotUTF8() {
  fail("$\(name) is not valid UTF-8, so the home it names cannot be used as it is; set it to the right path", code: 64)
}
let home = givenHome ?? Vault.defaultHome(environment: environment)
let allowInsecureHTTP = arguments.contains("--allow-insecure-http")
arguments.removeAll { $0 == "--allow-insecure-http" }
if arguments.contains("-h") || arguments.contains("--help") {
  sayBlock(usage)
  exit(0)
}
guard let command = arguments.first else { fail("missing command", code: 64, showingUsage: true) }
// A usage error is told before anything opens the vault (which may not be there).
guard ["send", "relay", "history", "resend"].contains(command) else {
  fail("unknown command '\(command)'", code: 64, showingUsage: true)
}
let secretServiceTimeout: Double
do {
  secretServiceTimeout = try MemoEnvironment.secretServiceTimeout(environment)
} catch {
  fail(error.message, code: 64)
}
// Checked before anything starts a thread or opens a database: a tight ulimit is one clear error,
// not a trap in libdispatch or a send that saves the memo and then hangs.
do {
  try ProcessResources.ensure()
} catch {
  fail(error.description, code: 2, kind: "resources")
}

/// Delivered memos, as JSON lines of id and time only (nothing of the text), appended and fsynced.
struct History {
  let path: String

  func append(_ id: UUID) {
    let line = "{\"id\":\"\(id.uuidString.lowercased())\",\"delivered_at\":\"\(MemoEnvironment.timestamp(Date()))\"}\n"
    let fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0o600)
    guard fd >= 0 else { return }
    _ = line.withCString { write(fd, $0, strlen($0)) }
    fsync(fd)
    close(fd)
  }

  func delivered() -> [(id: String, at: String)] {
    guard let text = try? String(contentsOfFile: path, encoding: .utf8) else { return [] }
    return text.split(separator: "\n").compactMap { line in
      guard let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: String],
        let id = object["id"], let at = object["delivered_at"]
      else { return nil }
      return (id, at)
    }
  }
}

/// Notes each delivered memo in the history before the outbox acks it, and counts the memos the
/// transport held back because their request would not fit the address space (`ulimit -v`).
struct RecordingTransport: Transport {
  let inner: any Transport
  let history: History
  let heldBack = Counter()

  func deliver(id: UUID, payload: Data) async -> DeliveryResult {
    // memo's pass runs on its main thread (see `waitFor`), where blocking is what it wants: a
    // synchronous transport is called right here rather than on a thread of its own.
    let result =
      if let blocking = inner as? any SynchronousTransport {
        blocking.deliverSynchronously(id: id, payload: payload)
      } else {
        await inner.deliver(id: id, payload: payload)
      }
    if result == .delivered { history.append(id) }
    if result == .unreachable(kind: "local-memory") { heldBack.increment() }
    return result
  }
}

final class Counter: @unchecked Sendable {
  private let lock = NSLock()
  private var count = 0
  func increment() { lock.withLock { count += 1 } }
  var value: Int { lock.withLock { count } }
}

do {
  let vault = try Vault.open(home: home, resolver: .system(secretServiceTimeout: secretServiceTimeout))
  // memo's own telemetry shares the container with the memos, but the byte cap may only drop
  // telemetry to make room: a memo reported "saved" is never pushed out by events about it.
  let container = try QueueContainer(
    path: vault.home + "/queue.sqlite", vault: vault,
    configuration: QueueConfiguration(capVictims: .only([Telemetry.queueName])))
  let history = History(path: vault.home + "/memo-history.jsonl")
  let telemetryEndpoint = arguments.firstIndex(of: "--telemetry-endpoint").flatMap {
    $0 + 1 < arguments.count ? URL(string: arguments[$0 + 1]) : nil
  }
  if let index = arguments.firstIndex(of: "--telemetry-endpoint") {
    arguments.removeSubrange(index...min(index + 1, arguments.count - 1))
  }
  let sender: any BatchSender
  do {
    sender =
      try telemetryEndpoint.map { try HTTPBatchSender(endpoint: $0, allowInsecureHTTP: allowInsecureHTTP) }
      ?? NoBatchSender()
  } catch {
    fail("--telemetry-endpoint: \(error)", code: 64)
  }
  let telemetry = Telemetry(
    container: container, tokens: EnvironmentToken(), sender: sender,
    sessionID: "memo-\(getpid())")
  memoTelemetry = telemetry
  // Navigation-like event: which command ran (never its arguments).
  // Telemetry never stops a command: an event refused (say, the container is full of memos,
  // which the cap may not drop) is simply not logged.
  _ = try? telemetry.log(type: "command", payload: ["name": .string(command)])
  switch command {
  case "send":
    guard arguments.count <= 2 else { fail("send takes one TEXT argument (or the memo on stdin)", code: 64) }
    let text: [UInt8]
    if arguments.count == 2 && arguments[1] != "-" {
      text = Array(arguments[1].utf8)
    } else {
      do {
        text = try StandardStreams.readAll(limit: container.configuration.byteCap - Envelope.overhead)
      } catch {
        fail(error.description, code: 2, kind: "stdin")
      }
    }
    guard !text.isEmpty else { fail("the memo is empty", code: 64) }
    // A failed allocation traps: a memo the address space cannot seal and store is refused first.
    guard MemoryHeadroom.availableToSealAndStore(text.count) else {
      fail(
        "not enough address space (ulimit -v) to seal and store a memo of \(max(1, text.count >> 20)) MiB; "
          + "raise the limit and run again (nothing was saved)", code: 2, kind: "resources")
    }
    let outbox = Outbox(
      container: container, queue: "memo", transport: RecordingTransport(inner: NoTransport(), history: history))
    let started = DispatchTime.now().uptimeNanoseconds
    let receipt = try outbox.send(text)
    let elapsed = Double(DispatchTime.now().uptimeNanoseconds - started) / 1e6
    // The timing is logged from another thread, as an app's instrumentation would; the memo is
    // saved already, so the wait is bounded and a thread that cannot start costs only the timing.
    onAnotherThread(timeout: 15) {
      _ = try? telemetry.log(type: "timing", payload: ["name": .string("send_to_saved_ms"), "value": .number(elapsed)])
    }
    say(
      String(
        format: "saved %@ in %.2f ms (sealed and on disk; delivery happens later)", receipt.id.uuidString.lowercased(),
        elapsed), done: "; the memo is saved and will be delivered")
  case "relay":
    guard let index = arguments.firstIndex(of: "--endpoint"), index + 1 < arguments.count,
      let endpoint = URL(string: arguments[index + 1])
    else { fail("relay needs --endpoint URL", code: 64) }
    let relayTransport: HTTPJSONTransport
    do {
      relayTransport = try HTTPJSONTransport(endpoint: endpoint, allowInsecureHTTP: allowInsecureHTTP)
    } catch EndpointError.insecureHTTP {
      fail(
        "--endpoint: plain http:// would send the token and the memos unencrypted to another machine; use https://, "
          + "or --allow-insecure-http on a test network only", code: 64)
    } catch {
      fail("--endpoint: \(error)", code: 64)
    }
    // Without libcurl nothing can be sent: said before any memo is claimed.
    if let reason = HTTPClient.unavailableReason {
      fail(
        "libcurl (libcurl.so.4) could not be loaded (\(reason)), so nothing can be sent; install it (Debian: "
          + "libcurl4) and run relay again (nothing was claimed: every memo is still queued)", code: 1,
        kind: "http-library")
    }
    let transport = RecordingTransport(inner: relayTransport, history: history)
    let outbox = Outbox(container: container, queue: "memo", transport: transport)
    // Claiming and opening a memo holds its envelope twice (SQLite's and ours), its text as the
    // opened bytes and the claimed record's Data, and the transport's copy of it, at once; and the
    // HTTP client's threads start with the first request. A failed allocation traps, leaving the
    // memo leased until its lease ends; checked first, a limit too tight for the largest memo
    // waiting is one clear error. (HTTPJSONTransport checks again for the JSON body, which depends
    // on the text.) Five copies: with three, a 19 MB memo at `ulimit -v` 216 MiB passed this check
    // and then trapped, once the claimed payload became Data (one more copy).
    let largest = try container.pendingAggregate(queue: "memo").largestEnvelope
    guard MemoryHeadroom.available(5 * largest + (24 << 20)) else {
      fail(
        "not enough address space (ulimit -v) to deliver a memo of \(max(1, largest >> 20)) MiB (relaying holds "
          + "several copies of it at once); raise the limit and run relay again (nothing was claimed: every memo "
          + "is still queued)", code: 2, kind: "resources")
    }
    // SIGTERM, SIGINT or SIGHUP: the request in progress is abandoned, the pass gives back every
    // memo it claimed and did not deliver, and relay exits 128 + the signal.
    StopSignals.handle { _ in }
    let pass = try waitFor { try await outbox.deliverDue() }
    say(
      "delivered \(pass.delivered), retrying \(pass.retrying), parked \(pass.parked), rejected \(pass.rejected), pending \(pass.pending)"
    )
    if let signal = StopSignals.received {
      StandardStreams.writeError("memo: stopped by signal \(signal); every memo not delivered is queued again\n")
      exit(128 + signal)
    }
    if telemetryEndpoint != nil {
      let report = try telemetry.flush()
      say("telemetry: delivered \(report.delivered), retried \(report.retried), pending \(report.pending)")
    }
    if transport.heldBack.value > 0 {
      fail(
        "\(transport.heldBack.value) memo(s) not sent: not enough address space (ulimit -v) for the request; "
          + "still queued: raise the limit and run relay again", code: 2, kind: "resources")
    }
  case "history":
    let delivered = history.delivered()
    let waiting = try container.list(queue: "memo")
    if arguments.contains("--json") {
      let rows: [[String: Any]] =
        delivered.map { ["id": $0.id, "state": "delivered", "at": $0.at] }
        + waiting.map {
          [
            "id": $0.id.uuidString.lowercased(), "state": $0.state.rawValue, "attempts": $0.attempts,
            "error_kind": $0.errorKind ?? NSNull(),
          ]
        }
      let data = try JSONSerialization.data(withJSONObject: rows, options: [.prettyPrinted, .sortedKeys])
      sayBlock(Printable.json(String(decoding: data, as: UTF8.self)))
    } else {
      for item in delivered { say("\(item.id)  delivered  \(item.at)") }
      for item in waiting {
        say(
          "\(item.id.uuidString.lowercased())  \(item.state.rawValue)  attempts \(item.attempts)  \(item.errorKind ?? "-")"
        )
      }
    }
  case "resend":
    guard arguments.count == 2, let id = UUID(uuidString: arguments[1]) else {
      fail("resend takes one memo ID", code: 64)
    }
    guard try container.resend([id]) == 1 else {
      fail("memo \(arguments[1]) is not parked or in review", kind: "not-resendable")
    }
    say("resent \(id.uuidString.lowercased())")
  default:
    fail("unknown command '\(command)'", code: 64, showingUsage: true)
  }
} catch {
  // Library errors describe a kind and a fix, never memo text; the event records only the kind.
  // SQLite reports a write past `ulimit -f` as a plain I/O error: name the limit when there is one.
  let note =
    switch error {
    case QueueError.storage, QueueError.diskFull: MemoEnvironment.fileSizeNote
    default: ""
    }
  if case QueueError.outOfMemory = error { fail(String(describing: error), code: 2, kind: "resources") }
  fail(String(describing: error) + note, kind: String(describing: type(of: error)))
}

/// The bearer token for telemetry uploads, from MEMO_TELEMETRY_TOKEN (empty: no Authorization).
struct EnvironmentToken: TokenProvider {
  func token(refresh: Bool) throws -> String { ProcessInfo.processInfo.environment["MEMO_TELEMETRY_TOKEN"] ?? "" }
}

/// `send` never delivers; delivery is `relay`'s job.
struct NoTransport: SynchronousTransport {
  func deliverSynchronously(id: UUID, payload: Data) -> DeliveryResult { .retry(kind: "not-delivering", after: nil) }
}

/// Runs async work (a delivery pass) to its end on the calling thread. memo is a sequential tool,
/// and a pass that needs no other thread costs the address space the synchronous pass cost: each
/// thread of the concurrency pool reserved a 64 MiB malloc arena and an 8 MiB stack, so under a
/// tight `ulimit -v` a relay that used to fit ran out (and glibc, failing to make the arena, tried
/// again on every allocation: the relay crawled instead of failing).
func waitFor<Value: Sendable>(_ work: @escaping @Sendable () async throws -> Value) throws -> Value {
  let box = ResultBox<Value>()
  let executor = CallingThreadExecutor()
  Task(executorPreference: executor) {
    do {
      box.result = .success(try await work())
    } catch {
      box.result = .failure(error)
    }
    executor.finish()
  }
  executor.run()
  return try box.result!.get()
}

/// A task executor whose jobs run on the thread that called `run()`, until `finish()`.
final class CallingThreadExecutor: TaskExecutor, @unchecked Sendable {
  private let condition = NSCondition()
  private var jobs: [UnownedJob] = []
  private var finished = false

  func enqueue(_ job: consuming ExecutorJob) {
    let job = UnownedJob(job)
    condition.withLock {
      jobs.append(job)
      condition.signal()
    }
  }

  func finish() {
    condition.withLock {
      finished = true
      condition.signal()
    }
  }

  /// Runs jobs as they come until `finish()` was called and no job is left.
  func run() {
    while true {
      condition.lock()
      while jobs.isEmpty, !finished { condition.wait() }
      if jobs.isEmpty {
        condition.unlock()
        return
      }
      let job = jobs.removeFirst()
      condition.unlock()
      job.runSynchronously(on: asUnownedTaskExecutor())
    }
  }
}

final class ResultBox<Value: Sendable>: @unchecked Sendable {
  private let lock = NSLock()
  private var stored: Result<Value, any Error>?
  var result: Result<Value, any Error>? {
    get { lock.withLock { stored } }
    set { lock.withLock { stored = newValue } }
  }
}
