import Vault
import VaultKeys
import VaultQueue

/// `vault recover`: writes a lost or damaged manifest back from the key store's copy.
enum RecoverCommand: Subcommand {
  static let declaration = CommandDeclaration(
    name: "recover", abstract: "Write a lost or damaged manifest back from the copy its key store keeps.",
    discussion: """
      Every manifest change is written to the key store before the home, so the store's copy is never older. \
      A copy is taken only when it verifies under the integrity key stored beside it and names that store and \
      this home. Looks in the Secret Service's items for the home and in every <vault id>.keys in \
      $XDG_CONFIG_HOME/vault-keys (else ~/.config/vault-keys); --keyfile names a keyfile kept elsewhere. A \
      damaged manifest (corrupt, or failing its integrity check) is kept beside the new one as \
      manifest.json.damaged-<UTC time>. A manifest that verifies is never replaced, nor one refused for its \
      owner, mode or a link: that error says what to do. The vault id a container records is not \
      authenticated, so containers never choose: a lone copy is taken unasked only when a container in the home \
      records its vault and every store could be searched; when copies of two vaults name the home, when a \
      container records another vault than the copy, or when the copy names a home this one was moved from, \
      nothing is changed until --vault-id (or --keyfile) names the vault. A keyfile inside the home is read \
      only when --keyfile names it. No key is ever made: when no store holds a usable copy, nothing is changed.
      """,
    parameters: [
      .option("--keyfile", "PATH", .file, help: "Read only this keyfile."),
      .option(
        "--store", "secret-service|keyfile", .choice(["secret-service", "keyfile"]),
        help: "Look only in this kind of store."),
      .option(
        "--vault-id", "ID", .name, help: "Take this vault's copy where recover will not choose on its own."),
      .flag(
        "--json",
        help: """
          Print JSON: outcome (recovered or intact), home, vault_id, store, keyfile (null unless a keyfile), \
          active_version, containers, kept_damaged (null when there was none).
          """),
    ],
    constraints: [.excludes("--keyfile", "--store", because: "a keyfile names its store")])

  static func run(_ cli: VaultCommandLine, _ arguments: Arguments) throws -> Int32 {
    try cli.recover(arguments)
    return ExitCode.success.rawValue
  }
}

extension VaultCommandLine {
  func recover(_ arguments: Arguments) throws {
    if let id = arguments.options["--vault-id"], KeyringID(hex: id.lowercased()) == nil {
      throw UsageError(
        message: "--vault-id takes a vault id: 16 hex digits", command: "recover")
    }
    let search = ManifestSearch(
      keyfile: arguments.options["--keyfile"], store: arguments.options["--store"].flatMap(KeyStoreKind.init),
      vaultID: arguments.options["--vault-id"])
    let home = absolutePath(homePath(arguments))
    let result = try Vault.recoverManifest(home: home, search: search, resolver: keyStores)
    if arguments.flags.contains("--json") {
      terminal.printBlock(try JSON.encode(RecoverResult(result, home: home)))
      return
    }
    let store = result.store.place
    switch result.outcome {
    case .intact:
      terminal.print("The manifest of vault \(result.vaultID) in \(home) verifies; nothing was changed")
    case .recovered:
      terminal.print("Recovered the manifest of vault \(result.vaultID) in \(home) from its copy in \(store)")
      if let kept = result.keptDamaged { terminal.print("The damaged manifest was kept as \(kept)") }
    }
    terminal.print("Active key version: \(result.activeVersion)")
    terminal.print(
      "Registered containers: \(result.containers.count)"
        + (result.containers.isEmpty ? "" : " (`vault container list` checks each)"))
  }
}

/// `vault recover --json`.
struct RecoverResult: Encodable {
  var outcome: String
  var home: String
  var vaultID: String
  var store: String
  var keyfile: String?
  var activeVersion: UInt32
  var containers: [String]
  var keptDamaged: String?

  init(_ result: ManifestRecovery, home: String) {
    outcome = result.outcome.rawValue
    self.home = home
    vaultID = result.vaultID
    store = result.store.kind.rawValue
    keyfile = result.store.kind == .keyfile ? result.store.keyfile : nil
    activeVersion = result.activeVersion
    containers = result.containers
    keptDamaged = result.keptDamaged
  }

  enum CodingKeys: String, CodingKey {
    case outcome, home, store, keyfile, containers
    case vaultID = "vault_id"
    case activeVersion = "active_version"
    case keptDamaged = "kept_damaged"
  }

  func encode(to encoder: any Encoder) throws {
    var container = encoder.container(keyedBy: CodingKeys.self)
    try container.encode(outcome, forKey: .outcome)
    try container.encode(home, forKey: .home)
    try container.encode(vaultID, forKey: .vaultID)
    try container.encode(store, forKey: .store)
    try container.encode(keyfile, forKey: .keyfile)
    try container.encode(activeVersion, forKey: .activeVersion)
    try container.encode(containers, forKey: .containers)
    try container.encode(keptDamaged, forKey: .keptDamaged)
  }
}
