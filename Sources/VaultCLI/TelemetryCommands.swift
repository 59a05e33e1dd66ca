import Foundation
import Outbox
import Telemetry
import Vault
import VaultQueue

/// No token: uploads go without an Authorization header.
struct NoToken: TokenProvider {
  func token(refresh: Bool) throws -> String { "" }
}

extension VaultCommandLine {
  /// `vault telemetry log TYPE [--payload JSON] [--session ID]` and
  /// `vault telemetry flush --endpoint URL [--token-file FILE] [--json]`.
  func telemetry(_ arguments: Arguments) throws {
    let action = arguments.action ?? ""
    var type = ""
    var payload: [String: JSONValue] = [:]
    var endpoint: URL?
    switch action {
    case "log":
      type = arguments.positionals[0]
      guard Telemetry.isValidType(type) else {
        throw UsageError(
          message: "an event TYPE must be 1–128 characters, without control characters", command: "telemetry",
          action: action)
      }
      if let text = arguments.options["--payload"] {
        // Our own strict parser: numbers stay as written (JSONSerialization and JSONDecoder
        // would round them through Double), duplicate keys are refused.
        let parsed: JSONValue
        do {
          parsed = try JSONValue(parsing: text)
        } catch {
          throw UsageError(message: "--payload must be a JSON object (\(error))", command: "telemetry", action: action)
        }
        guard case .object(let object) = parsed else {
          throw UsageError(message: "--payload must be a JSON object", command: "telemetry", action: action)
        }
        payload = object
      }
    default:
      // The parser checked it is an http(s) URL with a host; here, whether it may be used.
      let url = URL(string: arguments.options["--endpoint"] ?? "")!
      do {
        try EndpointPolicy.check(url, allowInsecureHTTP: arguments.flags.contains("--allow-insecure-http"))
      } catch {
        // The library's sentence names its own option; here the flag is what to give.
        let reason =
          error == .insecureHTTP
          ? "plain http:// would send the token and the events unencrypted to another machine; use https://, or "
            + "--allow-insecure-http on a test network only"
          : "\(error)"
        throw UsageError(message: "--endpoint: " + reason, command: "telemetry", action: action)
      }
      endpoint = url
      if let authorities = arguments.options["--ca-file"] {
        // Checked now: a typo would otherwise look like an attack (every attempt a TLS failure).
        var info = stat()
        let text =
          stat(authorities, &info) == 0 && info.st_mode & S_IFMT == S_IFREG && info.st_size <= 16 << 20
          ? (try? String(contentsOfFile: authorities, encoding: .utf8)) : nil
        guard let text, text.contains("-----BEGIN CERTIFICATE-----") else {
          throw UsageError(
            message: "--ca-file must be a readable PEM file of certificates (at most 16 MiB)", command: "telemetry",
            action: action)
        }
      }
    }
    let vault = try openVault(arguments)
    let container = try QueueContainer(path: vault.home + "/" + Self.defaultContainerName, vault: vault)
    let tokens: any TokenProvider = arguments.options["--token-file"].map { TokenFile(path: $0) } ?? NoToken()
    let interval = arguments.number("--interval") ?? 60
    let client = Telemetry(
      container: container, configuration: TelemetryConfiguration(interval: interval), tokens: tokens,
      sender: try endpoint.map {
        try HTTPBatchSender(
          endpoint: $0, allowInsecureHTTP: arguments.flags.contains("--allow-insecure-http"),
          certificateAuthorities: arguments.options["--ca-file"])
      } ?? NoBatchSender(),
      sessionID: arguments.options["--session"] ?? "cli")
    // Without libcurl nothing can be sent: say so before anything is claimed, rather than let every
    // event fail its attempt as `client-unavailable` (a pass would exit 0, as for a server down).
    if action != "log", endpoint != nil, let reason = HTTPClient.unavailableReason {
      throw DeliveryLibraryMissing(reason: reason)
    }
    if action == "watch" { try watch(client, arguments) }
    if action == "log" {
      // As for `queue put`: events make room by dropping older events, and one logged into a
      // container an app filled with events past this command's cap dropped them down to it.
      let held = try container.storedBytes()
      guard held <= container.configuration.byteCap else {
        throw QueueCommandError.overThisCommandsCap(held: held, cap: container.configuration.byteCap)
      }
      let droppedBefore = try container.dropped()["cap"] ?? 0
      let id = try client.log(type: type, payload: payload)
      noteCapDrops(since: droppedBefore, in: container)
      terminal.done =
        "the event was logged as \(id.uuidString.lowercased()); running the command again would log it twice"
      if arguments.flags.contains("--json") {
        terminal.printBlock(
          try JSON.encode(LogResult(id: id.uuidString.lowercased(), type: type, session: client.sessionID)))
      } else {
        terminal.print("logged \(id.uuidString.lowercased())")
      }
      return
    }
    let report = try client.flush()
    if arguments.flags.contains("--json") {
      terminal.printBlock(try JSON.encode(report))
    } else {
      terminal.print(
        "delivered \(report.delivered), retried \(report.retried), parked \(report.parked), "
          + "rejected \(report.rejected), pending \(report.pending) (\(counted(report.batches, "batch", plural: "batches")))"
      )
      if let line = Self.nothingDeliveredLine(report) { terminal.print(line) }
      // Events another delivery claimed (one running now, or one killed before it acked them) are
      // neither pending nor lost: say so, or "pending 0" reads as nothing left (a fault-injection
      // review killed a flush between its POST and its ack).
      let held = try container.count(queue: Telemetry.queueName, state: .inFlight)
      if held > 0 {
        terminal.print(
          "\(counted(held, "event")) in flight: claimed by another delivery (running, or stopped before it "
            + "finished); sent again once its lease ends, if it does not finish them")
      }
    }
    if report.errorKind == "http-401", arguments.options["--token-file"] == nil {
      terminal.note(Self.missingTokenWarning)
    }
    if report.refusedByConfiguration { throw FlushRefused(kind: report.errorKind ?? "http-401") }
  }
}

