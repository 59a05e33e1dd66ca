import CProcessHardening
import Foundation
import Outbox
import Vault
import VaultBackup
import VaultKeys

// `vault backup --to DIR`, `vault backup --verify BUNDLE` and `vault restore BUNDLE` (issue 14).
// Declared as BackupCommand and RestoreCommand below.

extension VaultCommandLine {
  /// `backup --to DIR` writes, verifies and prunes; `backup --verify BUNDLE` checks a bundle.
  func backup(_ arguments: Arguments) throws -> Int32 {
    // Exactly one of --to and --verify, and --keep only with --to: the parser checked.
    if let bundle = arguments.options["--verify"] {
      return try reportingBackupErrors(arguments) {
        // What needs no passphrase is checked before it is asked for.
        try Backup.check(bundle: bundle)
        let passphrase = try readPassphrase(arguments, confirm: false)
        let progress = ProgressLine(terminal, json: arguments.flags.contains("--json"))
        defer { progress.finish() }
        let report = try Backup.verify(bundle: bundle, passphrase: passphrase) {
          progress.update("verify: \($0)", step: true)
        }
        progress.finish()
        if arguments.flags.contains("--json") {
          terminal.printBlock(try JSON.encode(report))
        } else {
          printVerification(report, heading: "Verified bundle \(report.bundle)")
        }
      }
    }
    let directory = arguments.options["--to"] ?? ""
    let keep = arguments.wholeNumber("--keep") ?? Backup.defaultKeep
    let vault = try openVault(arguments)
    return try reportingBackupErrors(arguments) {
      try Backup.checkDestination(directory)
      let passphrase = try readPassphrase(arguments, confirm: true)
      let progress = ProgressLine(terminal, json: arguments.flags.contains("--json"))
      defer { progress.finish() }
      // Ctrl-C, SIGTERM or SIGHUP (taken over only after the passphrase prompt, which restores the
      // terminal on its own): remove the work directory, then end as the signal would have. The
      // default action comes back first: removing waits for a snapshot under way, and a second
      // Ctrl-C ends vault at once (the next backup then removes what is left, after a minute).
      let terminal = self.terminal
      StopSignals.handle { signal in
        Glibc.signal(signal, SIG_DFL)
        let left = Backup.abandonWork()
        progress.finish()
        let name = [SIGINT: "SIGINT", SIGTERM: "SIGTERM", SIGHUP: "SIGHUP"][signal] ?? "signal \(signal)"
        terminal.note(
          "vault: the backup was stopped (\(name)); "
            + (left.isEmpty
              ? "its work directory was removed"
              : "its work directory \(left.joined(separator: ", ")) could not be removed: delete it"))
        Self.endBy(signal)
      }
      let report: BackupReport
      do {
        report = try Backup.create(
          vault: vault, to: directory, passphrase: passphrase, keep: keep, toolVersion: VersionCommand.number,
          progress: { progress.update("backup: \($0)", step: true) })
      } catch {
        // The handler removed the work directory under the backup (a file it wanted is gone):
        // the handler's note and the signal end the process, not this error.
        Self.awaitStopIfStopping()
        throw error
      }
      progress.finish()
      for warning in report.warnings { terminal.note("vault: warning: " + warning) }
      if arguments.flags.contains("--json") {
        terminal.printBlock(try JSON.encode(report))
        return
      }
      printVerification(
        report.verification, heading: "Wrote and verified \(report.bundle) (\(report.size) bytes)")
      for path in report.removed { terminal.print("Removed older bundle \(path)") }
      terminal.print(String(format: "Took %.3f s", report.seconds))
    }
  }

