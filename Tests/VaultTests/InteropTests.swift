import Foundation
import VaultKeys
import VaultTestSupport
import XCTest

@testable import Vault

/// Proves SECURITY.md's description of the formats with a second implementation written from it:
/// tools/interop/vault_envelope.py (Python `cryptography`).
final class InteropTests: XCTestCase {
  var script: String { packageRoot() + "/tools/interop/vault_envelope.py" }

  override func setUpWithError() throws {
    let probe = try Spawn.run("/usr/bin/env", ["python3", "-c", "import cryptography"])
    if ProcessInfo.processInfo.environment["VAULT_REQUIRE_INTEROP"] == "1" {
      XCTAssertEqual(probe.status, 0, "python3 with the cryptography package is required")
    } else {
      try XCTSkipUnless(probe.status == 0, "python3 with `cryptography` is missing; tools/test.sh installs it")
    }
  }

  func testPythonOpensWhatVaultSealedAndViceVersa() throws {
    let temporary = TemporaryDirectory()
    let keyfile = temporary.sub("keys/v.keys")
    let vault = try Vault.create(home: temporary.sub("home"), store: StoreDescriptor(kind: .keyfile, keyfile: keyfile))
    _ = try vault.rotate()  // two versions, so the version field matters
    for size in [0, 1, 100, 5000] {
      let plaintext = (0..<size).map { UInt8(truncatingIfNeeded: $0 * 7) }
      let context = "queue:outbox|id:\(size)"
      let envelope = try vault.seal(plaintext, context: Array(context.utf8))
      let opened = try Spawn.run(
        "/usr/bin/env", ["python3", script, "open", "--keyfile", keyfile, "--context", context], input: envelope)
      XCTAssertEqual(opened.status, 0, opened.error)
      XCTAssertEqual(opened.output, plaintext, "size \(size)")

      let sealed = try Spawn.run(
        "/usr/bin/env", ["python3", script, "seal", "--keyfile", keyfile, "--context", context, "--version", "1"],
        input: plaintext)
      XCTAssertEqual(sealed.status, 0, sealed.error)
      XCTAssertEqual(try Envelope.header(of: sealed.output).version, 1)
      XCTAssertEqual(try vault.open(sealed.output, context: Array(context.utf8)), plaintext)
    }
  }

  func testPythonRejectsAWrongContextToo() throws {
    let temporary = TemporaryDirectory()
    let keyfile = temporary.sub("keys/v.keys")
    let vault = try Vault.create(home: temporary.sub("home"), store: StoreDescriptor(kind: .keyfile, keyfile: keyfile))
    let envelope = try vault.seal(Array("x".utf8), context: Array("a".utf8))
    let opened = try Spawn.run(
      "/usr/bin/env", ["python3", script, "open", "--keyfile", keyfile, "--context", "b"], input: envelope)
    XCTAssertEqual(opened.status, 1)
    XCTAssertTrue(opened.output.isEmpty)
  }
}