extension VaultCommandLine {
  /// flush's plain word when events were waiting and none was delivered (the pass still ran, so
  /// the exit stays 0): how many, and why by kind: "delivered 0 of 12 events: 12 retry later
  /// (server unreachable: connection-refused)". Nil when something was delivered or nothing waited.
  static func nothingDeliveredLine(_ report: FlushReport) -> String? {
    // Retried events are pending again (due later), so they are inside `pending`.
    let waiting = report.pending + report.parked + report.rejected
    guard report.delivered == 0, waiting > 0 else { return nil }
    var parts: [String] = []
    if report.retried > 0 {
      let why = report.retryKind.map { report.retryUnreachable ? "server unreachable: \($0)" : "server answered \($0)" }
      parts.append("\(report.retried) retry later" + (why.map { " (\($0))" } ?? ""))
    }
    if report.parked > 0 { parts.append("\(report.parked) parked") }
    if report.rejected > 0 { parts.append("\(report.rejected) in review") }
    let later = report.pending - report.retried
    if later > 0 {
      parts.append(
        report.batches == 0 ? "\(later) not due yet (waiting for their retry time)" : "\(later) wait for a later pass")
    }
    return "delivered 0 of \(counted(waiting, "event")): " + parts.joined(separator: "; ")
  }

  /// Said when a server answers 401 to an upload that carried no token.
  static let missingTokenWarning =
    "vault: warning: the server answered 401 (unauthorized) and no token was sent; "
    + "give the bearer token with --token-file FILE"
}

/// What `telemetry log --json` prints: the event's id, its type and the session it was stamped with.
struct LogResult: Encodable {
  var id: String
  var type: String
  var session: String
}

/// `telemetry flush` or `watch` on a machine where libcurl cannot be loaded: exit 1 before anything
/// is claimed.
struct DeliveryLibraryMissing: Error, CustomStringConvertible {
  var reason: String

  var description: String {
    "libcurl (libcurl.so.4) could not be loaded (\(reason)), so nothing can be sent; install it (Debian: libcurl4) "
      + "and run again (nothing was claimed: the events wait)"
  }
}

/// A flush that delivered nothing because the server refused the credentials or the endpoint:
/// exit 1, so a script or a timer sees a configuration to fix.
struct FlushRefused: Error, CustomStringConvertible {
  var kind: String

  var description: String {
    switch kind {
    case "http-404":
      "the endpoint answered 404 (not found): check --endpoint; the events stay pending and are sent by the "
        + "next flush to the right endpoint"
    case "http-403":
      "the server refused the token (403 forbidden); fix the token: the events stay pending (the refused "
        + "batch retries with backoff, at most 5 minutes) and the next flush sends them"
    default:
      "the server refused the upload (401 unauthorized); fix --token-file: the events stay pending (the "
        + "refused batch retries with backoff, at most 5 minutes) and the next flush sends them"
    }
  }
}

extension VaultCommandLine {
  /// Runs the delivery loop until SIGTERM, SIGINT or SIGHUP: a pass at start, on the timer, and the
  /// moment the network changes (see `ConnectivityMonitor`). Prints one line of counts per pass
  /// (never contents). A stop abandons the request in progress, waits for the pass to give back the
  /// events it claimed and did not settle, and exits 0 (a clean stop, as systemd expects of a service),
  /// or 1 when standard output could not be written (it stops at the first pass that finds so).
  func watch(_ client: Telemetry, _ arguments: Arguments) throws -> Never {
    let terminal = self.terminal
    let stopped = DispatchSemaphore(value: 0)
    StopSignals.handle { _ in stopped.signal() }
    let tokenless = arguments.options["--token-file"] == nil
    try client.start { report in
      terminal.print(
        "pass: delivered \(report.delivered), retried \(report.retried), parked \(report.parked), "
          + "rejected \(report.rejected), pending \(report.pending)")
      // A pass that sent and delivered nothing says why, as flush does; one with nothing due
      // (most of them, while retries wait) adds nothing to the journal.
      if report.batches > 0, let line = Self.nothingDeliveredLine(report) { terminal.print("pass: " + line) }
      // Standard output gone (a closed pipe: `| head -1`; a full disk): stop as a signal would,
      // and exit 1 below, rather than deliver on unseen for ever.
      if terminal.outputFailure() != nil { stopped.signal() }
      if report.errorKind == "http-401", tokenless { terminal.note(Self.missingTokenWarning) }
      // Under systemd this is the journal's only word on a wrong endpoint or token.
      if report.refusedByConfiguration {
        terminal.note("vault: " + FlushRefused(kind: report.errorKind ?? "http-401").description)
      }
    }
    stopped.wait()
    client.stop()
    exit(finish(ExitCode.success.rawValue))
  }
}

