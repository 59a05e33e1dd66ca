import Foundation
import Outbox
import Vault
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
    case ManifestFile.Failure.missing: return "; `vault init` creates one"
    case KeyStoreError.noSessionBus, KeyStoreError.noProvider, KeyStoreError.libraryMissing:
      return " (`vault init --store keyfile`)"
    case KeyStoreError.wrongOwner(_, let owner, let expected) where expected == 0,
      KeyStoreError.unsafeKeyfileDirectory(_, _, let owner, let expected) where expected == 0 && owner != 0:
      return " (e.g. sudo -u '#\(owner)' vault …, or `vault init --keyfile PATH`)"
    case KeyStoreError.keyfileInsideData:
      return
        ": for an existing vault run `vault keyfile move ~/.config/vault-keys/NAME.keys`, for a new one "
        + "`init --keyfile` there"
    case KeyStoreError.keyfileTooLarge: return " (`vault rotate`)"
    case RotationError.compromiseIncomplete, RotationError.compromiseUnfinished:
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
    }
  }
}
