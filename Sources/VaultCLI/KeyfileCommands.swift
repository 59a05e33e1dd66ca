import Vault

extension VaultCommandLine {
  /// `vault keyfile move PATH`.
  func keyfile(_ arguments: Arguments) throws {
    let target = arguments.positionals[0]
    let old = try Vault.moveKeyfile(home: homePath(arguments), to: target)
    if old == absolutePath(target) {
      terminal.print("The keyfile is already at \(old); nothing was changed")
    } else {
      terminal.print(
        "Moved the keyfile from \(old) to \(absolutePath(target)); the old file was removed"
      )
    }
    if let warning = KeyfileStore.volatileWarning(for: absolutePath(target)) {
      terminal.note("vault: warning: " + warning)
    }
  }
}

/// `vault keyfile move PATH`.
enum KeyfileCommand: Subcommand {
  static let declaration = CommandDeclaration(
    name: "keyfile", abstract: "Move a vault's keyfile out of the data it protects.",
    discussion: """
      A keyfile inside the vault home or beside a registered container travels with every copy of the data, so \
      vault refuses to use it there.
      """,
    actions: [
      CommandDeclaration(
        name: "move", abstract: "Move the keyfile to PATH.",
        discussion: """
          Copies it to PATH (0600, in a private directory created 0700 when missing), checks the copy, records \
          PATH in the manifest and then removes the old file. Run it again after an interruption.
          """,
        parameters: [.argument("PATH", .required, .file, help: "Where the keyfile goes (outside the home).")])
    ])

  static func run(_ cli: VaultCommandLine, _ arguments: Arguments) throws -> Int32 {
    try cli.keyfile(arguments)
    return ExitCode.success.rawValue
  }
}
