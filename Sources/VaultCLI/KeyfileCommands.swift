import Vault

extension VaultCommandLine {
  /// `vault keyfile move PATH`.
  func keyfile(_ arguments: Arguments) throws {
    guard let action = arguments.positionals.first else {
      throw UsageError(message: "missing keyfile action (move)", command: "keyfile")
    }
    guard action == "move" else {
      throw UsageError(message: "unknown keyfile action '\(action)' (the action is move)", command: "keyfile")
    }
    let rest = arguments.positionals.dropFirst()
    guard let target = rest.first else { throw UsageError(message: "missing the new keyfile PATH", command: "keyfile") }
    guard rest.count == 1 else {
      throw UsageError(message: "unexpected argument '\(rest.dropFirst().first!)'", command: "keyfile")
    }
    let old = try Vault.moveKeyfile(home: homePath(arguments), to: target)
    terminal.print("Moved the keyfile from \(old) to \(absolutePath(target)); the old file was removed")
  }
}
