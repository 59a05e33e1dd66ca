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
      XCTAssertEqual(envelope[3], 2, "format 2")
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

  /// Queue records: the structured context with the container id, both ways.
  func testQueueContextsAgreeBothWays() throws {
    let temporary = TemporaryDirectory()
    let keyfile = temporary.sub("keys/v.keys")
    let vault = try Vault.create(home: temporary.sub("home"), store: StoreDescriptor(kind: .keyfile, keyfile: keyfile))
    let (container, queue, id) = ("89abcdef01234567", "outbox", "0f8e4c2a-9b1d-4e3f-8a7b-6c5d4e3f2a1b")
    let context = EnvelopeContext.queue(containerID: container, queue: queue, id: id)
    let plaintext = Array(#"{"to":"ops"}"#.utf8)
    let arguments = ["--keyfile", keyfile, "--queue-context", container, queue, id]
    let opened = try Spawn.run(
      "/usr/bin/env", ["python3", script, "open"] + arguments, input: try vault.seal(plaintext, context: context))
    XCTAssertEqual(opened.status, 0, opened.error)
    XCTAssertEqual(opened.output, plaintext)
    let sealed = try Spawn.run("/usr/bin/env", ["python3", script, "seal"] + arguments, input: plaintext)
    XCTAssertEqual(sealed.status, 0, sealed.error)
    XCTAssertEqual(try vault.open(sealed.output, context: context), plaintext)
    // The same record claimed by another container of this vault does not open.
    XCTAssertThrowsError(
      try vault.open(sealed.output, context: .queue(containerID: "0000000000000000", queue: queue, id: id)))
  }

  /// A format-1 envelope made with a suite-2 version's key (by a tool that ignores the suite) is
  /// refused by vault, whose manifest binds each version to one suite.
  func testAFormatOneEnvelopeUnderASuiteTwoVersionIsRefused() throws {
    let temporary = TemporaryDirectory()
    let keyfile = temporary.sub("keys/v.keys")
    let vault = try Vault.create(home: temporary.sub("home"), store: StoreDescriptor(kind: .keyfile, keyfile: keyfile))
    let sealed = try Spawn.run(
      "/usr/bin/env", ["python3", script, "seal", "--keyfile", keyfile, "--context", "c", "--format", "1"],
      input: Array("x".utf8))
    XCTAssertEqual(sealed.status, 0, sealed.error)
    XCTAssertThrowsError(try vault.open(sealed.output, context: Array("c".utf8))) {
      XCTAssertEqual($0 as? EnvelopeError, .suiteMismatch(version: 1, envelope: 1, key: 2))
    }
  }

  /// The independent implementation checks C2SP's XAES-256-GCM vectors and the published format-2
  /// vectors (which EnvelopeVectorTests checks vault against), every bit flip included.
  func testTheIndependentImplementationPassesItsSelfTest() throws {
    let run = try Spawn.run("/usr/bin/env", ["python3", script, "selftest"])
    XCTAssertEqual(run.status, 0, run.outputText + run.error)
    XCTAssertTrue(run.outputText.contains("checks passed"), run.outputText)
  }

  func testPythonRejectsAWrongContextToo() throws {
    let temporary = TemporaryDirectory()
    let keyfile = temporary.sub("keys/v.keys")
    let vault = try Vault.create(home: temporary.sub("home"), store: StoreDescriptor(kind: .keyfile, keyfile: keyfile))
    let envelope = try vault.seal(Array("x".utf8), context: Array("a".utf8))
    let opened = try Spawn.run(
      "/usr/bin/env", ["python3", script, "open", "--keyfile", keyfile, "--context", "b"], input: envelope)
    XCTAssertEqual(opened.status, 1)
    XCTAssertTrue(opened.error.contains("key commitment mismatch"), opened.error)
    XCTAssertTrue(opened.output.isEmpty)
  }
}
