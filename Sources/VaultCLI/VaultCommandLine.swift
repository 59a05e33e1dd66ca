import Foundation
import Telemetry
import Vault
import VaultCrypto
import VaultKeys
import VaultQueue
import VaultScan

/// The `vault` command line. `main.swift` only calls `run`; tests call it in-process.
public struct VaultCommandLine {
  let terminal: Terminal
  /// How key stores are made; tests may substitute one.
  let resolver: KeyStoreResolver?

  public init(terminal: Terminal, resolver: KeyStoreResolver? = nil) {
    self.terminal = terminal
    self.resolver = resolver
  }

  static let specs: [String: CommandSpec] = [
    "init": CommandSpec(name: "init", options: ["--store", "--keyfile"], flags: ["--json"], takesPositionals: false),
    "status": CommandSpec(name: "status", options: [], flags: ["--json"], takesPositionals: false),
    "seal": CommandSpec(name: "seal", options: ["--context", "-o"], flags: ["--armor"], takesPositionals: true),
    "open": CommandSpec(name: "open", options: ["--context", "-o"], flags: [], takesPositionals: true),
    "rotate": CommandSpec(
      name: "rotate", options: ["--max-age"], flags: ["--json", "--compromised", "--yes", "--if-due"],
      takesPositionals: false),
    "doctor": CommandSpec(name: "doctor", options: [], flags: ["--json"], takesPositionals: false),
    "queue": CommandSpec(
      name: "queue", options: ["--queue", "--id", "--container", "--state", "--limit", "--after"],
      flags: ["--json", "--all"], takesPositionals: true),
    "container": CommandSpec(name: "container", options: [], flags: ["--json"], takesPositionals: true),
    "telemetry": CommandSpec(
      name: "telemetry",
      options: ["--payload", "--session", "--endpoint", "--token-file", "--interval", "--ca-file"],
      flags: ["--json", "--allow-insecure-http"],
      takesPositionals: true),
    "scan": CommandSpec(
      name: "scan", options: ["--canary-file", "--inflate-limit", "--inflate-seconds"], flags: ["--json", "--verify"],
      takesPositionals: true,
      repeatable: ["--canary"]),
    "keyfile": CommandSpec(name: "keyfile", options: [], flags: [], takesPositionals: true),
    "version": CommandSpec(name: "version", options: [], flags: ["--json"], takesPositionals: true),
    "help": CommandSpec(name: "help", options: [], flags: [], takesPositionals: true),
    "backup": backupSpec, "restore": restoreSpec,
  ]

  /// Runs one command line (without the program name) and returns the exit code.
  public func run(_ argv: [String]) -> Int32 { run(rawArguments: argv.map { Array($0.utf8) }) }

  /// Runs one command line given as each argument's raw bytes (`main` passes argv as the kernel
  /// gave it: `CommandLine.arguments` repairs bytes that are not UTF-8, and a context is bytes).
  public func run(rawArguments: [[UInt8]]) -> Int32 { finish(execute(rawArguments)) }

  private func execute(_ rawArguments: [[UInt8]]) -> Int32 {
    let arguments: Arguments
    do {
      arguments = try ArgumentParser.parse(raw: rawArguments, specs: Self.specs)
    } catch {
      return usage(error)
    }
    if arguments.wantsVersion {
      terminal.print(Help.version)
      return ExitCode.success.rawValue
    }
    guard let command = arguments.command else {
      if arguments.home != nil, !arguments.wantsHelp {
        // `vault --home rotate` took "rotate" as the home: say so rather than print the overview.
        return usage(UsageError(message: "missing subcommand (after --home DIR)", command: nil))
      }
      terminal.print(Help.root)
      return (arguments.wantsHelp ? ExitCode.success : ExitCode.usage).rawValue
    }
    if arguments.wantsHelp { return help([command]) }
    if let refused = prepare(command) { return refused }
    do {
      switch command {
      case "help": return help(arguments.positionals)
      case "init": try initVault(arguments)
      case "status": try status(arguments)
      case "seal": try seal(arguments)
      case "open": try open(arguments)
      case "rotate": try rotate(arguments)
      case "doctor": return doctor(arguments)
      case "keyfile": try keyfile(arguments)
      case "queue": try queue(arguments)
      case "container": try container(arguments)
      case "telemetry": try telemetry(arguments)
      case "scan": return try scan(arguments)
      case "version": try version(arguments)
      case "backup": return try backup(arguments)
      case "restore": return try restore(arguments)
      default: return usage(UsageError(message: "unknown subcommand '\(command)'", command: nil))
      }
      return ExitCode.success.rawValue
    } catch let error as UsageError {
      return usage(error)
    } catch {
      return fail(error)
    }
  }

