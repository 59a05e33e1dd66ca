import Foundation
import Vault
import VaultKeys
import VaultQueue
import VaultTestSupport
import XCTest

/// A vault written by the release before envelope format 2 (Fixtures/README.md): it opens, says
/// it should rotate, and after one `vault rotate` every container record is format 2 under a
/// suite-2 key, nothing lost, while its format-1 external envelope still opens.
final class PreviousReleaseUpgradeTests: XCTestCase {
  let root = "/tmp/vault-format1-fixture"
  let keys = "/tmp/vault-format1-fixture-keys"
  var home: String { root + "/home" }
  let records: [String: (queue: String, text: String)] = [
    "11111111-1111-4111-8111-111111111111": ("outbox", #"first record: {"to":"ops","body":"hello"}"#),
    "22222222-2222-4222-8222-222222222222": ("telemetry", "second record, telemetry-ish"),
    "33333333-3333-4333-8333-333333333333": ("outbox", "third record, after one rotation"),
    "44444444-4444-4444-8444-444444444444": ("outbox", "fourth record, after one rotation"),
  ]

  override func setUpWithError() throws {
    try removeFixture()
    let archive = packageRoot() + "/Tests/VaultCLITests/Fixtures/previous-release-format1.tar.gz"
    let extracted = try Spawn.run("/bin/tar", ["-xzf", archive, "-C", "/tmp"])
    XCTAssertEqual(extracted.status, 0, extracted.error)
  }

  override func tearDownWithError() throws { try removeFixture() }

  private func removeFixture() throws {
    for path in [root, keys] where FileManager.default.fileExists(atPath: path) {
      try FileManager.default.removeItem(atPath: path)
    }
  }

  private func json(_ run: Spawned) throws -> [String: Any] {
    XCTAssertEqual(run.status, 0, run.error)
    return try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(run.output)) as? [String: Any])
  }

  func testAVaultOfThePreviousReleaseConvertsOnItsNextRotationWithNothingLost() throws {
    let external = try Array(Data(contentsOf: URL(fileURLWithPath: root + "/external.vlt")))
    XCTAssertEqual(Array(external[3...4]), [1, 1], "the fixture's external envelope is format 1")

    // Before: status and doctor say the active version seals format 1 and why to rotate.
    let before = try json(try vault(["--home", home, "status", "--json"]))
    XCTAssertEqual((before["versions"] as? [[String: Any]])?.compactMap { $0["suite"] as? Int }, [1, 1])
    XCTAssertEqual((before["warnings"] as? [String])?.count, 1)
    XCTAssertTrue((before["warnings"] as? [String])?.first?.contains("rotate the vault") == true)
    let doctor = try vault(["--home", home, "doctor"])
    XCTAssertTrue(doctor.outputText.contains("envelopes:       warning: key version 2 seals envelope format 1"))
    let text = try vault(["--home", home, "status"])
    XCTAssertTrue(text.outputText.contains("  warning:  key version 2 seals envelope format 1"), text.outputText)

    // A suite-1 active version keeps sealing format 1, which this release opens.
    let sealed = try vault(["--home", home, "seal", "--context", "notes|43"], input: Array("still format 1".utf8))
    XCTAssertEqual(sealed.status, 0, sealed.error)
    XCTAssertEqual(Array(sealed.output[3...4]), [1, 1])
    XCTAssertEqual(
      try vault(["--home", home, "open", "--context", "notes|42"], input: external).outputText,
      "an external envelope sealed by the previous release")
    XCTAssertEqual(try ManifestFile.read(home: home).manifest.format, 2, "the previous release can still read it")

    // One rotation: a suite-2 version, every container record re-sealed into format 2.
    let rotated = try json(try vault(["--home", home, "rotate", "--json"]))
    XCTAssertEqual(rotated["new_version"] as? Int, 3, "\(rotated)")
    XCTAssertEqual((rotated["resealed"] as? [String: Int])?[home + "/queue.sqlite"], 4)
    let after = try json(try vault(["--home", home, "status", "--json"]))
    XCTAssertEqual(after["active_version"] as? Int, 3)
    XCTAssertEqual((after["warnings"] as? [String]) ?? ["missing"], [])
    let versions = try XCTUnwrap(after["versions"] as? [[String: Any]])
    XCTAssertEqual(versions.last?["suite"] as? Int, 2)
    XCTAssertEqual(versions.last?["records"] as? Int, 4)
    XCTAssertEqual(try ManifestFile.read(home: home).manifest.format, 3)

    let opened = try Vault.open(home: home)
    let containerPath = home + "/queue.sqlite"
    let fd = open(containerPath, O_RDONLY)
    defer { close(fd) }
    let reader = try ContainerReader(descriptor: fd, path: containerPath, live: true)
    var formats: [UInt8] = []
    try reader.forEachEnvelope { _, _, _, envelope in formats.append(envelope[3]) }
    XCTAssertEqual(formats, [2, 2, 2, 2])

    let container = try QueueContainer(path: containerPath, vault: opened, mode: .existing)
    var found: [String: String] = [:]
    for queue in ["outbox", "telemetry"] {
      for record in try container.claim(queue: queue) {
        found[record.id.uuidString.lowercased()] = String(decoding: record.payload, as: UTF8.self)
      }
    }
    XCTAssertEqual(found, records.mapValues(\.text))

    // The external envelopes keep their (pinned) key and still open; new seals are format 2.
    XCTAssertEqual(
      try opened.open(external, context: Array("notes|42".utf8)),
      Array("an external envelope sealed by the previous release".utf8))
    XCTAssertEqual(try opened.open(sealed.output, context: Array("notes|43".utf8)), Array("still format 1".utf8))
    let fresh = try vault(["--home", home, "seal", "--context", "notes|44"], input: Array("now format 2".utf8))
    XCTAssertEqual(Array(fresh.output[3...4]), [2, 2])
    let scan = try vault(["--home", home, "scan", "--verify", home])
    XCTAssertEqual(scan.status, 0, scan.outputText + scan.error)
  }
}
