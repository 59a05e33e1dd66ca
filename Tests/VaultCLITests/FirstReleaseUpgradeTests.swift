import Foundation
import Vault
import VaultKeys
import VaultQueue
import VaultTestSupport
import XCTest

/// A vault written by the first release (manifest format 1, keyfile format 1, container schema 3
/// with no container ids; Fixtures/README.md): the commands an upgraded app or user runs first,
/// `vault rotate` and `vault backup`, work on it as it is, and every record keeps its contents,
/// state and attempts. Before, both refused until each container had been written to by some
/// other command: rotation's check read the containers through a read-only open, which refuses
/// schema 3 ("open it once with a writing command"), and backup took each container's snapshot
/// for another vault's, having no id to compare ("0 records … do not open … not this vault's
/// container").
final class FirstReleaseUpgradeTests: XCTestCase {
  let root = "/tmp/vault-first-release-fixture"
  let keys = "/tmp/vault-first-release-fixture-keys"
  var home: String { root + "/home" }
  var other: String { root + "/other.sqlite" }
  let texts: [String: String] = [
    "11111111-1111-4111-8111-111111111111": "first-release record one",
    "22222222-2222-4222-8222-222222222222": "first-release record two",
    "33333333-3333-4333-8333-333333333333": "first-release record in another container",
    "44444444-4444-4444-8444-444444444444": "first-release record after the rotation",
  ]
  var temporary: TemporaryDirectory!

  override func setUpWithError() throws {
    try removeFixture()
    temporary = TemporaryDirectory()
    let archive = packageRoot() + "/Tests/VaultCLITests/Fixtures/first-release.tar.gz"
    let extracted = try Spawn.run("/bin/tar", ["-xzf", archive, "-C", "/tmp"])
    XCTAssertEqual(extracted.status, 0, extracted.error)
  }

  override func tearDownWithError() throws {
    try removeFixture()
    temporary = nil
  }

  private func removeFixture() throws {
    for path in [root, keys] where FileManager.default.fileExists(atPath: path) {
      try FileManager.default.removeItem(atPath: path)
    }
  }