  // MARK: - Reporting

  private func help(_ topics: [String]) -> Int32 {
    guard let topic = topics.first else {
      terminal.print(Help.root)
      return ExitCode.success.rawValue
    }
    guard let entry = Help.commands[topic] else {
      return usage(UsageError(message: "no help for unknown subcommand '\(topic)'", command: nil))
    }
    terminal.print(entry.text)
    return ExitCode.success.rawValue
  }

  func usage(_ error: UsageError) -> Int32 {
    var text = "Error: \(error.message)\n"
    if let command = error.command, let entry = Help.commands[command] {
      text += "Usage: \(entry.usage)\n  See 'vault help \(command)'.\n"
    } else {
      text += "Usage: vault [--home DIR] <subcommand> [options]\n  See 'vault --help'.\n"
    }
    terminal.writeError(text)
    return ExitCode.usage.rawValue
  }

  /// Prints an error by kind (never contents) and picks its exit code.
  func fail(_ error: any Error) -> Int32 {
    let (message, code) = Self.describe(error)
    terminal.note("Error: \(message)")
    return code.rawValue
  }

  /// Error types whose descriptions are written for people and hold nothing secret.
  static let reportable: [any Error.Type] = [
    EnvelopeError.self, KeyStoreError.self, VaultError.self, CryptoError.self, QueueError.self,
    QueueCommandError.self, ListingError.self, TelemetryError.self, ScanError.self, RotationError.self,
    FlushRefused.self,
  ]

  static func describe(_ error: any Error) -> (String, ExitCode) {
    let (message, code) = describeWithoutAdvice(error)
    return (message + Advice.suffix(for: error), code)
  }

  private static func describeWithoutAdvice(_ error: any Error) -> (String, ExitCode) {
    switch error {
    case let failure as ManifestFile.Failure:
      if case .missing = failure { return (failure.description, .couldNotRun) }
      return (failure.description, .failure)
    case let failure as InputError: return (failure.description, .couldNotRun)
    case let failure as FileError: return (failure.description, .couldNotRun)
    case let failure as ArmorError:
      if case .tooLarge = failure { return (failure.description, .couldNotRun) }
      return (failure.description, .failure)
    case let failure as StandardInputError: return (failure.description, .couldNotRun)
    case let failure as ProcessResources.Shortage: return (failure.description, .couldNotRun)
    case let failure as ScanError: return (failure.description, .couldNotRun)
    case QueueError.noContainer(let path): return (QueueError.noContainer(path: path).description, .couldNotRun)
    case let failure as QueueError:
      switch failure {
      case .storage, .diskFull: return (failure.description + ProcessResources.fileSizeNote, .failure)
      case .outOfMemory: return (failure.description, .couldNotRun)
      default: return (failure.description, .failure)
      }
    case let failure as CustomStringConvertible where Self.reportable.contains { $0 == type(of: error) }:
      return (failure.description, .failure)
    default:
      return ("unexpected failure (\(type(of: error)))", .failure)
    }
  }

  // MARK: - Commands

  /// `--home`, else the default home (`Vault.defaultHome(environment:)`, which apps and memo use too).
  func homePath(_ arguments: Arguments) -> String {
    arguments.home ?? Vault.defaultHome(environment: terminal.environment)
  }

  /// VAULT_SECRET_SERVICE_TIMEOUT, already checked by `prepare` (5 s when unset).
  var secretServiceTimeout: Double {
    (try? CommandLineEnvironment.secretServiceTimeout(terminal.environment))
      ?? CommandLineEnvironment.defaultSecretServiceTimeout
  }

  var keyStores: KeyStoreResolver { resolver ?? .system(secretServiceTimeout: secretServiceTimeout) }

  func openVault(_ arguments: Arguments) throws -> Vault {
    try Vault.open(home: homePath(arguments), resolver: keyStores)
  }

