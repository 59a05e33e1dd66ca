import Foundation
import VaultTestSupport
import XCTest

/// The systemd user units that run `vault telemetry flush` for applications that are not running.
final class SystemdUnitTests: XCTestCase {
  func testUnitsVerify() throws {
    try XCTSkipUnless(
      FileManager.default.fileExists(atPath: "/usr/bin/systemd-analyze"), "systemd-analyze is not installed here")
    let result = try Spawn.run("/bin/bash", [packageRoot() + "/tools/systemd/verify.sh"])
    XCTAssertEqual(result.status, 0, result.error)
    XCTAssertTrue(result.outputText.contains("units verified"), result.outputText + result.error)
  }

  func testTheServiceRunsTheFlushCommand() throws {
    let service = try String(
      contentsOfFile: packageRoot() + "/tools/systemd/vault-telemetry-flush.service", encoding: .utf8)
    XCTAssertTrue(service.contains("vault telemetry flush --endpoint ${VAULT_TELEMETRY_ENDPOINT}"))
    XCTAssertTrue(service.contains("Type=oneshot"))
  }
}

/// Issue 13, item 12: the units are correct for a user manager, and `tools/install.sh` puts the
/// binaries, the documentation and the units in place, pointed at each other.
final class InstallTests: XCTestCase {
  let units = [
    "vault-rotate.service", "vault-rotate.timer", "vault-telemetry-flush.service", "vault-telemetry-flush.timer",
    "vault-backup.service", "vault-backup.timer",
  ]

  private func text(_ unit: String) throws -> String {
    try String(contentsOfFile: packageRoot() + "/tools/systemd/" + unit, encoding: .utf8)
  }

  func testTheUnitsAvoidWhatAUserManagerIgnores() throws {
    for unit in units {
      let lines = try text(unit).split(separator: "\n").filter { !$0.hasPrefix("#") }
      XCTAssertFalse(
        lines.contains { $0.contains("network-online.target") }, "\(unit): means nothing to a user manager")
      if lines.contains(where: { $0.hasPrefix("Persistent=") }) {
        XCTAssertTrue(lines.contains { $0.hasPrefix("OnCalendar=") }, "\(unit): Persistent= needs OnCalendar=")
      }
    }
    // Inside an environment file systemd expands nothing: the example must not suggest %h there.
    for unit in ["vault-telemetry-flush.service", "vault-backup.service"] {
      for line in try text(unit).split(separator: "\n") where line.contains("_FILE=") || line.contains("_DIR=") {
        XCTAssertFalse(line.contains("%h") || line.contains("~"), String(line))
      }
    }
  }