  /// `restore BUNDLE [--into HOME] [--store …]`: verifies, then makes a new home.
  func restore(_ arguments: Arguments) throws -> Int32 {
    let bundle = arguments.positionals[0]
    let choice = arguments.options["--store"] ?? "auto"
    let keyfile = arguments.options["--keyfile"]
    if keyfile != nil, choice == "secret-service" {
      throw UsageError(message: "--keyfile goes with --store keyfile or auto", command: "restore")
    }
    let home = arguments.options["--into"] ?? homePath(arguments)
    return try reportingBackupErrors(arguments) {
      // The bundle and then the home are checked before anything is asked or probed: a home holding
      // this vault is merged into, one holding another vault or other files is refused.
      try Backup.check(bundle: bundle)
      do {
        try Backup.refuseExistingHome(home, bundle: bundle)
      } catch BackupError.homeHoldsThisVault {
        if arguments.options["--store"] != nil || keyfile != nil {
          throw UsageError(
            message:
              "\(home) holds this bundle's vault: a merge keeps its key store, so --store and --keyfile do not apply",
            command: "restore")
        }
        try merge(bundle: bundle, home: home, arguments)
        return
      }
      var descriptor = StoreDescriptor(kind: .keyfile, keyfile: keyfile)
      let stoppedStore = Vault.unfinishedRestore(home: home)?.store
      switch choice {
      case "secret-service": descriptor = StoreDescriptor(kind: .secretService)
      case "keyfile": break
      default:
        if let stoppedStore, keyfile == nil {
          // A rerun finishes a stopped restore in the store it began writing keys into.
          descriptor = stoppedStore
          terminal.note(
            "vault: finishing the restore that stopped part-way in \(home); keys go to the same store"
          )
        } else if case .available = SecretServiceStore(timeout: secretServiceTimeout).probe() {
          descriptor = StoreDescriptor(kind: .secretService)
          terminal.note("vault: the Secret Service is available and unlocked; keys go there")
        } else {
          terminal.note("vault: the Secret Service cannot be used; keys go to a keyfile")
        }
      }
      let passphrase = try readPassphrase(arguments, confirm: false)
      let progress = ProgressLine(terminal, json: arguments.flags.contains("--json"))
      defer { progress.finish() }
      let report = try Backup.restore(
        bundle: bundle, passphrase: passphrase, into: home, store: descriptor, resolver: keyStores,
        progress: { progress.update("restore: \($0)", step: true) })
      progress.finish()
      if arguments.flags.contains("--json") {
        terminal.printBlock(try JSON.encode(report))
        return
      }
      terminal.print("Restored vault \(report.vaultID) into \(report.home)")
      terminal.print(
        report.keyfile.map { "Keys: keyfile \($0) (mode 0600)" }
          ?? "Keys: Secret Service, default collection")
      terminal.print("Active key version: \(report.activeVersion)")
      for container in report.containers {
        terminal.print(
          "  \(container.from) -> \(container.path): \(counted(container.records, "record"))"
        )
      }
    }
  }

  /// `restore BUNDLE` into a home holding the bundle's vault: merges it in.
  private func merge(bundle: String, home: String, _ arguments: Arguments) throws {
    let vault = try Vault.open(home: home, resolver: keyStores)
    let passphrase = try readPassphrase(arguments, confirm: false)
    let progress = ProgressLine(terminal, json: arguments.flags.contains("--json"))
    defer { progress.finish() }
    let report = try Backup.merge(
      bundle: bundle, passphrase: passphrase, into: vault, progress: { progress.update("restore: \($0)", step: true) })
    progress.finish()
    if arguments.flags.contains("--json") {
      terminal.printBlock(try JSON.encode(report))
      return
    }
    terminal.print(
      "Merged bundle \(report.bundle) into vault \(report.vaultID) in \(report.home)"
    )
    for container in report.containers {
      terminal.print(
        "  \(container.from) -> \(container.path) (\(container.action)): \(container.restored) added, "
          + "\(container.updated) updated, \(container.unchanged) unchanged, \(container.goneHere) delivered or dropped "
          + "here since (not brought back), \(container.undetermined) in review as maybe delivered")
      for kept in container.keptForReview {
        terminal.print("    kept for review: \(kept.keptAs) (the \(kept.from)'s copy of \(kept.id))")
      }
    }
    let review = report.containers.reduce(0) { $0 + $1.undetermined + $1.keptForReview.count }
    if review > 0 {
      terminal.print(
        "\(review) in review: see `vault queue list --state review`, return with `vault queue resend ID...`")
    }
  }

