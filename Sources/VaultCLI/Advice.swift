import Foundation
import Outbox
import Vault
import VaultBackup
import VaultKeys
import VaultQueue

/// What the command line adds to a library error: the `vault` command or option that does what the
/// error asks for. The library's own texts name no command (an app has none of them); the CLI
/// prints the library's text followed by this.
enum Advice {
  /// The command-line advice for `error`, starting with its separator, or "" when there is none.
  static func suffix(for error: any Error) -> String {
    switch error {
    case VaultError.alreadyExists: return " (use `vault status` to inspect it)"
    case ManifestFile.Failure.missing(let home) where !FileManager.default.fileExists(atPath: home):
      // No directory at all: nothing to write a manifest back into (recover says vault.home-missing).
      return " (the directory does not exist: for a vault that was moved, give its new place with --home; "
        + "`vault init` creates a vault)"
    case ManifestFile.Failure.missing: return " (`vault recover` writes it back; `vault init` creates a vault)"
    case ManifestFile.Failure.corrupt, ManifestFile.Failure.tooLarge, ManifestFile.Failure.unauthenticated:
      return " (`vault recover` writes back that copy, and keeps this file beside it)"
    case ManifestFile.Failure.notAFile:
      return " (once it is moved aside, `vault recover` writes the manifest back from its key store's copy)"
    case VaultError.homeNotEmpty, VaultError.orphanedKeys, VaultError.orphanedKeyfile:
      return " (`vault recover` writes the manifest back from the copy its key store keeps)"
    case VaultError.noManifestCopy(let home, _, let unsearched, let unused, let elsewhere)
    where unsearched.isEmpty && unused.isEmpty:
      return " (" + (elsewhere.isEmpty ? "" : "a vault listed above: `vault recover --vault-id ID`; ")
        + "a keyfile kept elsewhere: `vault recover --keyfile PATH`; a backup bundle: move the home aside, "
        + "then `vault restore BUNDLE --into \(ShellWord.quoted(home))`)"
    case VaultError.noManifestCopy:
      return
        " (to name a vault: `vault recover --vault-id ID`; a keyfile kept elsewhere: `vault recover --keyfile PATH`)"
    case VaultError.manifestCopiesDiffer:
      return " (`vault recover --vault-id ID`; add --keyfile PATH or --store when one vault's copies are in two stores)"
    case VaultError.unconfirmedManifestCopy(_, let id, _, _, _): return " (`vault recover --vault-id \(id)` takes it)"
    case VaultError.manifestContradicted, VaultError.intactManifestDiffers: return ""
    case VaultError.keyfileMissing, KeyStoreError.keyfileMissing:
      return " (`vault recover --keyfile PATH`, given where the keyfile is now, names the move back)"
    case VaultError.homeMissing:
      return " (`vault --home NEW recover` for a moved home; `vault restore BUNDLE --into HOME` from a backup)"
    case KeyStoreError.noSessionBus, KeyStoreError.noProvider, KeyStoreError.libraryMissing:
      return " (`vault init --store keyfile`)"
    case KeyStoreError.wrongOwner(let path, _, let expected) where SecureFile.isInDirectoryOf(expected, path),
      ManifestFile.Failure.wrongOwner(let path, _, let expected) where SecureFile.isInDirectoryOf(expected, path):
      return ""
    case KeyStoreError.wrongOwner(_, let owner, let expected) where expected == 0,
      KeyStoreError.unsafeKeyfileDirectory(_, _, let owner, let expected) where expected == 0 && owner != 0:
      return " (e.g. sudo -u '#\(owner)' vault …, or `vault init --keyfile PATH`)"
    case ManifestFile.Failure.wrongOwner(_, let owner, let expected) where expected == 0,
      ManifestFile.Failure.unsafeHome(_, _, let owner, let expected) where expected == 0 && owner != 0:
      return " (e.g. sudo -u '#\(owner)' vault …)"
    case KeyStoreError.keyfileInsideData:
      // Without the command and home at hand (`keyfileInsideDataAdvice` has them): the way out only.
      return " (an existing vault: `vault keyfile move PATH`; a new one: another --keyfile, or none for the default)"
    case KeyStoreError.keyfileTooLarge: return " (`vault rotate`)"
    case RotationError.compromiseIncomplete, RotationError.compromiseUnfinished, VaultError.compromisedVersionActive:
      return " (`vault rotate --compromised`)"
    case RotationError.aborted: return " (`vault rotate --compromised`; --yes purges without asking)"
    case RotationError.containerMissing(let path):
      return " (if it is gone for good, `vault container forget \(ShellWord.quoted(path))`)"
    case EndpointError.insecureHTTP: return " (--allow-insecure-http)"
    case VaultError.sealPinOnActiveVersion(let version):
      return "; next: `vault rotate`, `vault reseal` the envelopes, then `vault unpin \(version)`"
    case VaultError.versionNotPinned: return "; `vault status` lists the pins (external_seal_versions)"
    case VaultError.restoreUnfinished(let home, _): return " (`vault restore BUNDLE --into \(ShellWord.quoted(home))`)"
    case VaultError.restoreStoreDiffers(_, let store, let keyfile):
      return " (--store \(store.rawValue)" + (keyfile.map { " --keyfile \(ShellWord.quoted($0))" } ?? "") + ")"
    case VaultError.restoreKeysPresent(let store, _, let home):
      return " (`vault restore BUNDLE --into \(home.map(ShellWord.quoted) ?? "THAT_HOME")`"
        + (store == .keyfile ? ")" : ", or --store keyfile)")
    case QueueError.unsafeDirectory(let path, _, let mode, let owner)
    where !QueueError.chmodFixes(mode: mode, owner: owner):
      // No command moves a registered container: the steps that do, none of which loses a record.
      return "; to move a registered container: mv it, with any -wal beside it, into such a directory, run "
        + "`vault container forget \(ShellWord.quoted(path))`, then open it at its new path for writing "
        + "(`vault queue put --container NEW`, or the app), which registers it again"
    case QueueError.olderSchema:
      return " (`vault rotate` or `vault backup` opens every registered container for writing)"
    case QueueError.busy(let path):
      // Retrying does not help while the holder is stopped (a rotation left at Ctrl-Z): name it.
      guard let holder = LockWait.writer(ofFiles: [path, path + "-wal", path + "-shm"]),
        let name = VaultCommandLine.holderName(holder)
      else { return "" }
      return " (\(name) holds it" + VaultCommandLine.stoppedAdvice(holder) + ")"
    default: return ""
    }
  }