  private func initVault(_ arguments: Arguments) throws {
    let choice = arguments.options["--store"] ?? "auto"
    guard ["auto", "secret-service", "keyfile"].contains(choice) else {
      throw UsageError(message: "--store must be auto, secret-service or keyfile (got '\(choice)')", command: "init")
    }
    let keyfile = arguments.options["--keyfile"]
    if keyfile != nil, choice == "secret-service" {
      throw UsageError(message: "--keyfile goes with --store keyfile or auto", command: "init")
    }
    // Refuse before probing anything, so an existing vault is reported first and untouched.
    if ManifestFile.exists(home: homePath(arguments)) { throw VaultError.alreadyExists(home: homePath(arguments)) }
    var descriptor: StoreDescriptor
    switch choice {
    case "secret-service": descriptor = StoreDescriptor(kind: .secretService)
    case "keyfile": descriptor = StoreDescriptor(kind: .keyfile, keyfile: keyfile)
    default:
      switch SecretServiceStore(timeout: secretServiceTimeout).probe() {
      case .available:
        descriptor = StoreDescriptor(kind: .secretService)
        terminal.note("vault: the Secret Service is available and unlocked; keys go there")
      case .unavailable(let reason):
        descriptor = StoreDescriptor(kind: .keyfile, keyfile: keyfile)
        terminal.note("vault: the Secret Service cannot be used (\(reason)); keys go to a keyfile")
      }
    }
    if descriptor.kind == .keyfile,
      case .secretServiceSkipped(let reason) = try Vault.checkForOrphanedKeys(
        home: homePath(arguments), resolver: keyStores)
    {
      // The reason's kind only: its usual hint ("use --store keyfile") is no advice for a keyfile init.
      let why =
        switch reason {
        case .noSessionBus: "no D-Bus session bus"
        case .noProvider: "no Secret Service provider"
        default: "\(reason)"
        }
      terminal.note(
        "vault: skipped the check for keys a lost manifest left in the Secret Service (\(why)); "
          + "only the keyfile path was checked")
    }
    let vault = try Vault.create(home: homePath(arguments), store: descriptor, resolver: keyStores)
    // The default queue container lives in the home and is registered for rotation from the start.
    do {
      _ = try QueueContainer(path: vault.home + "/" + Self.defaultContainerName, vault: vault)
    } catch {
      // The vault itself exists now (a second init would refuse): say what is usable and what is not.
      terminal.note(
        "vault: created vault \(vault.keyringID) in \(vault.home), but not its default container; "
          + "`vault queue put` creates it once the cause below is fixed")
      throw error
    }
    let manifest = vault.manifest
    if arguments.flags.contains("--json") {
      terminal.print(
        try JSON.encode(
          InitResult(
            vaultID: manifest.vaultID, home: vault.home, store: manifest.store.kind.rawValue,
            keyfile: manifest.store.kind == .keyfile ? manifest.store.keyfile : nil,
            activeVersion: manifest.activeVersion)))
      return
    }
    terminal.print("Created vault \(manifest.vaultID) in \(vault.home)")
    switch manifest.store.kind {
    case .keyfile: terminal.print("Keys: keyfile \(manifest.store.keyfile ?? "") (mode 0600)")
    case .secretService: terminal.print("Keys: Secret Service, default collection")
    case .memory: terminal.print("Keys: memory")
    }
    terminal.print("Active key version: \(manifest.activeVersion)")
  }

  private func status(_ arguments: Arguments) throws {
    let home = homePath(arguments)
    // Status reads only the manifest: it must work even when the key store is locked.
    let (manifest, integrity) = try Vault.inspect(home: home, resolver: keyStores)
    var counts: [String: [UInt32: Int]?] = [:]
    for container in manifest.containers {
      do {
        // updateValue, not a subscript assignment: assigning nil would drop the key, and a missing
        // container must stay listed (nil counts) rather than vanish from the status.
        counts.updateValue(
          try QueueContainer.recordCounts(path: container.path, keyring: manifest.keyringID!)?.byVersion,
          forKey: container.path)
      } catch {
        counts[container.path] = .some(nil)
        terminal.note("vault: could not count records in \(container.path): \(Self.describe(error).0)")
      }
    }
    let vault = Vault.describe(home: home, manifest: manifest, counts: counts, integrity: integrity)
    if arguments.flags.contains("--json") {
      terminal.print(try JSON.encode(withLastBackup(vault)))
      return
    }
    terminal.print("Vault \(vault.vaultID)")
    terminal.print("  home:     \(vault.home)")
    if let keyfile = vault.keyfile {
      terminal.print("  store:    keyfile \(keyfile.path) (mode \(keyfile.mode ?? "missing"))")
    } else {
      terminal.print("  store:    \(vault.store.rawValue)")
    }
    terminal.print("  active:   version \(vault.activeVersion)")
    terminal.print("  versions:")
    for version in vault.versions {
      let state = version.state.rawValue.padding(toLength: 13, withPad: " ", startingAt: 0)
      terminal.print(
        "    \(version.version)  \(state) created \(version.createdAt) (\(Self.days(version.ageDays)) ago)  "
          + "suite \(version.suite)  records \(version.records)")
      for reason in version.keptBecause { terminal.print("       kept: \(reason)") }
    }
    terminal.print("  manifest: \(vault.integrity)")
    printLastBackup(vault)
    for warning in vault.warnings { terminal.print("  warning:  \(warning) (`vault rotate`)") }
    terminal.print("  containers:")
    for container in vault.containers {
      let records = container.records.map { $0.values.reduce(0, +) }.map { "\($0) records" } ?? "missing"
      terminal.print("    \(container.path)  \(records)")
    }
  }

