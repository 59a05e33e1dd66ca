import Foundation

/// The private Secret Service that `tools/with-secret-service.sh` starts for the test run.
public enum TestKeyring {
  /// True inside the harness; tests that need a real Secret Service skip (with a reason) otherwise.
  public static var isAvailable: Bool { ProcessInfo.processInfo.environment["VAULT_SECRET_SERVICE_READY"] == "1" }

  /// Locks the login collection, as a screen lock or `secret-tool lock` would.
  public static func lock() throws {
    let result = try Spawn.run(
      "/usr/bin/gdbus",
      [
        "call", "--session", "--dest", "org.freedesktop.secrets", "--object-path", "/org/freedesktop/secrets",
        "--method", "org.freedesktop.Secret.Service.Lock", "['/org/freedesktop/secrets/collection/login']",
      ])
    guard result.status == 0 else { throw TestKeyringError.command("gdbus Lock", result.error) }
  }

  /// Unlocks it again. There is no headless unlock prompt, so the daemon is replaced by one started
  /// with the same password, as logging in to the desktop would.
  public static func unlock() throws {
    let password = ProcessInfo.processInfo.environment["VAULT_TEST_KEYRING_PASSWORD"] ?? ""
    let result = try Spawn.run(
      "/usr/bin/gnome-keyring-daemon", ["--replace", "--daemonize", "--unlock", "--components=secrets"],
      input: Array(password.utf8))
    guard result.status == 0 else { throw TestKeyringError.command("gnome-keyring-daemon --replace", result.error) }
    try waitUntilUnlocked()
  }

  /// Waits (up to 10 s) until the daemon that owns the Secret Service's name has the login
  /// collection unlocked.
  ///
  /// The probe goes to the owner's unique name, never to `org.freedesktop.secrets`: a call to that
  /// name in the moment between the old daemon leaving and the new one taking it (`--replace`)
  /// makes D-Bus start a third daemon, locked, which every later test then finds (seen under
  /// load as "still locked" here, then "no default collection" in the tests after it).
  public static func waitUntilUnlocked() throws {
    for _ in 0..<100 {
      if let owner = try serviceOwner() {
        let probe = try Spawn.run(
          "/usr/bin/gdbus",
          [
            "introspect", "--session", "--dest", owner, "--object-path", "/org/freedesktop/secrets/collection/login",
            "--only-properties",
          ])
        if probe.outputText.contains("Locked = false") { return }
      }
      Thread.sleep(forTimeInterval: 0.1)
    }
    throw TestKeyringError.command("waiting for the keyring", "still locked after 10 s")
  }

  /// The unique bus name (":1.42") of the process that owns `org.freedesktop.secrets` now, or nil
  /// while nobody does. Asking the bus itself starts nothing.
  static func serviceOwner() throws -> String? {
    let result = try Spawn.run(
      "/usr/bin/gdbus",
      [
        "call", "--session", "--dest", "org.freedesktop.DBus", "--object-path", "/org/freedesktop/DBus",
        "--method", "org.freedesktop.DBus.GetNameOwner", "org.freedesktop.secrets",
      ])
    // Prints "(':1.42',)"; fails with NameHasNoOwner while the name is free.
    guard result.status == 0, let start = result.outputText.firstIndex(of: "'") else { return nil }
    let rest = result.outputText[result.outputText.index(after: start)...]
    guard let end = rest.firstIndex(of: "'") else { return nil }
    let name = String(rest[..<end])
    return name.hasPrefix(":") ? name : nil
  }

  /// The object path of gnome-keyring's login collection (kept on disk).
  public static let loginCollection = "/org/freedesktop/secrets/collection/login"
  /// The object path of gnome-keyring's session collection (kept in memory only, emptied when the
  /// session ends).
  public static let sessionCollection = "/org/freedesktop/secrets/collection/session"

  /// Points the `default` alias at `collection`, as a keyring manager's "set as default" does.
  public static func setDefaultAlias(_ collection: String) throws {
    let result = try Spawn.run(
      "/usr/bin/gdbus",
      [
        "call", "--session", "--dest", "org.freedesktop.secrets", "--object-path", "/org/freedesktop/secrets",
        "--method", "org.freedesktop.Secret.Service.SetAlias", "default", collection,
      ])
    guard result.status == 0 else { throw TestKeyringError.command("gdbus SetAlias", result.error) }
  }

  /// Whether the collection at `collection` holds no item (locked ones included).
  public static func isEmpty(_ collection: String) throws -> Bool {
    let result = try Spawn.run(
      "/usr/bin/gdbus",
      [
        "introspect", "--session", "--dest", "org.freedesktop.secrets", "--object-path", collection,
        "--only-properties",
      ])
    guard result.status == 0 else { throw TestKeyringError.command("gdbus introspect", result.error) }
    return result.outputText.contains("Items = [];")
  }

  /// Stops or resumes the keyring daemon (SIGSTOP makes a provider that never answers).
  /// Only this run's daemon is signalled (its XDG_RUNTIME_DIR is ours), never another run's.
  public static func signalDaemon(_ signal: String) throws {
    let runtime = ProcessInfo.processInfo.environment["XDG_RUNTIME_DIR"] ?? ""
    let found = try Spawn.run("/usr/bin/pgrep", ["-u", String(geteuid()), "-f", "gnome-keyring-daemon"])
    for pid in found.outputText.split(separator: "\n") {
      let environ = (try? Data(contentsOf: URL(fileURLWithPath: "/proc/\(pid)/environ"))) ?? Data()
      let variables = environ.split(separator: 0).map { String(decoding: $0, as: UTF8.self) }
      guard variables.contains("XDG_RUNTIME_DIR=" + runtime) else { continue }
      try Spawn.run("/bin/kill", ["-\(signal)", String(pid)])
    }
  }
}

public enum TestKeyringError: Error, CustomStringConvertible {
  case command(String, String)
  public var description: String {
    switch self {
    case .command(let what, let detail): "\(what) failed: \(detail)"
    }
  }
}
