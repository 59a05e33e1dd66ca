import Foundation

extension Vault {
  /// The home `vault` uses when no `--home` is given, so an app can find the same vault without
  /// repeating the rule.
  ///
  /// In order: `$VAULT_HOME`; else `$XDG_DATA_HOME/vault`; else `$HOME/.local/share/vault`, with
  /// the user's home directory from the password database when HOME is unset. A variable that is
  /// set but empty counts as unset: an empty HOME would otherwise make the home
  /// `/.local/share/vault`. Nothing is read from disk or created; the directory may not exist (that
  /// is `vault init`'s job, or `Vault.create(home:store:resolver:clock:)`'s).
  ///
  /// - Parameter environment: the variables to read; the process environment by default. Tests pass
  ///   their own.
  /// - Returns: the path of the default vault home, absolute when the variables it came from are.
  public static func defaultHome(environment: [String: String] = ProcessInfo.processInfo.environment) -> String {
    if let home = environment["VAULT_HOME"], !home.isEmpty { return home }
    if let data = environment["XDG_DATA_HOME"], !data.isEmpty { return data + "/vault" }
    let user = environment["HOME"].flatMap { $0.isEmpty ? nil : $0 } ?? NSHomeDirectory()
    return user + "/.local/share/vault"
  }
}
