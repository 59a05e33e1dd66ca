import Foundation
import VaultTestSupport
import XCTest

/// vault and memo find the vault home and read their environment the same way, and refuse an
/// empty or missing `--home` rather than guess.
final class HomeAndEnvironmentTests: XCTestCase {
  var temporary: TemporaryDirectory!
  var home: String { temporary.sub("home") }
  var memoBinary: String { (vaultBinary() as NSString).deletingLastPathComponent + "/memo" }

  override func setUpWithError() throws {
    temporary = TemporaryDirectory()
    try initKeyfileVault(home: home, keyfile: temporary.sub("keys/v.keys"))
  }

  override func tearDown() { temporary = nil }

  /// The environment without any of the variables that choose a home, plus `changes`.
  private func clean(_ changes: [String: String?] = [:]) -> [String: String] {
    var all: [String: String?] = ["VAULT_HOME": nil, "XDG_DATA_HOME": nil, "HOME": temporary.sub("nohome")]
    for (key, value) in changes { all[key] = value }
    return environment(all)
  }

  /// `--home ""` (say `--home "$DIR"` with DIR unset) used to mean the current directory: `init`
  /// made it a vault and changed its mode to 0700. Now it is a usage error in vault and memo.
  func testEmptyHomeIsAUsageErrorNeverTheCurrentDirectory() throws {
    let cwd = temporary.sub("cwd")
    try FileManager.default.createDirectory(atPath: cwd, withIntermediateDirectories: true)
    XCTAssertEqual(chmod(cwd, 0o755), 0)
    let keys = temporary.sub("keys2/v.keys")
    let runs: [(String, [String])] = [
      (vaultBinary(), ["--home", "", "init", "--store", "keyfile", "--keyfile", keys]),
      (vaultBinary(), ["--home=", "init", "--store", "keyfile", "--keyfile", keys]),
      (vaultBinary(), ["--home", "", "status"]),
      (memoBinary, ["--home", "", "send", "a memo"]),
      (memoBinary, ["--home=", "history"]),
    ]
    for (binary, arguments) in runs {
      let run = try Spawn.run(
        "/bin/sh", ["-c", "cd \"$0\" && exec \"$@\"", cwd, binary] + arguments, environment: clean())
      let what = "\((binary as NSString).lastPathComponent) \(arguments)"
      XCTAssertEqual(run.status, 64, "\(what): \(run.error)")
      XCTAssertTrue(run.error.hasPrefix("Error: --home must not be empty"), "\(what): \(run.error)")
      XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: cwd), [], what)
      var info = stat()
      XCTAssertEqual(stat(cwd, &info), 0)
      XCTAssertEqual(info.st_mode & 0o777, 0o755, "\(what): the current directory's mode is untouched")
    }
  }

  /// `init` and `restore` make an empty home private (mode 0700). A directory shared with others
  /// (sticky, as /tmp and /dev/shm are) or another user's is refused and keeps its mode: an
  /// operator review's `vault --home /dev/shm init` made it 0700, locking everyone else out.
  func testInitAndRestoreRefuseASharedDirectoryAndLeaveItsMode() throws {
    let shared = temporary.sub("shared")
    XCTAssertEqual(mkdir(shared, 0o700), 0)
    XCTAssertEqual(chmod(shared, 0o1777), 0)
    let theirs = temporary.sub("theirs")
    XCTAssertEqual(mkdir(theirs, 0o755), 0)
    XCTAssertEqual(chown(theirs, 1001, 1001), 0)
    let (bundle, passphrase) = try backUp(home, in: temporary, environment: clean())

    let open = temporary.sub("open")
    XCTAssertEqual(mkdir(open, 0o700), 0)
    XCTAssertEqual(chmod(open, 0o777), 0)
    for (directory, mode) in [(shared, 0o1777), (theirs, 0o755), (open, 0o777)] as [(String, mode_t)] {
      let created = try vault(
        ["--home", directory, "init", "--store", "keyfile", "--keyfile", temporary.sub("k2/v.keys")],
        environment: clean())
      let restored = try vault(
        [
          "restore", bundle, "--passphrase-file", passphrase, "--into", directory, "--store", "keyfile", "--keyfile",
          temporary.sub("k3/v.keys"),
        ], environment: clean())
      for (what, run) in [("init", created), ("restore", restored)] {
        XCTAssertEqual(run.status, 1, "\(what) into \(directory): \(run.error)")
        XCTAssertTrue(run.error.contains("\(directory) is not a directory of your own"), "\(what): \(run.error)")
        XCTAssertTrue(run.error.contains("nothing was changed"), "\(what): \(run.error)")
      }
      XCTAssertTrue(
        created.error.contains("Keep the vault in a directory of your own, such as \(directory)/vault"), created.error)
      var info = stat()
      XCTAssertEqual(stat(directory, &info), 0)
      XCTAssertEqual(info.st_mode & 0o7777, mode, "\(directory) keeps its mode")
      XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: directory), [], "nothing made in \(directory)")
    }
    let doctor = try vault(["--home", shared, "doctor"], environment: clean())
    XCTAssertTrue(doctor.outputText.contains("`vault init` would refuse this directory"), doctor.outputText)
    // An empty directory of one's own is made private, as before, also one its group may write
    // (umask 002: a security review saw it refused).
    let own = temporary.sub("own")
    XCTAssertEqual(mkdir(own, 0o700), 0)
    XCTAssertEqual(chmod(own, 0o775), 0)
    try initKeyfileVault(home: own, keyfile: temporary.sub("k4/v.keys"))
    var info = stat()
    XCTAssertEqual(stat(own, &info), 0)
    XCTAssertEqual(info.st_mode & 0o7777, 0o700)
  }

  /// A manifest of another user's in a home of one's own is given back with chown, not by running
  /// as that user, who would then be told the home is not theirs (an operator review went back and
  /// forth between the two).
  func testAManifestOfAnotherUserInOnesOwnHomeIsGivenBack() throws {
    try XCTSkipUnless(geteuid() == 0, "changing a file's owner needs root (CI runs as root)")
    let manifest = home + "/manifest.json"
    XCTAssertEqual(chown(manifest, 1001, 1001), 0)
    let refused = try vault(["--home", home, "status"], environment: clean())
    XCTAssertEqual(refused.status, 1, refused.error)
    XCTAssertTrue(refused.error.contains("while its home is yours (uid 0)"), refused.error)
    XCTAssertTrue(refused.error.contains("give it back: chown 0 \(manifest)"), refused.error)
    XCTAssertFalse(refused.error.contains("sudo -u"), refused.error)
    XCTAssertEqual(chown(manifest, 0, 0), 0, "the chown it names")
    XCTAssertEqual(try vault(["--home", home, "status"], environment: clean()).status, 0)
  }

  /// Right after a home is moved, before any command that writes records the new place, `status`
  /// shows its containers where they are now, with their records (it listed the old path as
  /// missing and 0 records under the active version, while `queue stats` counted them: an
  /// operator review), and says the home was moved.
  func testStatusOfAMovedHomeShowsItsContainersWhereTheyAre() throws {
    XCTAssertEqual(
      try vault(["--home", home, "queue", "put", "--queue", "q"], input: [1], environment: clean()).status, 0)
    let moved = temporary.sub("moved")
    XCTAssertEqual(rename(home, moved), 0)
    let status = try vault(["--home", moved, "status", "--json"], environment: clean())
    XCTAssertEqual(status.status, 0, status.error)
    let object = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(status.output)) as? [String: Any])
    let containers = try XCTUnwrap(object["containers"] as? [[String: Any]])
    XCTAssertEqual(containers.map { $0["path"] as? String }, [moved + "/queue.sqlite"])
    XCTAssertEqual(containers.first?["records"] as? [String: Int], ["1": 1])
    XCTAssertTrue((object["integrity"] as? String)?.contains("the home was moved from \(home)") == true, "\(object)")
    let listed = try vault(["--home", moved, "container", "list"], environment: clean())
    XCTAssertTrue(listed.outputText.hasPrefix(moved + "/queue.sqlite "), listed.outputText)
  }

  /// memo takes `--home=DIR` as vault does; `--home` without a value is a usage error (it used to
  /// fall back to the default home, or become the memo's text).
  func testMemoUnderstandsHomeEqualsAndRefusesAMissingHome() throws {
    let sent = try Spawn.run(memoBinary, ["--home=\(home)", "send", "a memo"], environment: clean())
    XCTAssertEqual(sent.status, 0, sent.error)
    XCTAssertTrue(sent.outputText.hasPrefix("saved "), sent.outputText)
    for arguments in [["--home"], ["send", "--home"], ["history", "--home"]] {
      let run = try Spawn.run(memoBinary, arguments, environment: clean(["VAULT_HOME": home]))
      XCTAssertEqual(run.status, 64, "\(arguments): \(run.error)")
      XCTAssertTrue(run.error.hasPrefix("Error: missing value for '--home'"), "\(arguments): \(run.error)")
    }
    let twice = try Spawn.run(memoBinary, ["--home", home, "--home", home, "history"], environment: clean())
    XCTAssertEqual(twice.status, 64, twice.error)
    XCTAssertTrue(twice.error.hasPrefix("Error: '--home' given more than once"), twice.error)
    let history = try Spawn.run(memoBinary, ["--home", home, "history"], environment: clean())
    XCTAssertEqual(history.status, 0, history.error)
    XCTAssertEqual(history.outputText.components(separatedBy: "pending").count - 1, 1, "one memo saved, none as text")
  }

  /// memo parses VAULT_SECRET_SERVICE_TIMEOUT exactly as vault does: strictly, 64 on a bad value
  /// (it used to ignore the variable and always wait 5 s).
  func testMemoParsesTheSecretServiceTimeoutAsVaultDoes() throws {
    for value in ["inf", "nan", "1e300", "0", "5000", "abc", "5s", "0x10", "1e1"] {
      let expected =
        "Error: VAULT_SECRET_SERVICE_TIMEOUT must be a number of seconds from 0.1 to 3600 (got '\(value)')"
      let changes: [String: String?] = ["VAULT_HOME": home, "VAULT_SECRET_SERVICE_TIMEOUT": value]
      let fromVault = try vault(["status"], environment: clean(changes))
      XCTAssertEqual(fromVault.status, 64, "vault \(value): \(fromVault.error)")
      XCTAssertTrue(fromVault.error.hasPrefix(expected), "vault \(value): \(fromVault.error)")
      let fromMemo = try Spawn.run(memoBinary, ["send", "a memo"], environment: clean(changes))
      XCTAssertEqual(fromMemo.status, 64, "memo \(value): \(fromMemo.error)")
      XCTAssertTrue(fromMemo.error.hasPrefix(expected), "memo \(value): \(fromMemo.error)")
    }
    for value in ["0.1", "2.5", "3600", ""] {
      let run = try Spawn.run(
        memoBinary, ["send", "a memo"],
        environment: clean(["VAULT_HOME": home, "VAULT_SECRET_SERVICE_TIMEOUT": value]))
      XCTAssertEqual(run.status, 0, "\(value): \(run.error)")
    }
  }

  /// Without --home both use $VAULT_HOME, else $XDG_DATA_HOME/vault, else $HOME/.local/share/vault
  /// (empty variables count as unset). memo used to take the passwd entry's home over $HOME, and
  /// an empty XDG_DATA_HOME as "/vault".
  func testMemoAndVaultFindTheSameDefaultHome() throws {
    let environments: [(String) -> [String: String?]] = [
      { ["HOME": $0] }, { ["HOME": $0, "VAULT_HOME": "", "XDG_DATA_HOME": ""] },
      { ["XDG_DATA_HOME": $0 + "/data"] }, { ["VAULT_HOME": $0 + "/explicit", "XDG_DATA_HOME": $0 + "/data"] },
    ]
    for (index, make) in environments.enumerated() {
      let changes = make(temporary.sub("user-\(index)"))
      let env = clean(changes)
      let created = try vault(
        ["init", "--store", "keyfile", "--keyfile", temporary.sub("keys-\(index)/v.keys")], environment: env)
      XCTAssertEqual(created.status, 0, "\(changes): \(created.error)")
      let sent = try Spawn.run(memoBinary, ["send", "a memo"], environment: env)
      XCTAssertEqual(sent.status, 0, "\(changes): \(sent.error)")
      let listed = try vault(["queue", "list", "--queue", "memo"], environment: env)
      XCTAssertEqual(listed.status, 0, "\(changes): \(listed.error)")
      XCTAssertEqual(listed.outputText.split(separator: "\n").count, 1, "\(changes): memo used vault's home")
    }
  }
}
