import Foundation
import Vault
import VaultKeys

extension VaultCommandLine {
  /// Checks each part a vault depends on and says, for each, whether it works and why not.
  func doctor(_ arguments: Arguments) -> Int32 {
    let home = homePath(arguments)
    var healthy = true
    terminal.print("vault doctor")

    let probed = SecretServiceStore(timeout: secretServiceTimeout)
    let secretService = probed.probe()
    switch secretService {
    case .available:
      terminal.print("  session bus:     ok")
      terminal.print("  secret service:  ok (provider answering, default collection unlocked)")
      if let warning = probed.transfer?.warning { terminal.print("  transfer:        warning: \(warning)") }
    case .unavailable(let reason):
      if case .noSessionBus = reason {
        terminal.print("  session bus:     not available: \(reason)")
        terminal.print("  secret service:  not checked (no session bus)")
      } else {
        terminal.print("  session bus:     ok")
        terminal.print("  secret service:  not usable: \(reason)")
      }
    }

    terminal.print("  keyfile store:   \(keyfileDirectoryReport())")

    let manifest: Manifest
    do {
      let integrity: String
      (manifest, integrity) = try Vault.inspect(home: home, resolver: keyStores)
      terminal.print(
        "  manifest:        ok (\(ManifestFile.path(home: home)), vault \(manifest.vaultID), \(integrity))")
      let warnings = Vault.warnings(manifest)
      if warnings.isEmpty {
        terminal.print("  envelopes:       format 2 (key version \(manifest.activeVersion), suite 2)")
      }
      for warning in warnings { terminal.print("  envelopes:       warning: \(warning) (`vault rotate`)") }
    } catch {
      let (message, _) = Self.describe(error)
      terminal.print("  manifest:        \(message)")
      if case ManifestFile.Failure.missing = error {
        terminal.print(
          "Result: no vault here yet; `vault init` would use "
            + (secretService == .available ? "the Secret Service." : "a keyfile."))
        return ExitCode.success.rawValue
      }
      terminal.print("Result: the manifest cannot be read; see above.")
      return ExitCode.failure.rawValue
    }

    switch manifest.store.kind {
    case .keyfile:
      let path = manifest.store.keyfile ?? ""
      let store = KeyfileStore(path: path)
      do {
        let versions = try store.storedVersions(keyring: manifest.keyringID!)
        let mode = store.mode.map { "0" + String($0, radix: 8) } ?? "missing"
        terminal.print(
          "  keyfile:         ok (\(path), mode \(mode), versions \(versions.map(String.init).joined(separator: ",")))")
      } catch {
        healthy = false
        terminal.print("  keyfile:         \(Self.describe(error).0)")
      }
      terminal.print("  vault store:     keyfile")
    case .secretService:
      terminal.print("  vault store:     secret-service")
      if case .unavailable = secretService { healthy = false }
    case .memory:
      terminal.print("  vault store:     memory")
    }

    if healthy {
      do {
        let vault = try Vault.open(home: home, resolver: keyStores)
        terminal.print("  active key:      readable (version \(vault.manifest.activeVersion))")
      } catch {
        healthy = false
        terminal.print("  active key:      \(Self.describe(error).0)")
      }
    } else {
      terminal.print("  active key:      not readable while its store is unusable")
    }
    terminal.print(
      healthy ? "Result: the vault's key store works." : "Result: the vault's keys cannot be read; fix the item above.")
    return (healthy ? ExitCode.success : ExitCode.failure).rawValue
  }
}

extension VaultCommandLine {
  /// Whether a new keyfile could be kept in the default keyfile directory.
  func keyfileDirectoryReport() -> String {
    let config =
      terminal.environment["XDG_CONFIG_HOME"].flatMap { $0.isEmpty ? nil : $0 }
      ?? ((terminal.environment["HOME"] ?? NSHomeDirectory()) + "/.config")
    let directory = config + "/vault-keys"
    var info = stat()
    guard stat(directory, &info) == 0 else { return "usable (\(directory) would be created 0700)" }
    do {
      try SecureFile.checkPrivate(directory, info: info, isDirectory: true)
      return "usable (\(directory) is private to you)"
    } catch {
      return "not usable: \(Self.describe(error).0)"
    }
  }
}