  func testInstallPutsEverythingInPlaceAndTheInstalledUnitsVerify() throws {
    let temporary = TemporaryDirectory()
    let prefix = temporary.sub("prefix")
    let unitsDirectory = temporary.sub("units")
    let run = try Spawn.run(
      "/bin/bash",
      [
        packageRoot() + "/tools/install.sh", "--prefix", prefix, "--binaries",
        (vaultBinary() as NSString).deletingLastPathComponent,
        "--units-dir", unitsDirectory,
      ])
    XCTAssertEqual(run.status, 0, run.error)
    for path in ["bin/vault", "bin/memo"] {
      XCTAssertTrue(FileManager.default.isExecutableFile(atPath: prefix + "/" + path), path)
    }
    for document in ["README.md", "SECURITY.md", "INTEGRATING.md"] {
      XCTAssertTrue(FileManager.default.fileExists(atPath: prefix + "/share/doc/vault/" + document), document)
    }
    let version = try Spawn.run(prefix + "/bin/vault", ["--version"])
    XCTAssertEqual(version.status, 0, version.error)
    // The manual page and the completions are the installed binary's own, byte for byte.
    for (path, arguments) in [
      ("share/man/man1/vault.1", ["help", "--man"]),
      ("share/bash-completion/completions/vault", ["completion", "bash"]),
      ("share/zsh/site-functions/_vault", ["completion", "zsh"]),
      ("share/fish/vendor_completions.d/vault.fish", ["completion", "fish"]),
    ] {
      let installed = try String(contentsOfFile: prefix + "/" + path, encoding: .utf8)
      XCTAssertEqual(installed, try Spawn.run(prefix + "/bin/vault", arguments).outputText, path)
    }
    if FileManager.default.isExecutableFile(atPath: "/usr/bin/man") {
      let manual = try Spawn.run(
        "/usr/bin/man", ["-l", prefix + "/share/man/man1/vault.1"],
        environment: ["MANPAGER": "cat", "PATH": "/usr/bin:/bin"])
      XCTAssertEqual(manual.status, 0, manual.error)
      XCTAssertTrue(manual.outputText.contains("vault completion SHELL"), manual.outputText)
    }
    for unit in units {
      let installed = try String(contentsOfFile: unitsDirectory + "/" + unit, encoding: .utf8)
      XCTAssertFalse(installed.contains("/usr/local/bin/vault"), unit)
      if unit.hasSuffix(".service") {
        XCTAssertTrue(installed.contains("ExecStart=\(prefix)/bin/vault "), unit)
        XCTAssertTrue(installed.contains("Documentation=file://\(prefix)/share/doc/vault/README.md"), unit)
      }
    }
    guard FileManager.default.fileExists(atPath: "/usr/bin/systemd-analyze") else { return }
    let home = temporary.sub("home")
    try FileManager.default.createDirectory(atPath: home + "/.config/vault", withIntermediateDirectories: true)
    try "VAULT_TELEMETRY_ENDPOINT=http://127.0.0.1:9/x\nVAULT_TELEMETRY_TOKEN_FILE=/dev/null\n"
      .write(toFile: home + "/.config/vault/telemetry.env", atomically: true, encoding: .utf8)
    try "VAULT_BACKUP_DIR=/tmp\nVAULT_BACKUP_PASSPHRASE_FILE=/dev/null\n"
      .write(toFile: home + "/.config/vault/backup.env", atomically: true, encoding: .utf8)
    let runtime = temporary.sub("runtime")
    try FileManager.default.createDirectory(
      atPath: runtime, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
    var environment = ProcessInfo.processInfo.environment
    environment["HOME"] = home
    environment["XDG_RUNTIME_DIR"] = runtime
    let verified = try Spawn.run(
      "/usr/bin/systemd-analyze", ["--user", "verify"] + units.map { unitsDirectory + "/" + $0 },
      environment: environment)
    XCTAssertEqual(verified.status, 0, verified.error)
    XCTAssertEqual(verified.error, "", "any message from systemd-analyze is a problem")
  }
}

/// Issue 14, item 5: the daily backup unit runs the pinned command, and that command line, with
/// the environment file's values put in, writes a verified bundle.
final class BackupUnitTests: XCTestCase {
  func testTheBackupServiceCommandWritesAVerifiedBundle() throws {
    let service = try String(contentsOfFile: packageRoot() + "/tools/systemd/vault-backup.service", encoding: .utf8)
    let execStart = try XCTUnwrap(service.split(separator: "\n").first { $0.hasPrefix("ExecStart=") })
    XCTAssertEqual(
      execStart,
      "ExecStart=/usr/local/bin/vault backup --to ${VAULT_BACKUP_DIR} --passphrase-file "
        + "${VAULT_BACKUP_PASSPHRASE_FILE} --keep ${VAULT_BACKUP_KEEP}")
    XCTAssertTrue(service.contains("Environment=VAULT_BACKUP_KEEP=5"))
    let timer = try String(contentsOfFile: packageRoot() + "/tools/systemd/vault-backup.timer", encoding: .utf8)
    XCTAssertTrue(timer.contains("OnCalendar=daily"))

    let temporary = TemporaryDirectory()
    let home = temporary.sub("home")
    XCTAssertEqual(
      try vault(["--home", home, "init", "--store", "keyfile", "--keyfile", temporary.sub("k/v.keys")]).status, 0)
    try FileManager.default.createDirectory(atPath: temporary.sub("backups"), withIntermediateDirectories: true)
    try "daily\n".write(toFile: temporary.sub("passphrase"), atomically: true, encoding: .utf8)
    let values = [
      "${VAULT_BACKUP_DIR}": temporary.sub("backups"), "${VAULT_BACKUP_PASSPHRASE_FILE}": temporary.sub("passphrase"),
      "${VAULT_BACKUP_KEEP}": "5",
    ]
    let words = execStart.dropFirst("ExecStart=".count).split(separator: " ").map { values[String($0)] ?? String($0) }
    XCTAssertEqual(words.first, "/usr/local/bin/vault")
    let run = try Spawn.run(vaultBinary(), Array(words.dropFirst()), environment: environment(["VAULT_HOME": home]))
    XCTAssertEqual(run.status, 0, run.error)
    let bundles = try FileManager.default.contentsOfDirectory(atPath: temporary.sub("backups"))
    XCTAssertEqual(bundles.count, 1)
    XCTAssertTrue(bundles[0].hasSuffix(".vaultbackup"))
  }
}