  /// The command that acts on a status warning.
  static func suffix(for warning: StatusWarning) -> String {
    switch warning {
    case .unfinishedCompromise: " (`vault rotate --compromised`)"
    case .sealsFormatOne, .unfinishedRotation: " (`vault rotate`)"
    case .unfinishedKeyfileMove(_, let to?, _): " (`vault keyfile move \(ShellWord.quoted(to))`)"
    case .unfinishedKeyfileMove: ""
    }
  }
}

extension KeyStoreError {
  /// Whether this is `keyfileInsideData`, whose advice depends on the command and the home.
  var isKeyfileInsideData: Bool {
    if case .keyfileInsideData = self { return true }
    return false
  }
}

extension VaultCommandLine {
  /// `error`'s sentence with its advice, as `describe` gives it, but for a keyfile inside the
  /// home, whose advice needs the command and the home (`init`, `restore` or an existing vault:
  /// `keyfileInsideDataAdvice`). `vault` and `doctor` show errors through it.
  ///
  /// - Parameters:
  ///   - error: what went wrong.
  ///   - arguments: the command line, for its command and home.
  /// - Returns: the sentence, never contents.
  func sentence(for error: any Error, _ arguments: Arguments) -> String {
    if let unreachable = unreachableSecretServiceSentence(for: error, arguments) { return unreachable }
    if let recover = recoverSentence(for: error, arguments) { return recover }
    guard case KeyStoreError.keyfileInsideData(let path, let directory) = error else { return Self.describe(error).0 }
    return KeyStoreError.keyfileInsideData(path: path, dataDirectory: directory).description
      + keyfileInsideDataAdvice(arguments)
  }