  private func printVerification(_ report: VerificationReport, heading: String) {
    terminal.print(heading)
    terminal.print(
      "  vault:    \(report.vaultID)  (taken \(report.createdAt) by vault \(report.toolVersion))")
    let versions = report.versions.map { "\($0.version) \($0.state) suite \($0.suite)" }
    terminal.print("  keys:     " + versions.joined(separator: ", "))
    for (index, container) in report.containers.enumerated() {
      let byVersion = container.byVersion.sorted { $0.key < $1.key }.map { "v\($0.key): \($0.value)" }
      terminal.print(
        "  container \(index + 1): \(container.path)  \(counted(container.records, "record"))"
          + (byVersion.isEmpty ? "" : " (" + byVersion.joined(separator: ", ") + ")"))
    }
    terminal.print("  records:  \(report.records), every one opened with the bundle's keys")
  }

  /// Runs `body`; a `BackupError` is printed by its kind with its exit code (2 when the bundle or
  /// directory could not be read or written, 1 when a bundle failed a check).
  private func reportingBackupErrors(_ arguments: Arguments, _ body: () throws -> Void) throws -> Int32 {
    do {
      try body()
      return ExitCode.success.rawValue
    } catch let error as BackupError {
      terminal.error(error.description)
      if let note = homeNote(after: error.description, home: arguments.home) { terminal.note(note) }
      switch error {
      case .io, .notADirectory, .sharedDirectory, .containerMissing, .containerMergeUnfinished, .mergeRunning,
        .containerReplaced, .noSafePublish, .emptyPassphrase:
        return ExitCode.couldNotRun.rawValue
      default: return ExitCode.failure.rawValue
      }
    } catch let error as PassphraseInputError {
      terminal.error(error.description)
      return (error == .mismatch ? ExitCode.failure : ExitCode.couldNotRun).rawValue
    }
  }

  /// The largest passphrase file read (64 KiB).
  static let passphraseFileLimit = 64 * 1024

  /// The passphrase from `--passphrase-file` (one trailing newline dropped), else typed on the
  /// terminal without echo (twice for a new bundle); refused when there is no terminal.
  private func readPassphrase(_ arguments: Arguments, confirm: Bool) throws -> Passphrase {
    if let path = arguments.options["--passphrase-file"] {
      var info = stat()
      if stat(path, &info) == 0 {
        // A pipe (`<(cmd)`, /dev/stdin) cannot be read without waiting on it, and standard input
        // is not where a passphrase comes from here: say so in the passphrase's terms, before warning.
        guard info.st_mode & S_IFMT == S_IFREG else { throw PassphraseInputError.notAFile(path: path) }
        guard info.st_size <= Self.passphraseFileLimit else { throw PassphraseInputError.tooLong(path: path) }
        if info.st_mode & 0o077 != 0 {
          // Said, not refused: the bundles it opens may be elsewhere, but anyone who reads it can open them.
          terminal.note(
            "vault: warning: the passphrase file \(path) is open to group or others (mode "
              + String(info.st_mode & 0o777, radix: 8) + "); run: chmod 600 \(ShellWord.quoted(path))")
        }
      }
      var bytes = try FileIO.readRegularFile(path, limit: Self.passphraseFileLimit).0
      defer { bytes.withUnsafeMutableBytes { zeroBytes($0) } }
      if bytes.last == UInt8(ascii: "\n") { bytes.removeLast() }
      if bytes.last == UInt8(ascii: "\r") { bytes.removeLast() }
      return try bytes.withUnsafeBytes { try Passphrase(copying: $0) }
    }
    guard terminal.askLine != nil else { throw PassphraseInputError.noTerminal }
    var first = try Self.promptWithoutEcho("Backup passphrase: ")
    defer { first.withUnsafeMutableBytes { zeroBytes($0) } }
    if confirm {
      var second = try Self.promptWithoutEcho("Backup passphrase again: ")
      defer { second.withUnsafeMutableBytes { zeroBytes($0) } }
      guard first == second else { throw PassphraseInputError.mismatch }
    }
    return try first.withUnsafeBytes { try Passphrase(copying: $0) }
  }

