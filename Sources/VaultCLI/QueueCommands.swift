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

  /// Says on standard error when the byte cap dropped records since its ledger read `before`: a
  /// put that pushes older records out must not look like one that only stored.
  func noteCapDrops(since before: Int, in container: QueueContainer) {
    guard let after = try? container.dropped()["cap"], after > before else { return }
    let count = after - before
    terminal.note(
      "note: the container's byte cap dropped \(count) older \(count == 1 ? "record" : "records") meanwhile "
        + "(counted in 'vault queue stats' as dropped: cap)")
  }

  /// `vault queue put|stats|list|resend`.
  func queue(_ arguments: Arguments) throws {
    let action = arguments.action ?? ""
    // The parser has checked every value and which options go with which action. Every argument
    // (and a `put`'s input) is checked before the container is opened, so a usage error or
    // unreadable input never leaves a new container behind.
    var payload: [UInt8] = []
    // `resend --all | --state | --queue`: the states and queue to resend in bulk (nil: by ids).
    var bulk: (states: Set<RecordState>, queue: String?)?
    switch action {
    case "put":
      // No more than a record may hold under this command's cap is read (the rest of a larger
      // input was read, up to 1 GiB, only to be refused; an outside review).
      let cap = QueueConfiguration().byteCap
      do {
        payload = try readInput(limit: cap - Envelope.overhead)
      } catch StandardInputError.tooLarge {
        throw StandardInputError.tooLargeForCap(cap: cap)
      }
      // A failed allocation traps: refuse a record the address space cannot seal and store.
      guard MemoryHeadroom.availableToSealAndStore(payload.count) else {
        throw StandardInputError.outOfMemory(bytes: 3 * payload.count)
      }
    case "resend":
      if let state = arguments.options["--state"].flatMap(RecordState.init(rawValue:)) {
        bulk = ([state], nil)
      } else if arguments.positionals.isEmpty {
        bulk = ([.parked, .review], arguments.options["--queue"])
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
      let id = try arguments.uuid("--id") ?? SecureRandom.uuid()
      // A writer with a larger cap (an app's configuration) filled it past this command's: a put
      // here would drop that writer's records down to this cap (an outside review: one put of a
      // few bytes dropped 181 records of 1 MiB).
      let held = try container.storedBytes()
      guard held <= container.configuration.byteCap else {
        throw QueueCommandError.overThisCommandsCap(held: held, cap: container.configuration.byteCap)
      }
      let droppedBefore = try container.dropped()["cap"] ?? 0
      let outcome = try container.enqueue(payload, queue: arguments.options["--queue"] ?? "", id: id)
      noteCapDrops(since: droppedBefore, in: container)
      let word = outcome == .stored ? "stored" : "duplicate"
      if outcome == .stored, arguments.options["--id"] == nil {
        terminal.done =
          "the record was stored as \(id.uuidString.lowercased()); running the command again would store it "
          + "again under a new id (give --id to make a retry safe)"
      }
      if arguments.flags.contains("--json") {
        terminal.printBlock(
          try JSON.encode(
            PutResult(id: id.uuidString.lowercased(), outcome: word, container: container.path, bytes: payload.count)))
        return
      }
      terminal.print("\(word) \(id.uuidString.lowercased())")
    case "stats":
      let stats = try container.stats()
      if arguments.flags.contains("--json") {
        terminal.printBlock(try JSON.encode(stats))
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
        "  by queue: "
          + stats.byQueue.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }
          .joined(separator: ", "))
      terminal.print("  minimum seal version: \(stats.minimumSealVersion)")
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
        container, queue: arguments.options["--queue"],
        state: arguments.options["--state"].flatMap(RecordState.init(rawValue:)),
        page: (arguments.wholeNumber("--limit"), arguments.uuid("--after")), json: arguments.flags.contains("--json"))
    default:
      if let bulk {
        terminal.print("resent \(try container.resendAll(in: bulk.states, queue: bulk.queue))")
        return
      }
      let ids = arguments.positionals.compactMap(UUID.init(uuidString:))
      let (moved, left) = try container.resendReporting(ids)
      terminal.print("resent \(moved) of \(ids.count)")
      // Each id left as it was, with its state's kind: record ids are not secret, and a person
      // resending several must know which to look at.
      for (id, state) in left {
        terminal.note("vault: not resent: \(id.uuidString.lowercased()) (\(Self.notResendableReason(state)))")
      }
      if !left.isEmpty {
        throw QueueCommandError.notResendable(requested: ids.count, moved: moved)
      }
    }
  }
}