  /// The context exactly as given: bytes, not text, so contexts that differ only in bytes that
  /// are not UTF-8 stay different (repairing them to U+FFFD would let each open the other's records).
  func context(_ arguments: Arguments, _ command: String) throws -> [UInt8] {
    guard let context = arguments.rawOptions["--context"] else {
      throw UsageError(message: "missing '--context CTX'", command: command)
    }
    guard !context.isEmpty else {
      throw UsageError(message: "--context must not be empty: it binds the record to its place", command: command)
    }
    return context
  }

  func readInput() throws -> [UInt8] {
    do {
      return try terminal.readInput()
    } catch let error as StandardInputError {
      throw error
    } catch {
      throw InputError.unreadable
    }
  }

  private func rotate(_ arguments: Arguments) throws {
    let compromised = arguments.flags.contains("--compromised")
    if arguments.flags.contains("--yes"), !compromised {
      throw UsageError(message: "--yes goes with --compromised", command: "rotate")
    }
    let ifDue = arguments.flags.contains("--if-due")
    if ifDue, compromised {
      throw UsageError(
        message: "--if-due cannot go with --compromised (a leaked key is rotated now)", command: "rotate")
    }
    let maxAgeText = arguments.options["--max-age"]
    if maxAgeText != nil, !ifDue { throw UsageError(message: "--max-age goes with --if-due", command: "rotate") }
    var maxAge = RotationSchedule.defaultMaxAgeDays
    if let maxAgeText {
      guard let days = Double(maxAgeText), days.isFinite, (0...36500).contains(days) else {
        throw UsageError(
          message: "--max-age must be a number of days from 0 to 36500 (got '\(maxAgeText)')", command: "rotate")
      }
      maxAge = days
    }
    let vault = try openVault(arguments)
    var schedule: RotationSchedule?
    if ifDue {
      let due = vault.rotationSchedule(maxAgeDays: maxAge)
      schedule = due
      guard due.due else {
        if arguments.flags.contains("--json") {
          terminal.print(try JSON.encode(DueRotation(rotated: false, schedule: due, rotation: nil)))
        } else {
          terminal.print(
            "Not due: version \(due.activeVersion) is \(Self.days(due.ageDays)) old; the policy rotates after "
              + "\(Self.days(due.maxAgeDays)) (--max-age)")
        }
        return
      }
    }
    let assumeYes = arguments.flags.contains("--yes")
    let terminal = self.terminal
    let options = RotationOptions(
      retireUnused: true, compromised: compromised,
      confirm: { plan in Self.confirmCompromise(plan, assumeYes: assumeYes, terminal: terminal) })
    // The containers are checked, then opened one at a time, under the manifest lock.
    let report = try vault.rotate(containers: QueueContainerProvider(), options: options)
    if arguments.flags.contains("--json") {
      if let schedule {
        terminal.print(try JSON.encode(DueRotation(rotated: true, schedule: schedule, rotation: report)))
      } else {
        terminal.print(try JSON.encode(report))
      }
      return
    }
    if let schedule {
      terminal.print(
        "Due: version \(schedule.activeVersion) is \(Self.days(schedule.ageDays)) old; the policy rotates after "
          + "\(Self.days(schedule.maxAgeDays))")
    }
    terminal.print("Rotated vault \(vault.keyringID): version \(report.previousVersion) -> \(report.newVersion)")
    for (path, count) in report.resealed.sorted(by: { $0.key < $1.key }) {
      terminal.print("Re-sealed \(count) records in \(path)")
    }
    for (path, count) in report.purged.sorted(by: { $0.key < $1.key }) {
      terminal.print("Purged \(count) records that did not open from \(path)")
    }
    for (path, count) in report.keptUnreadable.sorted(by: { $0.key < $1.key }) {
      terminal.print("Kept \(count) records that do not open (now unreadable) in review in \(path)")
    }
    if !report.retired.isEmpty {
      terminal.print("Retired (keys deleted): " + report.retired.map(String.init).joined(separator: ", "))
    }
    for version in report.keptVersions {
      let reasons = report.keptBecause[String(version)] ?? []
      terminal.print("Kept version \(version) as decrypt-only: " + reasons.joined(separator: "; "))
    }
    terminal.print(String(format: "Took %.3f s", report.seconds))
  }