/// `vault telemetry log|flush|watch`.
enum TelemetryCommand: Subcommand {
  static let delivery: [Parameter] = [
    .option(
      "--endpoint", "URL", .url, required: true,
      help: """
        Where batches are POSTed (https://host/v1/telemetry/batch; http:// only to a loopback address). \
        Redirects are never followed: a 3xx answer puts the batch's events in review.
        """),
    .option("--token-file", "FILE", .file, help: "A file holding the bearer token (re-read after a 401)."),
    .option(
      "--ca-file", "FILE", .file,
      help: "Trust only the certificate authorities in this PEM file (default: the system's)."),
    .flag(
      "--allow-insecure-http",
      help: """
        Allow a plain http:// endpoint on another machine (test networks only: the token and events travel \
        unencrypted).
        """),
  ]

  static let declaration = CommandDeclaration(
    name: "telemetry", abstract: "Log telemetry events and deliver them in gzip JSON batches.",
    discussion: "Events are sealed into the 'telemetry' queue of the vault's default container.",
    actions: [
      CommandDeclaration(
        name: "log", abstract: "Seal one event durably; prints 'logged ID'.",
        discussion: """
          Events go to the container's 'telemetry' queue. Past the container's byte cap (20 MB of sealed \
          records by default) the oldest events not in flight are dropped, never another queue's records; \
          a note on standard error says how many. With no older event to drop, or in a container an app \
          filled past 20 MB under a larger cap of its own, the event is refused (exit 1), nothing dropped.
          """,
        parameters: [
          .argument("TYPE", .required, .name, help: "The event's type, 1 to 128 characters, no control characters."),
          .option(
            "--payload", "JSON",
            help: """
              The event's payload, a JSON object (default {}), strict RFC 8259; numbers are sent exactly as \
              written (no rounding through a double); duplicate keys are refused.
              """),
          .option("--session", "ID", .name, help: "The session id stamped on the event (default 'cli')."),
          .flag("--json", help: "Print JSON: id, type, session."),
        ]),
      CommandDeclaration(
        name: "flush", abstract: "One delivery pass: every due event is sent, once or within split halves.",
        discussion: """
          Events go in batches of at most 256 KiB gzip-compressed, to POST URL. 2xx delivers; 429/503 wait for \
          Retry-After; 408, 5xx and network errors retry with backoff; 401 re-reads the token once, then the \
          batch retries with backoff and the pass ends, as for 403; 413 splits the batch in halves (at most 16 extra requests a \
          pass), and a single event of 64 KiB or less refused with 413 retries with backoff (a larger one goes to \
          review); 404 (a wrong endpoint) keeps the events pending, due at once, and ends the pass; 400 and 422 \
          for a batch of several events: its halves are sent, and halved again, to find the events refused \
          (at most 64 requests a batch), which go to review with the rest of what could not be told apart; \
          other 4xx go to review.

          Exit 1 when the pass delivered nothing because of 401, 403 or 404 (a 401 without --token-file also \
          warns to give one), or when libcurl cannot be loaded (before anything is claimed); else exit 0, even \
          if the server refused some batches.
          """,
        parameters: delivery + [
          .flag(
            "--json",
            help: """
              Print JSON: delivered, retried, parked, rejected, pending, batches, token_refreshes, auth_failures, \
              not_found, error_kind.
              """)
        ]),
      CommandDeclaration(
        name: "watch", abstract: "Deliver until stopped: at start, on a timer and when the network changes.",
        discussion: """
          A pass at start, every --interval seconds (default 60; four times longer in power-saver or on a \
          battery at 20% or less), and at once when the default route, another usable route, or an address on \
          their interfaces changes (rtnetlink), which also restarts the backoff of events that waited for the \
          network. Prints one line of counts per pass. SIGTERM, SIGINT or SIGHUP stops it: the request in \
          progress is abandoned, the events it claimed are given back, and it exits 0; it stops by itself, exit \
          1, when standard output cannot be written (a closed pipe, a full disk). A 401 without --token-file warns \
          to give one. Exits 1 at once when libcurl cannot be loaded.
          """,
        parameters: delivery + [
          .option(
            "--interval", "SECONDS", .number(0.1...86400, unit: "seconds"),
            help: "The period of the timer, 0.1 to 86400 (default 60).")
        ]),
    ],
    sharedHelp: ["--json": "Print JSON (see 'vault help telemetry ACTION' for each action's keys)."])

  static func run(_ cli: VaultCommandLine, _ arguments: Arguments) throws -> Int32 {
    try cli.telemetry(arguments)
    return ExitCode.success.rawValue
  }
}
