import Foundation
import Vault
import VaultCrypto
import VaultKeys
import VaultQueue

extension VaultCommandLine {
  static let defaultContainerName = "queue.sqlite"

  func defaultContainer(_ arguments: Arguments) -> String {
    arguments.options["--container"] ?? (absolutePath(homePath(arguments)) + "/" + Self.defaultContainerName)
  }

  /// `vault queue put|stats|list|resend`.
  func queue(_ arguments: Arguments) throws {
    guard let action = arguments.positionals.first else {
      throw UsageError(message: "missing queue action (put, stats, list or resend)", command: "queue")
    }
    let rest = Array(arguments.positionals.dropFirst())
    let allowed: [String: Set<String>] = [
      "put": ["--queue", "--id", "--container", "--json"], "stats": ["--container", "--json"],
      "list": ["--queue", "--state", "--container", "--json", "--limit", "--after"],
      "resend": ["--container", "--all", "--state", "--queue"],
    ]
    guard let permitted = allowed[action] else {
      throw UsageError(message: "unknown queue action '\(action)'", command: "queue")
    }
    for option in Set(arguments.options.keys).union(arguments.flags) where !permitted.contains(option) {
      throw UsageError(message: "'\(option)' does not apply to 'queue \(action)'", command: "queue")
    }
    if action != "resend", !rest.isEmpty {
      throw UsageError(message: "unexpected argument '\(rest[0])'", command: "queue")
    }
    // Every argument (and a `put`'s input) is checked before the container is opened, so a usage
    // error or unreadable input never leaves a new container behind.
    var name = ""
    var id: UUID?
    var payload: [UInt8] = []
    var state: RecordState?
    var ids: [UUID] = []
    // `resend --all | --state | --queue`: the states and queue to resend in bulk (nil: by ids).
    var bulk: (states: Set<RecordState>, queue: String?)?
    var page: (limit: Int?, after: UUID?) = (nil, nil)
    switch action {
    case "put":
      guard let queue = arguments.options["--queue"] else {
        throw UsageError(message: "missing '--queue NAME'", command: "queue")
      }
      name = queue
      if let text = arguments.options["--id"] {
        guard let parsed = UUID(uuidString: text) else {
          throw UsageError(message: "--id must be a UUID", command: "queue")
        }
        id = parsed
      }
      payload = try readInput()
      // A failed allocation traps: refuse a record the address space cannot seal and store.
      guard MemoryHeadroom.availableToSealAndStore(payload.count) else {
        throw StandardInputError.outOfMemory(bytes: 3 * payload.count)
      }
    case "list":
      if let text = arguments.options["--state"] {
        guard let parsed = RecordState(rawValue: text) else {
          throw UsageError(message: "--state must be pending, in_flight, parked or review", command: "queue")
        }
        state = parsed
      }
      page = try Self.listingPage(arguments)
    case "resend":
      let selectors =
        [
          arguments.flags.contains("--all") ? "--all" : nil, arguments.options["--state"].map { _ in "--state" },
          arguments.options["--queue"].map { _ in "--queue" }, rest.isEmpty ? nil : "ids",
        ].compactMap { $0 }
      guard selectors.count == 1 else {
        throw UsageError(
          message: selectors.isEmpty
            ? "say what to resend: --all, --state parked|review, --queue NAME or the records' ids"
            : "give one of --all, --state, --queue or ids, not \(selectors.joined(separator: " and "))",
          command: "queue")
      }
      if let text = arguments.options["--state"] {
        guard let parsed = RecordState(rawValue: text), parsed == .parked || parsed == .review else {
          throw UsageError(message: "--state must be parked or review (got '\(text)')", command: "queue")
        }
        bulk = ([parsed], nil)
      } else if rest.isEmpty {
        bulk = ([.parked, .review], arguments.options["--queue"])
      }
      for text in rest {
        guard let parsed = UUID(uuidString: text) else {
          throw UsageError(message: "'\(text)' is not a UUID", command: "queue")
        }
        ids.append(parsed)
      }
    default: break
    }
    let vault = try openVault(arguments)
    // Only `put` may create (and register) a container; reading commands never create or register
    // anything, so a mistyped --container is an error, not a new empty container.
    let mode: QueueContainer.OpenMode =
      switch action {
      case "put": .createIfNeeded
      case "resend": .existing
      default: .readOnly
      }
    let container = try QueueContainer(path: defaultContainer(arguments), vault: vault, mode: mode)
    switch action {
    case "put":
      let id = try id ?? SecureRandom.uuid()
      let outcome = try container.enqueue(payload, queue: name, id: id)
      let word = outcome == .stored ? "stored" : "duplicate"
      if arguments.flags.contains("--json") {
        terminal.print(
          try JSON.encode(
            PutResult(id: id.uuidString.lowercased(), outcome: word, container: container.path, bytes: payload.count)))
        return
      }
      terminal.print("\(word) \(id.uuidString.lowercased())")
    case "stats":
      let stats = try container.stats()
      if arguments.flags.contains("--json") {
        terminal.print(try JSON.encode(stats))
        return
      }
      terminal.print("Container \(stats.container)")
      terminal.print("  records:  \(stats.total) (\(stats.bytes) bytes sealed)")
      terminal.print(
        "  by state: "
          + stats.byState.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", "))
      terminal.print(
        "  by key version: "
          + stats.byVersion.sorted { $0.key < $1.key }.map { "v\($0.key) \($0.value)" }.joined(separator: ", "))
      terminal.print(
        "  dropped:  "
          + stats.dropped.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", "))
      // The ledger counts every record that ever left; say how many parked ones are still parked.
      terminal.print(
        "  resent:   "
          + stats.resent.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ")
          + " (parked now \(stats.byState["parked"] ?? 0), in review now \(stats.byState["review"] ?? 0))")
    case "list":
      try list(
        container, queue: arguments.options["--queue"], state: state, page: page,
        json: arguments.flags.contains("--json"))
    default:
      if let bulk {
        terminal.print("resent \(try container.resendAll(in: bulk.states, queue: bulk.queue))")
        return
      }
      let moved = try container.resend(ids)
      terminal.print("resent \(moved) of \(ids.count)")
      if moved < ids.count {
        throw QueueCommandError.notResendable(requested: ids.count, moved: moved)
      }
    }
  }
}

/// What `queue put --json` prints: the record's id, `stored` or `duplicate`, the container's path
/// and the payload's length in bytes.
struct PutResult: Encodable {
  var id: String
  var outcome: String
  var container: String
  var bytes: Int
}

enum QueueCommandError: Error, CustomStringConvertible {
  case notResendable(requested: Int, moved: Int)

  var description: String {
    switch self {
    case .notResendable(let requested, let moved):
      "\(requested - moved) of the ids are not parked or in review (unknown, pending or in flight); they were left as they are"
    }
  }
}