  /// What `rotate --if-due --json` prints: whether it rotated, the schedule it judged by, and the
  /// rotation's report when it did.
  struct DueRotation: Encodable {
    let rotated: Bool
    let schedule: RotationSchedule
    let rotation: RotationReport?

    func encode(to encoder: any Encoder) throws {
      var container = encoder.container(keyedBy: Key.self)
      try container.encode(rotated, forKey: .rotated)
      try container.encode(schedule, forKey: .schedule)
      // Absent is null, never omitted.
      try container.encode(rotation, forKey: .rotation)
    }

    enum Key: String, CodingKey { case rotated, schedule, rotation }
  }

  /// "12.5 days", "1 day", or "an unknown time" for an age the manifest does not give.
  static func days(_ value: Double?) -> String {
    guard let value else { return "an unknown time" }
    var text = String(format: "%.1f", value)
    if text.hasSuffix(".0") { text.removeLast(2) }
    return text == "1" ? "1 day" : "\(text) days"
  }

  /// Asks before a rotation after a compromise destroys anything; without a terminal only `--yes`
  /// (purge) lets it go on.
  static func confirmCompromise(_ plan: CompromisePlan, assumeYes: Bool, terminal: Terminal) -> CompromiseDecision {
    var text = "vault rotate --compromised will retire key versions "
    text += plan.retiring.map(String.init).joined(separator: ", ") + ".\n"
    for (path, count) in plan.unopenable.sorted(by: { $0.key < $1.key }) {
      text += "  \(count) records in \(path) do not open under any key present.\n"
    }
    if !plan.externalSealVersions.isEmpty {
      text +=
        "  Envelopes sealed with 'vault seal' under versions "
        + plan.externalSealVersions.map(String.init).joined(separator: ", ")
        + " become unreadable for good.\n"
    }
    terminal.writeError(text)
    if assumeYes { return .purge }
    guard
      let answer = terminal.ask(
        "Purge the records that do not open (p), keep them unreadable in review (k), or stop (s)? ")
    else {
      terminal.note("vault: no terminal to ask; rerun with --yes to purge, or without --compromised")
      return .abort
    }
    switch answer.lowercased() {
    case "p", "purge": return .purge
    case "k", "keep": return .keep
    default: return .abort
    }
  }
}

/// Problems with standard input.
enum InputError: Error, CustomStringConvertible {
  case empty
  case unreadable

  var description: String {
    switch self {
    case .empty: "standard input is empty; pipe an envelope into 'vault open'"
    case .unreadable: "could not read standard input"
    }
  }
}

/// What `init --json` prints: every key present, `keyfile` null unless the keys are in a keyfile.
struct InitResult: Encodable {
  var vaultID: String
  var home: String
  var store: String
  var keyfile: String?
  var activeVersion: UInt32

  enum CodingKeys: String, CodingKey {
    case home, store, keyfile
    case vaultID = "vault_id"
    case activeVersion = "active_version"
  }

  func encode(to encoder: any Encoder) throws {
    var container = encoder.container(keyedBy: CodingKeys.self)
    try container.encode(vaultID, forKey: .vaultID)
    try container.encode(home, forKey: .home)
    try container.encode(store, forKey: .store)
    try container.encode(keyfile, forKey: .keyfile)
    try container.encode(activeVersion, forKey: .activeVersion)
  }
}

enum JSON {
  static func encode<T: Encodable>(_ value: T) throws -> String {
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
    return String(decoding: try encoder.encode(value), as: UTF8.self)
  }
}