  /// Reads one line from /dev/tty with echo off (termios), restoring the terminal's mode after,
  /// also when a signal ends the process at the prompt (SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGALRM,
  /// SIGUSR1, SIGUSR2, SIGPIPE) (Ctrl-C used to
  /// leave the terminal without echo under any shell that does not reset it); Ctrl-Z is ignored
  /// while echo is off.
  private static func promptWithoutEcho(_ prompt: String) throws -> [UInt8] {
    let tty = Glibc.open("/dev/tty", O_RDWR | O_CLOEXEC | O_NOCTTY)
    guard tty >= 0 else { throw PassphraseInputError.noTerminal }
    defer { close(tty) }
    var saved = termios()
    guard tcgetattr(tty, &saved) == 0 else { throw PassphraseInputError.noTerminal }
    var quiet = saved
    quiet.c_lflag &= ~tcflag_t(ECHO)
    quiet.c_lflag |= tcflag_t(ECHONL)
    _ = Array(prompt.utf8).withUnsafeBytes { Glibc.write(tty, $0.baseAddress!, $0.count) }
    // The guard first, so that no moment has echo off without it; ended after the mode is back.
    guard vault_tty_guard_begin(tty, &saved) == 0 else {
      vault_tty_guard_end()
      throw PassphraseInputError.noTerminal
    }
    defer { vault_tty_guard_end() }
    guard tcsetattr(tty, TCSAFLUSH, &quiet) == 0 else { throw PassphraseInputError.noTerminal }
    defer { _ = tcsetattr(tty, TCSAFLUSH, &saved) }
    var line: [UInt8] = []
    var byte: UInt8 = 0
    while line.count < 64 * 1024 {
      let got = Glibc.read(tty, &byte, 1)
      if got < 0, errno == EINTR { continue }
      guard got == 1, byte != UInt8(ascii: "\n") else { break }
      line.append(byte)
    }
    byte = 0
    if line.last == UInt8(ascii: "\r") { line.removeLast() }
    return line
  }
}

/// Why no passphrase could be read.
enum PassphraseInputError: Error, Equatable, CustomStringConvertible {
  case noTerminal
  case mismatch
  case notAFile(path: String)
  case tooLong(path: String)

  var description: String {
    switch self {
    case .noTerminal: "no terminal to ask for the passphrase on; give --passphrase-file FILE"
    case .mismatch: "the two passphrases differ; nothing was written"
    case .notAFile(let path):
      "the passphrase file \(path) is not a regular file (a pipe, a device or a directory); write the passphrase "
        + "into a file only you can read (chmod 600) and give that"
    case .tooLong(let path):
      "the passphrase file \(path) is larger than 64 KiB; it should hold the passphrase alone, on one line"
    }
  }
}