  /// Every record of the fixture: queue, state and attempts from `vault queue list`.
  private func listed(home: String, containers: [String]) throws -> [String: String] {
    var found: [String: String] = [:]
    for container in containers {
      let run = try vault(["--home", home, "queue", "list", "--container", container, "--json"])
      XCTAssertEqual(run.status, 0, run.error)
      let rows = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(run.output)) as? [[String: Any]])
      for row in rows {
        let id = try XCTUnwrap(row["id"] as? String)
        found[id] = "\(row["queue"] ?? "") \(row["state"] ?? "") \(row["attempts"] ?? "")"
      }
    }
    return found
  }

  /// The payloads of the pending records (claimed in-process), by id.
  private func pendingTexts(home: String, containers: [String]) throws -> [String: String] {
    let opened = try Vault.open(home: home)
    var found: [String: String] = [:]
    for path in containers {
      let container = try QueueContainer(path: path, vault: opened, mode: .existing)
      for queue in ["outbox", "orders", "other"] {
        for record in try container.claim(queue: queue) {
          found[record.id.uuidString.lowercased()] = String(decoding: record.payload, as: UTF8.self)
        }
      }
    }
    return found
  }

  private func checkRecords(home: String, containers: [String]) throws {
    let states = try listed(home: home, containers: containers)
    XCTAssertEqual(states.count, 5, "\(states)")
    for id in texts.keys.filter({ $0 != "33333333-3333-4333-8333-333333333333" }) {
      XCTAssertTrue(states[id]?.hasSuffix(" pending 0") == true, "\(id): \(states[id] ?? "missing")")
    }
    XCTAssertEqual(states["33333333-3333-4333-8333-333333333333"], "other pending 0")
    XCTAssertEqual(
      states.values.filter { $0 == "telemetry review 1" }.count, 1, "the event the collector refused stays in review")
    XCTAssertEqual(try pendingTexts(home: home, containers: containers), texts)
  }

  /// `queue stats` and `list` only read, so they cannot upgrade a first-release container: they
  /// say so (`QueueError.olderSchema`) and name the commands that do (before: "open it once with a
  /// writing command", naming none), and change nothing.
  func testReadingAFirstReleaseContainerNamesTheCommandsThatUpgradeIt() throws {
    let before = try Data(contentsOf: URL(fileURLWithPath: other))
    for action in ["stats", "list"] {
      let run = try vault(["--home", home, "queue", action, "--container", other])
      XCTAssertEqual(run.status, 1, run.outputText)
      XCTAssertTrue(run.error.contains("written by an earlier release"), run.error)
      XCTAssertTrue(run.error.contains("`vault rotate` or `vault backup`"), run.error)
    }
    XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: other)), before, "nothing was changed")
    XCTAssertEqual(try vault(["--home", home, "rotate"]).status, 0)
    XCTAssertEqual(try vault(["--home", home, "queue", "stats", "--container", other]).status, 0)
  }

  func testAFirstReleaseVaultRotatesAsItsFirstCommandWithNothingLost() throws {
    let rotated = try vault(["--home", home, "rotate", "--json"])
    XCTAssertEqual(rotated.status, 0, rotated.error)
    let report = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(rotated.output)) as? [String: Any])
    XCTAssertEqual(report["new_version"] as? Int, 3, "\(report)")
    XCTAssertEqual((report["resealed"] as? [String: Int])?[home + "/queue.sqlite"], 4)
    XCTAssertEqual((report["resealed"] as? [String: Int])?[other], 1)
    let scan = try vault(["--home", home, "scan", "--verify", home, other])
    XCTAssertEqual(scan.status, 0, scan.outputText + scan.error)
    let external = try Array(Data(contentsOf: URL(fileURLWithPath: root + "/external.vlt")))
    let opened = try vault(["--home", home, "open", "--context", "notes|1"], input: external)
    XCTAssertEqual(opened.outputText, "an external envelope sealed by the first release", opened.error)
    try checkRecords(home: home, containers: [home + "/queue.sqlite", other])
  }

  /// The first command on a first-release vault upgrades its manifest: an integrity key into the
  /// keyfile, then the signed manifest into the key store, then into the home. Killed between the
  /// first of these and the last, the vault was refused by every command after ("fails its
  /// integrity check … modified by something other than vault … restore it from a backup"), with
  /// no backup to restore. Now the next command finishes the upgrade, whichever sync it stopped at.
  func testAnUpgradeKilledAtAnySyncIsFinishedByTheNextCommand() throws {
    let id = "55555555-5555-4555-8555-555555555555"
    let put = ["--home", home, "queue", "put", "--queue", "outbox", "--id", id]
    var step = 1
    while true {
      try removeFixture()
      let extracted = try Spawn.run(
        "/bin/tar", ["-xzf", packageRoot() + "/Tests/VaultCLITests/Fixtures/first-release.tar.gz", "-C", "/tmp"])
      XCTAssertEqual(extracted.status, 0, extracted.error)
      let killed = try vaultKilled(at: "fdatasync,fsync", step: step, put, input: Array("put under a kill".utf8))
      let again = try vault(put, input: Array("put under a kill".utf8))
      XCTAssertEqual(again.status, 0, "killed at sync \(step): \(again.error)")
      let status = try vault(["--home", home, "status", "--json"])
      XCTAssertEqual(status.status, 0, "killed at sync \(step): \(status.error)")
      let states = try listed(home: home, containers: [home + "/queue.sqlite"])
      XCTAssertEqual(states.count, 5, "killed at sync \(step): \(states)")
      XCTAssertEqual(states[id], "outbox pending 0", "killed at sync \(step)")
      if killed.status != 128 + SIGKILL || step >= 40 { break }
      step += 1
    }
    XCTAssertGreaterThan(step, 4, "the kills reached past the integrity key and the key store's copy")
  }

  func testAFirstReleaseVaultBacksUpAsItsFirstCommandAndRestoresWithNothingLost() throws {
    let bundles = temporary.sub("bundles")
    let restoredKeys = temporary.sub("restored-keys")
    for directory in [bundles, restoredKeys] {
      try FileManager.default.createDirectory(
        atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
    }
    let passphrase = temporary.sub("passphrase")
    XCTAssertTrue(
      FileManager.default.createFile(
        atPath: passphrase, contents: Data("first-release test passphrase".utf8), attributes: [.posixPermissions: 0o600]
      ))
    let backup = try vault(["--home", home, "backup", "--to", bundles, "--passphrase-file", passphrase, "--json"])
    XCTAssertEqual(backup.status, 0, backup.error)
    let written = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(backup.output)) as? [String: Any])
    let bundle = try XCTUnwrap(written["bundle"] as? String)
    try checkRecords(home: home, containers: [home + "/queue.sqlite", other])

    let restoredHome = temporary.sub("restored")
    let restored = try vault([
      "restore", bundle, "--passphrase-file", passphrase, "--into", restoredHome, "--store", "keyfile", "--keyfile",
      restoredKeys + "/vault.keys",
    ])
    XCTAssertEqual(restored.status, 0, restored.error)
    let scan = try vault(["--home", restoredHome, "scan", "--verify", restoredHome])
    XCTAssertEqual(scan.status, 0, scan.outputText + scan.error)
    try checkRecords(home: restoredHome, containers: [restoredHome + "/queue.sqlite", restoredHome + "/other.sqlite"])
  }
}
