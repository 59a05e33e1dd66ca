import Foundation
import Telemetry
import Vault
import VaultBackup
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

  /// Runs one command line (without the program name) and returns the exit code.
  public func run(_ argv: [String]) -> Int32 { run(rawArguments: argv.map { Array($0.utf8) }) }

  /// Runs one command line given as each argument's raw bytes (`main` passes argv as the kernel
  /// gave it: `CommandLine.arguments` repairs bytes that are not UTF-8, and a context is bytes).
  public func run(rawArguments: [[UInt8]]) -> Int32 { finish(execute(rawArguments)) }

  /// Makes every wait of more than a second for the vault's lock, held by another process, say
  /// so on `terminal`'s standard error (`main` calls it once): a rotation stopped with Ctrl-Z
  /// holds it until resumed, and the commands behind it waited without a word.
  public static func reportLockWaits(on terminal: Terminal) {
    LockWait.observe(after: 1) { holder in terminal.note(lockWaitNote(holder)) }
  }

  /// What a command says while it waits for the vault's lock.
  static func lockWaitNote(_ holder: LockHolder) -> String {
    let lead = "vault: waiting for the vault's lock, "
    guard let name = holderName(holder) else {
      return lead + "which another process holds (a rotation, backup or restore holds it while it runs)"
    }
    guard holder.stopped else {
      return lead + "which \(name) holds (a rotation, backup or restore holds it while it runs)"
    }
    return lead + "which \(name) holds" + stoppedAdvice(holder) + ", or interrupt this command"
  }

  /// "process 12 (vault)"; nil when the holder is not known.
  static func holderName(_ holder: LockHolder) -> String? {
    holder.pid.map { "process \($0)" + (holder.command.map { " (\($0))" } ?? "") }
  }

  /// " while it is stopped …: resume it (…)" for a stopped holder; "" for another.
  static func stoppedAdvice(_ holder: LockHolder) -> String {
    guard holder.stopped, let pid = holder.pid else { return "" }
    return " while it is stopped (Ctrl-Z or SIGSTOP): resume it (`fg` in its shell, or `kill -CONT \(pid)`)"
  }

  private func execute(_ rawArguments: [[UInt8]]) -> Int32 {
    let arguments: Arguments
    do {
      arguments = try Commands.parser.parse(raw: rawArguments)
    } catch {
      return usage(error)
    }
    if arguments.wantsVersion {
      terminal.print(VersionCommand.line)
      return ExitCode.success.rawValue
    }
    guard let command = arguments.command, let type = Commands.type(named: command) else {
      if arguments.home != nil, !arguments.wantsHelp {
        // `vault --home rotate` took "rotate" as the home: say so rather than print the overview.
        return usage(UsageError(message: "missing subcommand (after --home DIR)", command: nil))
      }
      terminal.printBlock(Commands.help.rootPage())
      return (arguments.wantsHelp ? ExitCode.success : ExitCode.usage).rawValue
    }
    if arguments.wantsHelp { return help([command] + (arguments.action.map { [$0] } ?? [])) }
    if let refused = prepare(command) { return refused }
    do {
      return try type.run(self, arguments)
    } catch let error as UsageError {
      return usage(error)
    } catch let error as KeyStoreError where error.isKeyfileInsideData {
      terminal.error(sentence(for: error, arguments))
      return ExitCode.failure.rawValue
    } catch {
      if let sentence = unreachableSecretServiceSentence(for: error, arguments)
        ?? recoverSentence(for: error, arguments)
      {
        terminal.error(sentence)
        return ExitCode.failure.rawValue
      }
      return fail(error, home: arguments.home)
    }
  }

  // MARK: - Reporting

  /// `vault help [COMMAND [ACTION]]`: the page, or a usage error that suggests the nearest name.
  func help(_ topics: [String]) -> Int32 {
    guard let topic = topics.first else {
      terminal.printBlock(Commands.help.rootPage())
      return ExitCode.success.rawValue
    }
    guard let command = Commands.root.command(topic) else {
      return usage(
        UsageError(
          message: "no help for unknown subcommand '\(Suggestion.shown(topic))'"
            + Suggestion.hint(topic, among: Commands.root.commands.map(\.name)), command: nil))
    }
    guard topics.count > 1 else {
      terminal.printBlock(Commands.help.page(command))
      return ExitCode.success.rawValue
    }
    guard let action = command.actions.first(where: { $0.name == topics[1] }) else {
      let names = command.actions.map(\.name)
      return usage(
        UsageError(
          message: names.isEmpty
            ? "'\(command.name)' has no actions"
            : "no help for unknown \(command.name) action '\(Suggestion.shown(topics[1]))'"
              + Suggestion.hint(topics[1], among: names), command: "help"))
    }
    terminal.printBlock(Commands.help.page(command, action: action))
    return ExitCode.success.rawValue
  }

  func usage(_ error: UsageError) -> Int32 {
    // The message may echo an argument or a variable: escaped, on one line. The usage lines are
    // vault's own.
    var text = "Error: \(Printable.escaped(error.message))\n"
    if let name = error.command, let command = Commands.root.command(name) {
      let action = error.action.flatMap { name in command.actions.first { $0.name == name } }
      let topic = ([command.name] + (action.map { [$0.name] } ?? [])).joined(separator: " ")
      let line = Commands.help.wrappedUsage(Commands.help.errorUsage(command, action: action), lead: "Usage: ")
      text += "\(line)\n  See 'vault help \(topic)'.\n"
    } else {
      text += "Usage: vault [--home DIR] <subcommand> [options]\n  See 'vault --help'.\n"
    }
    terminal.writeError(text)
    return ExitCode.usage.rawValue
  }

  /// Prints an error by kind (never contents) and picks its exit code. When the command was given
  /// `--home DIR` and the error's advice shows a vault command, a note says to give that command
  /// the same home: pasted as shown, it would act on the default vault (or `$VAULT_HOME`'s).
  ///
  /// - Parameters:
  ///   - error: what went wrong.
  ///   - home: the `--home` the command was given, as given; nil when none was.
  /// - Returns: the exit code for `error`.
  func fail(_ error: any Error, home: String? = nil) -> Int32 {
    let (message, code) = Self.describe(error)
    terminal.error(message)
    if let note = homeNote(after: message, home: home) { terminal.note(note) }
    return code.rawValue
  }

  /// The line that says to give a vault command shown in `text` the home this command was given:
  /// pasted as shown, it would act on the default vault (or `$VAULT_HOME`'s). Every sink that
  /// prints advice after a command given `--home DIR` (errors, backup's, doctor's lines) asks here.
  ///
  /// - Parameters:
  ///   - text: what was printed (an error, a report's lines).
  ///   - home: the `--home` the command was given, as given; nil when none was (a home from
  ///     `$VAULT_HOME` is kept by a pasted command).
  /// - Returns: the note; nil when there is no `--home` or `text` shows no vault command that
  ///   lacks one.
  func homeNote(after text: String, home: String?) -> String? {
    guard let home else { return nil }
    let commands = text.components(separatedBy: "`vault ").dropFirst()
    guard commands.contains(where: { !$0.hasPrefix("--home ") }) else { return nil }
    return "vault: give the command above this vault's home: `vault --home \(ShellWord.quoted(home)) …`"
  }

  /// Error types whose descriptions are written for people and hold nothing secret.
  static let reportable: [any Error.Type] = [
    EnvelopeError.self, KeyStoreError.self, VaultError.self, CryptoError.self, QueueError.self,
    QueueCommandError.self, ListingError.self, TelemetryError.self, ScanError.self, RotationError.self,
    FlushRefused.self, DeliveryLibraryMissing.self,
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
    // The output was written: the command ran, and what is left to do is a removal.
    case FileError.temporaryLeft: return ("\(error)", .failure)
    case let failure as FileError: return (failure.description, .couldNotRun)
    case let failure as ArmorError:
      if case .tooLarge = failure { return (failure.description, .couldNotRun) }
      return (failure.description, .failure)
    case let failure as StandardInputError: return (failure.description, .couldNotRun)
    case let failure as ProcessResources.Shortage: return (failure.description, .couldNotRun)
    case let failure as ScanError: return (failure.description, .couldNotRun)
    case BackupError.mergeRunning: return ("\(error)", .couldNotRun)
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

  func initVault(_ arguments: Arguments) throws {
    let choice = arguments.options["--store"] ?? "auto"
    let keyfile = arguments.options["--keyfile"]
    if keyfile != nil, choice == "secret-service" {
      throw UsageError(message: "--keyfile goes with --store keyfile or auto", command: "init")
    }
    // Refuse before probing anything, so an existing vault is reported first and untouched.
    try Vault.refuseUnfinishedRestore(homePath(arguments))
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
      let why = reason.absentServiceReason ?? "\(reason)"
      terminal.note(
        "vault: skipped the check for keys a lost manifest left in the Secret Service (\(why)); "
          + "only the keyfile path was checked")
    }
    let vault: Vault
    do {
      vault = try Vault.create(home: homePath(arguments), store: descriptor, resolver: keyStores)
    } catch {
      // A failure after the manifest was in place (a last flush, the first open): the vault may
      // well exist now, and a second init would refuse. Say so when a verified manifest is there.
      if let (manifest, integrity) = try? Vault.inspect(home: homePath(arguments), resolver: keyStores),
        integrity.hasPrefix("verified")
      {
        terminal.note(
          "vault: vault \(manifest.vaultID) was created in \(absolutePath(homePath(arguments))), but a last step "
            + "failed; `vault status` and `vault doctor` show whether it works (do not run init again)")
      }
      throw error
    }
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
    if manifest.store.kind == .keyfile, let keyfile = manifest.store.keyfile,
      let warning = KeyfileStore.volatileWarning(for: keyfile)
    {
      terminal.note("vault: warning: " + warning)
    }
    if arguments.flags.contains("--json") {
      terminal.printBlock(
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

  func status(_ arguments: Arguments) throws {
    // Absolute, as every other path status prints (and as a script reading --json needs it).
    let home = absolutePath(homePath(arguments))
    // Status reads only the manifest: it must work even when the key store is locked.
    let inspection = try Vault.inspection(home: home, resolver: keyStores)
    let (manifest, integrity) = (inspection.manifest, inspection.integrity)
    var counts: [String: [UInt32: Int]?] = [:]
    // Containers that are there but were not counted: "not counted" rather than "missing".
    var uncounted: Set<String> = []
    // Containers a merge into began and did not finish: counted, but maybe short of records.
    var unfinished: [(path: String, bundles: [String])] = []
    // Paths where something else than the registered container is, and what: not counted.
    var replaced: [(path: String, found: String)] = []
    for container in manifest.containers {
      // Status only reads, but reading opens the file through SQLite, which (run as root) gives a
      // planted -wal the database's owner and then plays its frames (outside review: records
      // lost): a container the others refuse is not opened here either, only named.
      do {
        try QueueContainer.checkPrivate(container.path)
      } catch let error as QueueError {
        terminal.note("vault: warning: " + error.refusal(outcome: "it was not opened or counted"))
        counts.updateValue(nil, forKey: container.path)
        uncounted.insert(container.path)
        continue
      }
      // Another container, another vault's, an empty file: its counts are not this container's
      // (an outside review: another container's 500 records were counted in place of 8,000 lost).
      if let found = try? Self.replacement(at: container.path, registered: container.id, keyring: manifest.keyringID!) {
        counts.updateValue(nil, forKey: container.path)
        replaced.append((container.path, found))
        continue
      }
      do {
        // updateValue, not a subscript assignment: assigning nil would drop the key, and a missing
        // container must stay listed (nil counts) rather than vanish from the status.
        counts.updateValue(
          try QueueContainer.recordCounts(path: container.path, keyring: manifest.keyringID!)?.byVersion,
          forKey: container.path)
        let bundles = try QueueContainer.unfinishedMerges(path: container.path)
        if !bundles.isEmpty { unfinished.append((container.path, bundles)) }
      } catch {
        counts.updateValue(nil, forKey: container.path)
        uncounted.insert(container.path)
        terminal.note(
          "vault: could not count records in \(container.path): \(Self.describe(error).0)")
      }
    }
    var vault = Vault.describe(
      home: home, manifest: manifest, counts: counts, uncounted: uncounted, replaced: Set(replaced.map(\.path)),
      integrity: integrity)
    let running = MergeLock.holder(home: home)
    let last = Backup.lastBackup(home: home, vaultID: vault.vaultID, homeID: inspection.homeIdentity)
    let behind =
      last.map {
        Backup.containersBehind(
          bundle: $0.bundle, registered: manifest.containers.compactMap { c in c.id.map { ($0, c.path) } })
      } ?? []
    let restoreWarnings =
      replaced.map { Self.replacedWarning($0.path, found: $0.found) }
      + behind.map { Self.behindWarning($0, bundle: last?.bundle ?? "") }
      + unfinished.map { Self.mergeUnfinishedWarning($0.path, $0.bundles, running: running) }
    vault.warnings += restoreWarnings
    if arguments.flags.contains("--json") {
      terminal.printBlock(try JSON.encode(withLastBackup(vault, last: last)))
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
    // A container missing or not counted may hold records of any version: the sums are then of
    // the containers counted, and say so ("records 0" read as none while 13 were there).
    let partial = vault.containers.contains { $0.records == nil } ? " or more (not every container was counted)" : ""
    for version in vault.versions {
      let state = version.state.rawValue.padding(toLength: 13, withPad: " ", startingAt: 0)
      terminal.print(
        "    \(version.version)  \(state) created \(version.createdAt) (\(Self.days(version.ageDays)) ago)  "
          + "suite \(version.suite)  records \(version.records)"
          + (version.state == .retired ? "" : partial))
      for reason in version.keptBecause { terminal.print("       kept: \(reason)") }
    }
    terminal.print("  manifest: \(vault.integrity)")
    printLastBackup(last)
    for warning in Vault.statusWarnings(manifest, home: home) {
      terminal.print("  warning:  \(warning)" + Advice.suffix(for: warning))
    }
    for warning in restoreWarnings { terminal.print("  warning:  \(warning)") }
    terminal.print("  containers:")
    for container in vault.containers {
      let records =
        container.records.map { counted($0.values.reduce(0, +), "record") }
        ?? (container.state == .unreadable
          ? "not counted (see above)" : container.state == .replaced ? "replaced (see above)" : "missing")
      terminal.print("    \(container.path)  \(records)")
    }
  }

  /// What is at a registered container's path when it is not that container (`found` for `status`
  /// and `doctor`), or nil when it is (or nothing, or a file that cannot be looked at, is there).
  static func replacement(at path: String, registered id: String?, keyring: KeyringID) throws -> String? {
    let probed = try QueueContainer.probe(path: path)
    switch probed {
    case .missing: return nil
    case .empty: return "an empty file"
    case .notAContainer(let reason):
      // A FIFO, directory or device there is named by the count that refuses it (as unreadable).
      var info = stat()
      guard lstat(path, &info) == 0, info.st_mode & S_IFMT == S_IFREG else { return nil }
      return "a file that is not a container (\(reason))"
    case .container: return probed.otherContainer(than: id, of: keyring.hex)
    }
  }

  /// What `status` says of a registered container that holds no mark of the newest bundle's
  /// snapshot of it.
  static func behindWarning(_ path: String, bundle: String) -> String {
    "registered container \(path) holds no mark of its snapshot in \(bundle), the newest backup: an older copy "
      + "of it was put back (a file-system restore, a sync; or the mark could not be written then), and that bundle "
      + "may hold records it lacks; `vault backup` keeps that bundle (never prunes it) until it is merged: `vault "
      + "restore \(ShellWord.quoted(bundle))`"
  }

  /// What `status` and `doctor` say of a registered container something else stands in for.
  static func replacedWarning(_ path: String, found: String) -> String {
    "registered container \(path) was replaced: it holds \(found), so its records were not counted and may be "
      + "gone; put the registered container back (from a backup: `vault restore BUNDLE`), and `vault rotate` and "
      + "writers refuse it until then"
  }

  /// Whether a rotation refused in its first step, before it recorded anything: nothing it did
  /// stopped part-way, whatever an earlier rotation left (after a stopped rotation after a
  /// compromise, an ordinary one's refusal was preceded by "the rotation stopped part-way … run
  /// `vault rotate` again: it resumes", which it refuses to do: an outside review).
  static func refusedBeforeAnything(_ error: any Error) -> Bool {
    switch error as? RotationError {
    case .containerMissing?, .containerEmpty?, .notAContainer?, .foreignContainer?, .containerReplaced?, .olderCopy?,
      .compromiseUnfinished?, .notWritable?:
      true
    default: false
    }
  }

  /// What `status` and `doctor` say of a container a merge into began and did not finish, while
  /// a merge into the home holds `merge.lock` (`running`: the process, maybe stopped) or none does.
  static func mergeUnfinishedWarning(_ path: String, _ bundles: [String], running: LockHolder?) -> String {
    let restore = "a restore of \(bundles.joined(separator: " and ")) into this home"
    if let running {
      let by = holderName(running).map { " (\($0))" } ?? ""
      // One stopped with Ctrl-Z never finishes until resumed (a review: it was called running).
      let stopped =
        running.stopped
        ? " but is stopped (Ctrl-Z or SIGSTOP): resume it (`fg` in its shell, or `kill -CONT \(running.pid ?? 0)`);"
        : ":"
      return "\(restore) is running now\(by)\(stopped) container \(path) may lack records it holds until it "
        + "finishes, and `vault backup` refuses it until then"
    }
    return "\(restore) did not finish (a full disk or a kill interrupted it): container \(path) may lack records "
      + "it holds, and `vault backup` refuses it; run `vault restore` of it again, which adds what it had not (if "
      + "that bundle is gone: `vault container accept \(ShellWord.quoted(path))`)"
  }

  /// The context exactly as given: bytes, not text, so contexts that differ only in bytes that
  /// are not UTF-8 stay different (repairing them to U+FFFD would let each open the other's records).
  func context(_ arguments: Arguments, _ command: String) throws -> [UInt8] {
    // Required and non-empty: the parser checked both.
    arguments.rawOptions["--context"] ?? []
  }

  func readInput(limit: Int = StandardStreams.inputLimit) throws -> [UInt8] {
    do {
      let bytes = try terminal.readInput(limit)
      guard bytes.count <= limit else { throw StandardInputError.tooLarge(limit: limit) }
      return bytes
    } catch let error as StandardInputError {
      throw error
    } catch {
      throw InputError.unreadable
    }
  }

  func rotate(_ arguments: Arguments) throws {
    // The parser has checked --max-age and which flags go together.
    let compromised = arguments.flags.contains("--compromised")
    let ifDue = arguments.flags.contains("--if-due")
    let maxAge = arguments.number("--max-age") ?? RotationSchedule.defaultMaxAgeDays
    // Asked before anything is made: a script that cannot answer must say --yes up front, rather
    // than leave a new key active and the rotation unfinished.
    if compromised, !arguments.flags.contains("--yes"), terminal.askLine == nil {
      throw UsageError(
        message: "--compromised needs --yes when there is no terminal to ask (it may purge records that do not "
          + "open and makes 'vault seal' envelopes under the old keys unreadable)", command: "rotate")
    }
    // After a compromise, a rotation stopped with its key stored is the rotation's to judge, not
    // the open's to finish (see `Vault.open(home:resolver:clock:finishingStoppedRotation:)`).
    let vault = try Vault.open(
      home: homePath(arguments), resolver: keyStores, finishingStoppedRotation: !compromised)
    var schedule: RotationSchedule?
    if ifDue {
      let due = vault.rotationSchedule(maxAgeDays: maxAge)
      schedule = due
      guard due.due else {
        if arguments.flags.contains("--json") {
          terminal.printBlock(try JSON.encode(DueRotation(rotated: false, schedule: due, rotation: nil)))
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
    let progress = ProgressLine(terminal, json: arguments.flags.contains("--json"))
    // Ctrl-C clears the line, then ends the process by the signal as before: the rotation is left
    // where it stopped (status says so; a rerun resumes it). It was left on the screen.
    if progress.isEnabled { Self.clearingOnStop(progress) }
    let options = RotationOptions(
      retireUnused: true, compromised: compromised,
      confirm: { plan in
        // The question must not share a line with the progress.
        progress.finish()
        return Self.confirmCompromise(plan, assumeYes: assumeYes, terminal: terminal)
      },
      progress: { step in progress.update(Self.rotationProgressText(step)) })
    // The containers are checked, then opened one at a time, under the manifest lock.
    let report: RotationReport
    let activeBefore = vault.activeVersion
    // A rotation an earlier run left unfinished, which this one resumes: its new version may be
    // active already (opening the vault makes a pending version active), so the active version
    // alone does not tell whether this run got anywhere.
    let resuming =
      vault.manifest.resealing != nil || vault.manifest.unfinishedCompromise != nil
      || vault.manifest.versions.contains { $0.state == .pending }
    // A keyfile move that stopped part-way: the rotation removes its second file first, or stops
    // when it cannot be read; one that is not there at all may be on a drive not mounted now.
    let stoppedMove = Vault.stoppedMove(home: vault.home)
    do {
      defer { progress.finish() }
      report = try vault.rotate(containers: QueueContainerProvider(), options: options)
    } catch {
      // Said before the error itself is printed. The newest authentic manifest (the home's file or
      // the key store's copy, which is written first) tells how far the rotation got.
      var after: Manifest?
      var unreadable = false
      do {
        try vault.reload()
        after = vault.manifest
      } catch {
        unreadable = error is KeyStoreError
      }
      let unfinished = after.map {
        $0.resealing != nil || $0.unfinishedCompromise != nil || $0.versions.contains { $0.state == .pending }
      }
      if let after, after.activeVersion != activeBefore || resuming, unfinished == false {
        // The rotation is done (running it again would make another version); what failed came after.
        let homeEpoch = try? ManifestFile.read(home: vault.home).manifest.epoch
        if homeEpoch.map({ $0 < after.epoch }) ?? true {
          terminal.note(
            "vault: the rotation to version \(after.activeVersion) finished (the key store's copy of the manifest "
              + "records it), but \(ManifestFile.path(home: vault.home)) could not be updated; fix what the error "
              + "below says: the next vault command brings that file up to date (no need to rotate again)")
        } else {
          terminal.note(
            "vault: the rotation to version \(after.activeVersion) finished, but its clean-up (deleting the keys of "
              + "the versions it retired) did not; fix what the error below says: the next rotation does it again")
        }
      } else if unreadable, case KeyStoreError.timedOut = error {
        // The key store stopped answering, at any step: how far the rotation got cannot be read
        // from an authentic manifest now, and a guess could send the operator to rotate again.
        terminal.note(
          "vault: the key store stopped answering, so how far this rotation got cannot be checked now; once it "
            + "answers, `vault status` tells whether a rotation is under way (`vault rotate"
            + (compromised ? " --compromised" : "") + "` resumes it)")
      } else if !Self.refusedBeforeAnything(error), let active = after?.activeVersion,
        active != activeBefore || (resuming && unfinished == true)
      {
        // Stopped after the new version was made active: the re-sealing is unfinished. An ordinary
        // rerun resumes it (it adds no further version). After a compromise only `rotate
        // --compromised` may finish it (an ordinary rotation refuses), and it always makes a fresh
        // key (`Vault.rotate`): say so, rather than promise a resumption that adds no version.
        let rerun =
          compromised
          ? "`vault rotate --compromised` again: it makes another fresh key (the one made here may have leaked "
            + "too) and retires every version before it"
          : "`vault rotate` again: it resumes"
        terminal.note(
          "vault: the rotation stopped part-way: version \(active) is active, and the versions before it keep "
            + "their keys until a rotation finishes; fix what the error below says, then run " + rerun)
      }
      throw error
    }
    terminal.done =
      "the rotation to version \(report.newVersion) finished; running it again would make another version"
    if let move = stoppedMove, !report.retired.isEmpty {
      let current = vault.manifest.store.keyfile
      for path in [move.old, move.new].compactMap({ $0 })
      where path != current && !FileManager.default.fileExists(atPath: path) {
        terminal.note(
          "vault: a keyfile move had stopped part-way, and \(path), where it left a second copy of the keys, "
            + "holds no file now; if that place is on a drive that is not mounted, or the file was moved, delete it "
            + "wherever it is: it holds the keys this rotation deleted")
      }
    }
    if arguments.flags.contains("--json") {
      if let schedule {
        terminal.printBlock(try JSON.encode(DueRotation(rotated: true, schedule: schedule, rotation: report)))
      } else {
        terminal.printBlock(try JSON.encode(report))
      }
      return
    }
    if let schedule, schedule.unfinished {
      // Its age is not the reason: a version made by a rotation that was stopped is days old at most.
      terminal.print(
        "Due: the rotation to version \(schedule.activeVersion) did not finish (it was stopped or killed); "
          + "resuming it")
    } else if let schedule {
      terminal.print(
        "Due: version \(schedule.activeVersion) is \(Self.days(schedule.ageDays)) old; the policy rotates after "
          + "\(Self.days(schedule.maxAgeDays))")
    }
    terminal.print("Rotated vault \(vault.keyringID): version \(report.previousVersion) -> \(report.newVersion)")
    for (path, count) in report.resealed.sorted(by: { $0.key < $1.key }) {
      terminal.print("Re-sealed \(counted(count, "record")) in \(path)")
    }
    for (path, count) in report.purged.sorted(by: { $0.key < $1.key }) {
      terminal.print("Purged \(counted(count, "record")) that did not open from \(path)")
    }
    for (path, count) in report.keptUnreadable.sorted(by: { $0.key < $1.key }) {
      terminal.print(
        "Kept \(counted(count, "record")) that do not open (now unreadable) in review in \(path)")
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
    // One note a line: each escapes what it holds (a container's path) once.
    terminal.note(
      "vault rotate --compromised will retire key versions " + plan.retiring.map(String.init).joined(separator: ", ")
        + ".")
    for (path, count) in plan.unopenable.sorted(by: { $0.key < $1.key }) {
      terminal.note("  \(counted(count, "record")) in \(path) do not open under any key present.")
    }
    if !plan.externalSealVersions.isEmpty {
      terminal.note(
        "  Envelopes sealed with 'vault seal' under versions "
          + plan.externalSealVersions.map(String.init).joined(separator: ", ") + " become unreadable for good.")
    }
    if assumeYes { return .purge }
    // With records that do not open, what to do with them; with only envelopes at stake, yes or no.
    let question =
      plan.unopenable.isEmpty
      ? "Retire them anyway (y), or stop (n)? "
      : "Purge the records that do not open (p), keep them unreadable in review (k), or stop (s)? "
    let answers: [String: CompromiseDecision] =
      plan.unopenable.isEmpty
      ? ["y": .purge, "yes": .purge, "n": .abort, "no": .abort]
      : ["p": .purge, "purge": .purge, "k": .keep, "keep": .keep, "s": .abort, "stop": .abort]
    // A typo is asked again (three times), never taken for an answer.
    for _ in 0..<3 {
      guard let answer = terminal.ask(question) else {
        // nil: no terminal at all, or the end of input (Ctrl-D) on one: no answer is a stop.
        // After Ctrl-D the cursor is still on the question's line: end it first.
        terminal.say(
          terminal.askLine == nil
            ? "vault: no terminal to ask; rerun with --yes to purge\n" : "\nvault: no answer; stopped\n")
        return .abort
      }
      if let decision = answers[answer.trimmingCharacters(in: .whitespaces).lowercased()] { return decision }
      terminal.note("vault: please answer " + (plan.unopenable.isEmpty ? "y or n" : "p, k or s"))
    }
    return .abort
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
    return Printable.json(String(decoding: try encoder.encode(value), as: UTF8.self))
  }
}

extension VaultCommandLine {
  /// rotate's progress line: the records re-sealed over every container so far (the count never
  /// starts again), then which container it is in. No percentage: the records still to re-seal
  /// are not counted ahead, which would open every container twice. The count comes first so a
  /// narrow terminal cuts the path, not the count.
  static func rotationProgressText(_ step: RotationProgress) -> String {
    "rotating: \(counted(step.resealedInAll, "record")) re-sealed so far; container \(step.container) of "
      + "\(step.containers): \(step.path)"
  }
}