/// `vault backup`.
enum BackupCommand: Subcommand {
  static let declaration = CommandDeclaration(
    name: "backup", abstract: "Write a backup bundle of the vault, or verify one.",
    discussion: """
      One file, vault-<vault id>-<time>.vaultbackup, holds the vault's manifest (key versions, containers with \
      size and SHA-256), the keys of every version that is not retired wrapped under the passphrase (scrypt \
      N=2^17 r=8 p=1, then AES-256-GCM), and a consistent snapshot of every registered container taken while \
      writers go on. Records stay sealed. It is written under a temporary name, synced, verified completely, \
      then given its name; only then are this vault's bundles beyond the newest N in DIR removed. A registered \
      container that is missing, is not a container, or that a restore into this home did not finish merging \
      into is refused: nothing is written and no bundle removed.

      On a terminal, a backup or verification that runs longer than a second shows its steps on standard \
      error (never in a pipe or with --json).
      """,
    parameters: [
      .option(
        "--to", "DIR", .directory,
        help: "The directory that keeps the bundles (must exist; writable only by its owner, or sticky)."),
      .option(
        "--keep", "N", .wholeNumber(1...10_000, unit: nil),
        help: "Bundles of this vault to keep in DIR, 1 to 10000 (default 5)."),
      .option(
        "--verify", "BUNDLE", .file,
        help: """
          Check a bundle without restoring it: header, manifest hash, passphrase, every container's SHA-256, \
          and every record opens with the bundle's keys (counted per key version).
          """),
      .option(
        "--passphrase-file", "FILE", .file,
        help: """
          Read the passphrase from FILE (one trailing newline dropped); without it the passphrase is asked on \
          the terminal without echo, and refused when there is none.
          """),
      .flag(
        "--json",
        help: """
          Print JSON: bundle, size, removed, seconds, warnings, verification (bundle, format, tool_version, \
          vault_id, created_at, active_version, versions, containers with records and by_version, records, \
          by_version); with --verify, the verification alone.
          """),
    ],
    constraints: [.exactlyOne(["--to", "--verify"]), .requires("--keep", "--to")],
    exitCodes: """
      0 written and verified (or verified), 1 a check failed (the failing part is named: header, manifest, key \
      section, container N, records) or a wrong passphrase, 2 could not run (no vault, unreadable file, no \
      terminal for the passphrase), 64 usage error.
      """)

  static func run(_ cli: VaultCommandLine, _ arguments: Arguments) throws -> Int32 { try cli.backup(arguments) }
}

/// `vault restore`.
enum RestoreCommand: Subcommand {
  static let declaration = CommandDeclaration(
    name: "restore", abstract: "Restore a backup bundle into a new home, or merge it into the vault's home.",
    discussion: """
      Verifies the bundle completely before touching anything. Into a new home (missing or empty): creates it \
      with the same vault id and key versions, the keys in the chosen store, and the containers copied into the \
      home and registered there. A vault may move between key stores this way (a keyfile vault restored into \
      the Secret Service and back). Refuses a home that holds another vault or other files, a home whose \
      earlier vault's keys remain (as init does), and a store that already holds this vault's keys. A restore that stopped part-way (killed, a failed store) leaves the \
      home refused by every command until the same restore is run again, which finishes it.

      Into a home that holds the same vault: merges, keeping the home's key store. A record the home lacks is \
      added, unless the home delivered or dropped it since; one that may have been delivered goes to review \
      (merge-maybe-delivered). Of two copies of a record, the one changed later wins; a losing copy with \
      another payload is kept in review (merge-superseded) under a new id. Nothing is deleted; a missing \
      registered container is restored; merging the same bundle again changes nothing. A restore stopped \
      part way (a full disk, a kill) leaves the containers it was merging into marked: 'vault backup' refuses \
      them until it is run again (or 'vault container accept PATH' takes one as it is). Records in review \
      return with 'vault queue resend'.

      On a terminal, a restore that runs longer than a second shows its steps on standard error (never in a \
      pipe or with --json).
      """,
    parameters: [
      .argument("BUNDLE", .required, .file, help: "A bundle written by 'vault backup'."),
      .option("--passphrase-file", "FILE", .file, help: "Read the passphrase from FILE; else asked on the terminal."),
      .option(
        "--into", "HOME", .directory,
        help: "The new home, or the vault's home to merge into (default: --home, else the default home)."),
      .option(
        "--store", "auto|secret-service|keyfile", .choice(["auto", "secret-service", "keyfile"]),
        help: """
          Where the keys go: 'secret-service', 'keyfile', or 'auto' (the default): the Secret Service when it \
          is reachable and unlocked.
          """),
      .option(
        "--keyfile", "PATH", .file,
        help: "The keyfile to create (default: $XDG_CONFIG_HOME/vault-keys/<vault id>.keys)."),
      .flag(
        "--json",
        help: """
          Print JSON: home, vault_id, store, keyfile (null unless a keyfile), active_version, containers (from, \
          path, records), records. A merge prints home, vault_id, bundle, containers (from, path, action, \
          restored, updated, unchanged, gone_here, undetermined, kept_for_review: id, kept_as, from).
          """),
    ],
    usesHome: false)

