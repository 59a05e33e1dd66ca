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
    guard let action = arguments.positionals.first else {
      throw UsageError(message: "missing telemetry action (log, flush or watch)", command: "telemetry")
    }
    let allowed: [String: Set<String>] = [
      "log": ["--payload", "--session", "--json"],
      "flush": ["--endpoint", "--token-file", "--json", "--ca-file", "--allow-insecure-http"],
      "watch": ["--endpoint", "--token-file", "--interval", "--ca-file", "--allow-insecure-http"],
    ]
    guard let permitted = allowed[action] else {
      throw UsageError(
        message: "unknown telemetry action '\(action)' (the actions are log, flush and watch)", command: "telemetry")
    }
    for option in Set(arguments.options.keys).union(arguments.flags) where !permitted.contains(option) {
      throw UsageError(message: "'\(option)' does not apply to 'telemetry \(action)'", command: "telemetry")
    }
    let rest = Array(arguments.positionals.dropFirst())
    var type = ""
    var payload: [String: JSONValue] = [:]
    var endpoint: URL?
    switch action {
    case "log":
      guard rest.count == 1 else { throw UsageError(message: "give exactly one event TYPE", command: "telemetry") }
      type = rest[0]
      guard (1...128).contains(type.count) else {
        throw UsageError(message: "an event TYPE must be 1–128 characters", command: "telemetry")
      }
      if let text = arguments.options["--payload"] {
        // Our own strict parser: numbers stay as written (JSONSerialization and JSONDecoder
        // would round them through Double), duplicate keys are refused.
        let parsed: JSONValue
        do {
          parsed = try JSONValue(parsing: text)
        } catch {
          throw UsageError(message: "--payload must be a JSON object (\(error))", command: "telemetry")
        }
        guard case .object(let object) = parsed else {
          throw UsageError(message: "--payload must be a JSON object", command: "telemetry")
        }
        payload = object
      }
    default:
      guard rest.isEmpty else { throw UsageError(message: "unexpected argument '\(rest[0])'", command: "telemetry") }
      guard let text = arguments.options["--endpoint"] else {
        throw UsageError(message: "\(action) needs --endpoint URL", command: "telemetry")
      }
      guard let url = URL(string: text), let scheme = url.scheme?.lowercased(), ["http", "https"].contains(scheme),
        url.host?.isEmpty == false
      else {
        throw UsageError(
          // Not echoed: a mistyped endpoint may still carry a token in its query or user part.
          message: "--endpoint must be an https:// (or loopback http://) URL with a host",
          command: "telemetry")
      }
      do {
        try EndpointPolicy.check(url, allowInsecureHTTP: arguments.flags.contains("--allow-insecure-http"))
      } catch {
        throw UsageError(message: "--endpoint: \(error)" + Advice.suffix(for: error), command: "telemetry")
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
            message: "--ca-file must be a readable PEM file of certificates (at most 16 MiB)", command: "telemetry")
        }
      }
    }
    let vault = try openVault(arguments)
    let container = try QueueContainer(path: vault.home + "/" + Self.defaultContainerName, vault: vault)
    let tokens: any TokenProvider = arguments.options["--token-file"].map { TokenFile(path: $0) } ?? NoToken()
    let text = arguments.options["--interval"]
    // Finite and bounded: the timer converts it to nanoseconds, where inf or 1e300 trap.
    guard let interval = CommandLineEnvironment.seconds(text, in: 0.1...86400, fallback: 60) else {
      throw UsageError(
        message: "--interval must be a number of seconds from 0.1 to 86400 (got '\(text ?? "")')", command: "telemetry")
    }
    let client = Telemetry(
      container: container, configuration: TelemetryConfiguration(interval: interval), tokens: tokens,
      sender: try endpoint.map {
        try HTTPBatchSender(
          endpoint: $0, allowInsecureHTTP: arguments.flags.contains("--allow-insecure-http"),
          certificateAuthorities: arguments.options["--ca-file"])
      } ?? NoBatchSender(),
      sessionID: arguments.options["--session"] ?? "cli")
    if action == "watch" { try watch(client, arguments) }
    if action == "log" {
      let id = try client.log(type: type, payload: payload)
      if arguments.flags.contains("--json") {
        terminal.print(
          try JSON.encode(LogResult(id: id.uuidString.lowercased(), type: type, session: client.sessionID)))
      } else {
        terminal.print("logged \(id.uuidString.lowercased())")
      }
      return
    }
    let report = try client.flush()
    if arguments.flags.contains("--json") {
      terminal.print(try JSON.encode(report))
    } else {
      terminal.print(
        "delivered \(report.delivered), retried \(report.retried), parked \(report.parked), "
          + "rejected \(report.rejected), pending \(report.pending) (\(report.batches) batches)")
    }
    if report.errorKind == "http-401", arguments.options["--token-file"] == nil {
      terminal.note(
        "vault: warning: the server answered 401 (unauthorized) and no token was sent; "
          + "give the bearer token with --token-file FILE")
    }
    if report.refusedByConfiguration { throw FlushRefused(kind: report.errorKind ?? "http-401") }
  }
}

/// What `telemetry log --json` prints: the event's id, its type and the session it was stamped with.
struct LogResult: Encodable {
  var id: String
  var type: String
  var session: String
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
      "the server refused the token (403 forbidden); the refused events are kept for review "
        + "(`vault queue resend --state review` once the token is fixed)"
    default:
      "the server refused the upload (401 unauthorized); the refused events are parked "
        + "(`vault queue resend --state parked` once --token-file is right)"
    }
  }
}

extension VaultCommandLine {
  /// Runs the delivery loop until SIGTERM, SIGINT or SIGHUP: a pass at start, on the timer, and the
  /// moment the network changes (see `ConnectivityMonitor`). Prints one line of counts per pass
  /// (never contents). A stop abandons the request in progress, waits for the pass to give back the
  /// events it claimed and did not settle, and exits 0 (a clean stop, as systemd expects of a service).
  func watch(_ client: Telemetry, _ arguments: Arguments) throws -> Never {
    let terminal = self.terminal
    let stopped = DispatchSemaphore(value: 0)
    StopSignals.handle { _ in stopped.signal() }
    try client.start { report in
      terminal.print(
        "pass: delivered \(report.delivered), retried \(report.retried), parked \(report.parked), "
          + "rejected \(report.rejected), pending \(report.pending)")
    }
    stopped.wait()
    client.stop()
    exit(0)
  }
}