  /// For `recover` over a manifest that verifies but is not the one wanted: the `mv` that sets it
  /// aside (to a name no earlier one holds) and the same `recover` again, with the options given,
  /// so that following the advice asks for the same vault. Nil for any other error.
  func recoverSentence(for error: any Error, _ arguments: Arguments) -> String? {
    let home: String
    switch error {
    case VaultError.intactManifestDiffers(let path, _, _), VaultError.manifestContradicted(let path, _, _, _):
      home = path
    default: return nil
    }
    let manifest = ManifestFile.path(home: home)
    let aside = manifest + ".wrong-" + Vault.compactTimestamp(Date())
    var rerun = ["vault", "--home", ShellWord.quoted(home), "recover"]
    for option in ["--keyfile", "--store", "--vault-id"] {
      if let value = arguments.options[option] {
        rerun += [option, ShellWord.quoted(option == "--keyfile" ? absolutePath(value) : value)]
      }
    }
    return Self.describe(error).0 + " (mv \(ShellWord.quoted(manifest)) \(ShellWord.quoted(aside)), then "
      + "`\(rerun.joined(separator: " "))`)"
  }

  /// For an existing vault whose keys are in the Secret Service, a Secret Service that cannot be
  /// reached (no session bus, no provider, no libsecret) is not fixed with a keyfile store: that
  /// advice (`vault init --store keyfile`) is for a new vault, and a new vault would not open these
  /// records. Nil for any other error, for `init` and `restore`, and for a keyfile vault.
  func unreachableSecretServiceSentence(for error: any Error, _ arguments: Arguments) -> String? {
    switch error {
    case KeyStoreError.noSessionBus, KeyStoreError.noProvider, KeyStoreError.libraryMissing: break
    default: return nil
    }
    guard arguments.command != "init", arguments.command != "restore",
      let manifest = try? ManifestFile.read(home: absolutePath(homePath(arguments))).manifest,
      manifest.store.kind == .secretService
    else { return nil }
    return "\(error); this vault's keys are in the Secret Service, not in a keyfile: run the command where "
      + "its keyring is reachable (the desktop session that holds it)"
  }

  /// The advice for `KeyStoreError.keyfileInsideData`, which depends on where it was met: an
  /// existing vault (its home holds a manifest) moves its keyfile out with `keyfile move`; a new
  /// one (`init`, `restore`) is made again with another --keyfile, or none for the default. The
  /// default named is the one vault would use (`KeyfileStore.defaultPath`), and is not offered when
  /// it lies inside the home too.
  func keyfileInsideDataAdvice(_ arguments: Arguments) -> String {
    let restoring = arguments.command == "restore"
    let home = absolutePath((restoring ? arguments.options["--into"] : nil) ?? homePath(arguments))
    func isInsideHome(_ path: String) -> Bool { Vault.isInside(path, home) }
    func defaultPath(_ keyring: KeyringID?) -> String {
      keyring.map { KeyfileStore.defaultPath(keyring: $0, environment: terminal.environment) }
        ?? KeyfileStore.defaultDirectory(environment: terminal.environment) + "/<vault id>.keys"
    }
    if let manifest = try? ManifestFile.read(home: home).manifest {
      let target = defaultPath(manifest.keyringID)
      let move = "`vault --home \(ShellWord.quoted(home)) keyfile move "
      return isInsideHome(target)
        ? "; move it out with \(move)PATH` (PATH outside the home: the default, \(target), lies inside it too)"
        : "; move it out with \(move)\(ShellWord.quoted(target))` (the default place)"
    }
    guard restoring else {
      let target = defaultPath(nil)
      return isInsideHome(target)
        ? "; give --keyfile PATH outside the home (the default, \(target), lies inside it too)"
        : "; leave --keyfile out for the default, \(target), or give a PATH outside the home"
    }
    let bundle = absolutePath(arguments.positionals[0])
    let target = defaultPath(
      (try? Backup.inspect(bundle: bundle, hashingSnapshots: false)).flatMap {
        KeyringID(hex: $0.keyringID)
      })
    var command = "vault restore \(ShellWord.quoted(bundle)) --into \(ShellWord.quoted(home))"
    if let store = arguments.options["--store"] { command += " --store \(store)" }
    if let file = arguments.options["--passphrase-file"] { command += " --passphrase-file \(ShellWord.quoted(file))" }
    return isInsideHome(target)
      ? "; run `\(command) --keyfile PATH` with PATH outside the home (the default, \(target), lies inside it too)"
      : "; run `\(command)` without --keyfile: the keyfile then goes to \(target), its default place"
  }
}