  static func run(_ cli: VaultCommandLine, _ arguments: Arguments) throws -> Int32 { try cli.restore(arguments) }
}

// MARK: - Status

extension VaultCommandLine {
  /// `status --json` with `last_backup` added: the newest bundle found on disk now, or null.
  struct StatusWithBackup: Encodable {
    let status: VaultStatus
    let lastBackup: LastBackup?

    func encode(to encoder: any Encoder) throws {
      try status.encode(to: encoder)
      var container = encoder.container(keyedBy: Key.self)
      try container.encode(lastBackup, forKey: .lastBackup)
    }

    enum Key: String, CodingKey { case lastBackup = "last_backup" }
  }

  /// `status` with the home's newest bundle (`last`, from `Backup.lastBackup`, which tells this
  /// home's bundles by its identity, or by their recorded path when the key store cannot be read).
  func withLastBackup(_ status: VaultStatus, last: LastBackup?) -> StatusWithBackup {
    StatusWithBackup(status: status, lastBackup: last)
  }

  /// The `backup:` line of `status`, from the newest bundle on disk now (`Backup.lastBackup`).
  func printLastBackup(_ last: LastBackup?) {
    guard let last else {
      terminal.print("  backup:   none found (`vault backup --to DIR` makes one)")
      return
    }
    let state =
      last.intact
      ? "hashes match now; verified with the passphrase when written"
      : "DAMAGED: \(last.problem ?? "unreadable")"
    terminal.print("  backup:   \(last.bundle)")
    terminal.print("            taken \(last.createdAt) (\(Self.days(last.ageDays)) ago); \(state)")
  }
}

// MARK: - Doctor

extension VaultCommandLine {
  /// Doctor's `backup` check: a warning while a key version that may still open records lives only
  /// in the key store, with no intact bundle of this vault holding it.
  func examineBackup(_ manifest: Manifest, home: String, homeID: String?, into report: inout DoctorReport) {
    let live = manifest.versions.filter { $0.state.isLive }.map(\.version)
    let store = manifest.store.kind == .keyfile ? "keyfile" : "Secret Service"
    /// "key version 1 exists" or "key versions 1, 2 exist".
    func versions(_ list: [UInt32]) -> String {
      (list.count == 1 ? "key version " : "key versions ") + list.map(String.init).joined(separator: ", ")
        + (list.count == 1 ? " exists" : " exist")
    }
    guard let last = Backup.lastBackup(home: home, vaultID: manifest.vaultID, homeID: homeID) else {
      report.add(
        "backup", .warning,
        "warning: no backup bundle of this vault found; \(versions(live)) only in the \(store) "
          + "(`vault backup --to DIR`)")
      return
    }
    guard last.intact else {
      report.add("backup", .warning, "warning: the newest bundle is damaged: \(last.problem ?? "unreadable")")
      return
    }
    let missing = live.filter { !last.versions.contains($0) }
    guard missing.isEmpty else {
      report.add(
        "backup", .warning,
        "warning: \(versions(missing)) only in the \(store); the newest bundle (\(last.bundle)) does not hold "
          + (missing.count == 1 ? "it" : "them") + " (`vault backup --to DIR`)")
      return
    }
    report.add("backup", .ok, "ok (\(last.bundle), taken \(last.createdAt), holds every live key version)")
  }
}