extension VaultCommandLine {
  /// Why a record named to `queue resend` stayed where it was, by the state it was in.
  static func notResendableReason(_ state: RecordState?) -> String {
    switch state {
    case nil: "unknown id: no such record in this container"
    case .pending?: "pending: already waiting for delivery"
    case .inFlight?: "in flight: a deliverer holds it now"
    // Only another process moving it between the look and the update leaves one of these.
    case .some(let other): "\(other.rawValue): changed by another process while resending"
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
  case overThisCommandsCap(held: Int, cap: Int)

  var description: String {
    switch self {
    case .notResendable(let requested, let moved):
      "\(requested - moved) of the \(requested) ids were not resent, each listed above: they are not parked or in "
        + "review (unknown, pending or in flight); they were left as they are"
    case .overThisCommandsCap(let held, let cap):
      "the container holds \(held) bytes of sealed records, more than this command's \(cap)-byte cap: a writer "
        + "with a larger cap (an app) fills it, and storing here would drop that writer's records down to this "
        + "cap; nothing was stored or dropped: store it through that writer"
    }
  }
}

/// `vault queue put|stats|list|resend`.
enum QueueCommand: Subcommand {
  static let container = Parameter.option(
    "--container", "PATH", .file, help: "Another container file (default: queue.sqlite in the home).")

  static let declaration = CommandDeclaration(
    name: "queue", abstract: "Put records into a queue container and inspect it.",
    discussion: """
      Without --container the vault's default container (queue.sqlite in the home) is used. Only 'put' creates \
      a container (at a path that is not registered and holds nothing) and registers it so rotation covers it; \
      'stats' and 'list' only read, and a path with no container is an error. Nothing here prints record \
      contents.
      """,
    actions: [
      CommandDeclaration(
        name: "put", abstract: "Seal standard input and store it durably.",
        discussion: """
          Prints 'stored ID', or 'duplicate ID' when a record with that id already exists (the payload is then \
          not stored again). The container holds at most its byte cap (20 MB of sealed records by default): \
          past it the oldest records not in flight are dropped (only those of the queues a writer limited the \
          cap to, if one did), counted in 'queue stats', and a note on standard error says how many. A \
          container that already holds more than 20 MB (an app with a larger cap writes it) is refused, \
          nothing stored or dropped. Input larger than a record may hold under the cap (19999911 bytes) is \
          refused before the rest of it is read (exit 2).
          """,
        parameters: [
          .option("--queue", "NAME", .name, required: true, help: "The queue within the container."),
          .option("--id", "UUID", .uuid(what: "a record id"), help: "The record's id (default: a random UUID)."),
          container,
          .flag("--json", help: "Print JSON: id, outcome (stored or duplicate), container, bytes."),
        ],
        standardInput: "payload"),
      CommandDeclaration(
        name: "stats", abstract: "Count records by state, key version and queue.",
        discussion: """
          Records by state and key version, sealed bytes, the drop ledger (cap, age, rejected, parked, \
          undecryptable: every record that ever left) and how many parked and review records were resent since.
          """,
        parameters: [
          container,
          .flag(
            "--json",
            help: """
              Print JSON: container, total, bytes, by_state, by_version, by_queue, dropped, resent, \
              minimum_seal_version.
              """),
        ]),
      CommandDeclaration(
        name: "list", abstract: "List records, oldest first, without their contents.",
        discussion: """
          Ids, queues, states, attempts, key versions, sizes and error kinds, oldest first, written as they are \
          read (any size of queue). Page with --limit and --after.
          """,
        parameters: [
          .option("--queue", "NAME", .name, help: "Only this queue's records."),
          .option(
            "--state", "STATE", .choice(["pending", "in_flight", "parked", "review"]), help: "Only records in STATE."),
          .option("--limit", "N", .wholeNumber(0...Int.max, unit: nil), help: "At most N records."),
          .option(
            "--after", "ID", .uuid(what: "a record id"),
            help: "Only records stored after record ID (the last id of a page starts the next)."),
          container,
          .flag(
            "--json",
            help:
              "Print a JSON array: id, queue, state, attempts, error_kind, created_at, next_attempt_at, bytes, key_version."
          ),
        ]),
      CommandDeclaration(
        name: "resend", abstract: "Return parked or review records to pending.",
        discussion: """
          With a fresh attempt count: those named by id, or in bulk with exactly one of --all (every parked and \
          review record), --state parked|review, or --queue NAME (that queue's parked and review records). Prints \
          how many were resent; ids that are not parked or in review are left as they are, each listed on standard error \
          with why (unknown id, pending, in flight), and the exit is 1.
          """,
        parameters: [
          container,
          .flag("--all", help: "Every parked and review record."),
          .option(
            "--state", "STATE", .choice(["parked", "review"]), help: "Every record in STATE (parked or review)."),
          .option("--queue", "NAME", .name, help: "That queue's parked and review records."),
          .argument("ID", .zeroOrMore, .uuid(what: "a record id"), help: "Records to resend, by id."),
        ],
        constraints: [.exactlyOne(["--all", "--state", "--queue", "ID"])]),
    ],
    sharedHelp: [
      "--queue": "The queue within the container (put), or the queue to list or resend.",
      "--state": "pending, in_flight, parked or review (resend: parked or review).",
      "--json": "Print JSON (see 'vault help queue ACTION' for each action's keys).",
    ])

  static func run(_ cli: VaultCommandLine, _ arguments: Arguments) throws -> Int32 {
    try cli.queue(arguments)
    return ExitCode.success.rawValue
  }
}
