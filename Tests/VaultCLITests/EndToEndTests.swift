import Foundation
import VaultTestSupport
import XCTest

/// Runs the built `vault` binary against real files: a keyfile vault in a temporary home.
final class EndToEndTests: XCTestCase {
  var temporary: TemporaryDirectory!
  var home: String { temporary.sub("home") }
  var keyfile: String { temporary.sub("keys/vault.keys") }

  override func setUpWithError() throws {
    temporary = TemporaryDirectory()
    let created = try vault(["--home", home, "init", "--store", "keyfile", "--keyfile", keyfile])
    XCTAssertEqual(created.status, 0, created.error)
    XCTAssertTrue(created.outputText.contains("Keys: keyfile \(keyfile) (mode 0600)"), created.outputText)
  }

  override func tearDown() { temporary = nil }

  private let secret = Array("Meet at the north gate at 06:40. Bring the ledger.".utf8)

  func testSealOpenRotateOpenOldStatus() throws {
    let sealed = try vault(["--home", home, "seal", "--context", "memo:1"], input: secret)
    XCTAssertEqual(sealed.status, 0, sealed.error)
    XCTAssertEqual(sealed.output.count, secret.count + 89)
    XCTAssertNil(sealed.outputText.range(of: "north gate"), "the envelope hides the plaintext")

    let opened = try vault(["--home", home, "open", "--context", "memo:1"], input: sealed.output)
    XCTAssertEqual(opened.status, 0, opened.error)
    XCTAssertEqual(opened.output, secret)

    let rotated = try vault(["--home", home, "rotate", "--json"])
    XCTAssertEqual(rotated.status, 0, rotated.error)
    let report = try JSONSerialization.jsonObject(with: Data(rotated.output)) as! [String: Any]
    XCTAssertEqual(report["previous_version"] as? Int, 1)
    XCTAssertEqual(report["new_version"] as? Int, 2)
    XCTAssertEqual(report["kept_versions"] as? [Int], [1])
    XCTAssertEqual(report["retired"] as? [Int], [])

    let old = try vault(["--home", home, "open", "--context", "memo:1"], input: sealed.output)
    XCTAssertEqual(old.output, secret, "an envelope sealed before rotation still opens")
    let fresh = try vault(["--home", home, "seal", "--context", "memo:2"], input: secret)
    XCTAssertEqual(Array(fresh.output[13..<17]), [0, 0, 0, 2], "new seals use version 2")

    let status = try vault(["--home", home, "status", "--json"])
    XCTAssertEqual(status.status, 0, status.error)
    let json = try JSONSerialization.jsonObject(with: Data(status.output)) as! [String: Any]
    XCTAssertEqual((json["vault_id"] as? String)?.count, 16)
    XCTAssertEqual(json["store"] as? String, "keyfile")
    XCTAssertEqual(json["active_version"] as? Int, 2)
    let versions = json["versions"] as! [[String: Any]]
    XCTAssertEqual(versions.map { $0["version"] as? Int }, [1, 2])
    XCTAssertEqual(versions.map { $0["state"] as? String }, ["decrypt-only", "active"])
    XCTAssertEqual(versions.map { $0["records"] as? Int }, [0, 0])
    XCTAssertTrue(versions.allSatisfy { ($0["created_at"] as? String)?.hasSuffix("Z") == true })
    let keyfileInfo = json["keyfile"] as! [String: Any]
    XCTAssertEqual(keyfileInfo["path"] as? String, keyfile)
    XCTAssertEqual(keyfileInfo["mode"] as? String, "0600")

    let human = try vault(["--home", home, "status"])
    XCTAssertTrue(human.outputText.contains("active:   version 2"), human.outputText)
  }

  func testVaultHomeEnvironmentStandsForHome() throws {
    let sealed = try vault(["seal", "--context", "c"], input: secret, environment: environment(["VAULT_HOME": home]))
    XCTAssertEqual(sealed.status, 0, sealed.error)
    let opened = try vault(["--home", home, "open", "--context", "c"], input: sealed.output)
    XCTAssertEqual(opened.output, secret)
  }

  func testBadInputToOpenGetsDistinctErrorsAndNoOutput() throws {
    let sealed = try vault(["--home", home, "seal", "--context", "memo:1"], input: secret).output
    var tampered = sealed
    tampered[80] ^= 0x01
    var tamperedRandom = sealed
    tamperedRandom[40] ^= 0x01
    let other = TemporaryDirectory()
    try vault(["--home", other.sub("h"), "init", "--store", "keyfile", "--keyfile", other.sub("k/k.keys")])
    let foreign = try vault(["--home", other.sub("h"), "seal", "--context", "memo:1"], input: secret).output

    let cases: [(String, [UInt8], String, Int32)] = [
      ("empty", [], "standard input is empty", 2),
      ("random", (0..<200).map { UInt8(truncatingIfNeeded: $0 &* 151 &+ 3) }, "not a vault envelope", 1),
      ("plain text", secret, "not a vault envelope", 1),
      ("truncated", Array(sealed.prefix(30)), "truncated", 1),
      ("tampered", tampered, "authentication failed", 1),
      ("tampered random value", tamperedRandom, "key commitment mismatch", 1),
      ("another vault", foreign, "belongs to vault", 1),
    ]
    for (name, input, message, code) in cases {
      let run = try vault(["--home", home, "open", "--context", "memo:1"], input: input)
      XCTAssertEqual(run.status, code, name)
      XCTAssertTrue(run.error.hasPrefix("Error: "), name)
      XCTAssertTrue(run.error.contains(message), "\(name): \(run.error)")
      XCTAssertTrue(run.output.isEmpty, "\(name): nothing on stdout")
      XCTAssertNil(run.error.range(of: "north gate"), "\(name): no plaintext in errors")
    }
    let wrongContext = try vault(["--home", home, "open", "--context", "memo:2"], input: sealed)
    XCTAssertEqual(wrongContext.status, 1)
    XCTAssertTrue(wrongContext.error.contains("the context differs from the one it was sealed with"))
    XCTAssertTrue(wrongContext.output.isEmpty)
  }

  func testInitOverAnExistingVaultRefusesAndChangesNothing() throws {
    let manifest = try Data(contentsOf: URL(fileURLWithPath: home + "/manifest.json"))
    let keys = try Data(contentsOf: URL(fileURLWithPath: keyfile))
    for store in ["keyfile", "auto", "secret-service"] {
      let run = try vault(["--home", home, "init", "--store", store])
      XCTAssertEqual(run.status, 1, store)
      XCTAssertTrue(run.error.contains("a vault already exists"), run.error)
    }
    XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: home + "/manifest.json")), manifest)
    XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: keyfile)), keys)
  }

  func testKeyfileReadableByOthersIsRefusedWithTheFix() throws {
    chmod(keyfile, 0o644)
    let run = try vault(["--home", home, "seal", "--context", "c"], input: secret)
    XCTAssertEqual(run.status, 1)
    XCTAssertTrue(run.error.contains("mode 0644"), run.error)
    XCTAssertTrue(run.error.contains("chmod 600 \(keyfile)"), run.error)
    XCTAssertTrue(run.output.isEmpty)
    let doctor = try vault(["--home", home, "doctor"])
    XCTAssertEqual(doctor.status, 1)
    XCTAssertTrue(doctor.outputText.contains("chmod 600 \(keyfile)"), doctor.outputText)
    chmod(keyfile, 0o600)
    XCTAssertEqual(try vault(["--home", home, "doctor"]).status, 0)
  }

  func testKeyfileOwnedByAnotherUserIsRefused() throws {
    try XCTSkipUnless(geteuid() == 0, "changing a file's owner needs root (CI runs as root)")
    XCTAssertEqual(chown(keyfile, 4242, 4242), 0)
    // The user's keyfile in the user's directory: root is told to run as the owner, never to take
    // the user's keyfile (issue 8, item 17). (In a directory of root's own it is given back with
    // chown: PermissionHintTests.)
    XCTAssertEqual(chown((keyfile as NSString).deletingLastPathComponent, 4242, 4242), 0)
    let run = try vault(["--home", home, "seal", "--context", "c"], input: secret)
    XCTAssertEqual(run.status, 1)
    XCTAssertTrue(run.error.contains("belongs to uid 4242"), run.error)
    XCTAssertTrue(run.error.contains("run as uid 4242"), run.error)
    XCTAssertFalse(run.error.contains("chown"), run.error)
  }

  /// A manifest of another user's, or one others may change, is not damage: the error says whom to run
  /// as (the home is theirs too) or how to give it back (the home is yours) or which mode to set,
  /// never "restore it from a backup", and changes nothing.
  func testAManifestOwnedByAnotherUserIsRefusedWithWhomToRunAs() throws {
    try XCTSkipUnless(geteuid() == 0, "changing a file's owner needs root (CI runs as root)")
    let manifestPath = home + "/manifest.json"
    let before = try Data(contentsOf: URL(fileURLWithPath: manifestPath))
    let entries = try FileManager.default.contentsOfDirectory(atPath: home).sorted()
    XCTAssertEqual(chown(manifestPath, 4242, 4242), 0)
    for command in [["status"], ["queue", "stats"], ["rotate"], ["seal", "--context", "c"]] {
      let run = try vault(["--home", home] + command, input: secret)
      XCTAssertEqual(run.status, 1, "\(command)")
      XCTAssertTrue(run.error.contains("belongs to uid 4242, while its home is yours (uid 0)"), run.error)
      XCTAssertTrue(run.error.contains("give it back: chown 0 \(manifestPath)"), run.error)
      XCTAssertFalse(run.error.contains("corrupt") || run.error.contains("backup"), run.error)
      XCTAssertTrue(run.output.isEmpty)
    }
    XCTAssertEqual(chown(home, 4242, 4242), 0)
    let theirs = try vault(["--home", home, "status"])
    XCTAssertTrue(theirs.error.contains("Run as uid 4242"), theirs.error)
    XCTAssertTrue(theirs.error.contains("sudo -u '#4242' vault"), theirs.error)
    XCTAssertFalse(theirs.error.contains("chown"), theirs.error)
    XCTAssertEqual(chown(home, 0, 0), 0)
    XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: manifestPath)), before)
    XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: home).sorted(), entries, "nothing was made")
  }

  func testAManifestOthersMayChangeIsRefusedWithTheMode() throws {
    let manifestPath = home + "/manifest.json"
    XCTAssertEqual(chmod(manifestPath, 0o666), 0)
    let run = try vault(["--home", home, "status"])
    XCTAssertEqual(run.status, 1)
    XCTAssertTrue(
      run.error.contains(
        "has mode 0666, which lets others change it; nothing was changed. Run: chmod 600 \(manifestPath)"), run.error)
    XCTAssertFalse(run.error.contains("corrupt") || run.error.contains("backup"), run.error)
    XCTAssertEqual(chmod(manifestPath, 0o600), 0)
    XCTAssertEqual(try vault(["--home", home, "status"]).status, 0)
  }

  /// Whoever may write the home can delete the manifest and the queue in it: a home others may write
  /// is refused with the chmod that fixes it, and works again after it.
  func testAHomeOthersMayWriteIsRefusedWithTheChmod() throws {
    let entries = try FileManager.default.contentsOfDirectory(atPath: home).sorted()
    for (mode, shown): (mode_t, String) in [(0o777, "0777"), (0o1777, "01777"), (0o770, "0770")] {
      XCTAssertEqual(chmod(home, mode), 0)
      for command in [["status"], ["seal", "--context", "c"], ["queue", "put", "--queue", "q"]] {
        let run = try vault(["--home", home] + command, input: secret)
        XCTAssertEqual(run.status, 1, "\(command)")
        XCTAssertTrue(
          run.error.contains("the vault home \(home) has mode \(shown), which lets others replace or delete"), run.error
        )
        XCTAssertTrue(run.error.contains("Run: chmod 700 \(home)"), run.error)
        XCTAssertTrue(run.output.isEmpty)
      }
    }
    XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: home).sorted(), entries, "nothing was made")
    XCTAssertEqual(chmod(home, 0o750), 0)
    XCTAssertEqual(try vault(["--home", home, "status"]).status, 0, "a home others may only read is accepted")
  }

  func testAHomeOwnedByAnotherUserIsRefusedWithWhomToRunAs() throws {
    try XCTSkipUnless(geteuid() == 0, "changing a file's owner needs root (CI runs as root)")
    XCTAssertEqual(chown(home, 4242, 4242), 0)
    let run = try vault(["--home", home, "status"])
    XCTAssertEqual(run.status, 1)
    XCTAssertTrue(
      run.error.contains("the vault home \(home) belongs to uid 4242, not root; nothing was changed"), run.error)
    XCTAssertTrue(run.error.contains("sudo -u '#4242' vault"), run.error)
    XCTAssertFalse(run.error.contains("chown") || run.error.contains("chmod"), run.error)
  }

  /// Another user's home is closed to us (0700): the error names its owner, not "Permission denied".
  func testAnotherUsersHomeNamesItsOwnerToRunAs() throws {
    try XCTSkipUnless(getuid() == 0, "needs root to drop to another user with setpriv")
    XCTAssertEqual(chmod(temporary.path, 0o755), 0)
    let child = try Spawn.start(
      "/usr/bin/setpriv", ["--reuid=65534", "--regid=65534", "--clear-groups", vaultBinary(), "--home", home, "status"])
    guard let status = child.exitStatus(within: 60) else {
      child.kill(SIGKILL)
      _ = child.finish()
      return XCTFail("vault status did not finish within 60 s")
    }
    let error = child.finish().error
    XCTAssertEqual(status, 1)
    XCTAssertTrue(
      error.contains(
        "the vault home \(home) is owned by uid 0, not by you (uid 65534); nothing was changed. Run as uid 0"),
      error)
    XCTAssertFalse(error.contains("Permission denied"), error)
  }

  /// A manifest reached through a symbolic link is not read (whoever controls the link would choose
  /// the file vault trusts), and it is not called corrupt: the error names the link's target and the
  /// move that puts the file in its place, which then works.
  func testAManifestThatIsALinkIsRefusedWithTheMoveThatRestoresIt() throws {
    let manifest = home + "/manifest.json"
    let keys = try Data(contentsOf: URL(fileURLWithPath: keyfile))
    XCTAssertEqual(mkdir(temporary.sub("moved"), 0o700), 0)
    XCTAssertEqual(rename(manifest, temporary.sub("moved/manifest.json")), 0)
    XCTAssertEqual(symlink("../moved/manifest.json", manifest), 0)
    let target = home + "/../moved/manifest.json"
    for command in [["status"], ["rotate"], ["seal", "--context", "c"], ["queue", "put", "--queue", "q"]] {
      let run = try vault(["--home", home] + command, input: secret)
      XCTAssertEqual(run.status, 1, "\(command)")
      XCTAssertTrue(
        run.error.contains("the vault manifest \(manifest) is a symbolic link to ../moved/manifest.json"), run.error)
      XCTAssertTrue(run.error.contains("nothing was read or changed"), run.error)
      XCTAssertTrue(run.error.contains("mv \(target) \(manifest)"), run.error)
      XCTAssertFalse(run.error.contains("corrupt") || run.error.contains("backup"), run.error)
      XCTAssertTrue(run.output.isEmpty)
    }
    XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: keyfile)), keys, "no key was made or changed")
    XCTAssertEqual(rename(target, manifest), 0, "the move the error names")
    let status = try vault(["--home", home, "status"])
    XCTAssertEqual(status.status, 0, status.error)
  }

  /// A link that leads to no regular file (dangling, to itself, a loop, a device) is not given a
  /// `mv` of nothing (a link to /dev/zero was called dangling: session 39's review).
  func testAManifestLinkThatLeadsNowhereSaysSo() throws {
    let manifest = home + "/manifest.json"
    XCTAssertEqual(rename(manifest, temporary.sub("kept.json")), 0)
    for target in ["gone.json", "manifest.json", manifest, "/dev/zero"] {
      XCTAssertEqual(symlink(target, manifest), 0)
      defer { XCTAssertEqual(unlink(manifest), 0) }
      let run = try vault(["--home", home, "status"])
      XCTAssertEqual(run.status, 1, target)
      XCTAssertTrue(
        run.error.contains(
          "the vault manifest \(manifest) is a symbolic link that leads to no regular file (it dangles, loops, or "
            + "leads to a device, FIFO or directory)"), run.error)
      XCTAssertTrue(run.error.contains("Remove the link and put the manifest file itself in its place"), run.error)
      XCTAssertFalse(run.error.contains("mv "), run.error)
    }
  }

  /// A directory, FIFO or socket where the manifest belongs is named as what it is, promptly (a
  /// FIFO is not waited on), and the advice is to restore the manifest, not to fix its mode.
  func testAManifestThatIsNotAFileIsNamedAsWhatItIs() throws {
    let manifest = home + "/manifest.json"
    XCTAssertEqual(rename(manifest, temporary.sub("kept.json")), 0)
    let makers: [(String, () throws -> Void)] = [
      ("a directory", { XCTAssertEqual(mkdir(manifest, 0o700), 0) }),
      ("a FIFO", { XCTAssertEqual(mkfifo(manifest, 0o600), 0) }),
      ("a socket", { try Self.bindSocket(at: manifest) }),
    ]
    for (kind, make) in makers {
      try make()
      defer { XCTAssertEqual(kind == "a directory" ? rmdir(manifest) : unlink(manifest), 0) }
      for command in [["status"], ["seal", "--context", "c"]] {
        let run = try vault(["--home", home] + command, input: secret)
        XCTAssertEqual(run.status, 1, "\(kind) \(command)")
        XCTAssertTrue(
          run.error.contains("the vault manifest \(manifest) is \(kind), not a regular file; nothing was read"),
          run.error)
        XCTAssertTrue(run.error.contains("restore manifest.json from a backup"), run.error)
      }
    }
  }

  /// Binds a Unix socket at `path` (left there when the socket is closed).
  private static func bindSocket(at path: String) throws {
    let descriptor = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
    XCTAssertGreaterThanOrEqual(descriptor, 0)
    defer { close(descriptor) }
    var address = sockaddr_un()
    address.sun_family = sa_family_t(AF_UNIX)
    let bytes = Array(path.utf8)
    try XCTSkipIf(bytes.count >= MemoryLayout.size(ofValue: address.sun_path), "socket path too long")
    withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: bytes) }
    let bound = withUnsafePointer(to: &address) {
      $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
        bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
      }
    }
    XCTAssertEqual(bound, 0, String(cString: strerror(errno)))
  }

  func testCorruptManifestFailsWithoutTouchingKeys() throws {
    let keys = try Data(contentsOf: URL(fileURLWithPath: keyfile))
    try Data("{\"format\":1,".utf8).write(to: URL(fileURLWithPath: home + "/manifest.json"))
    for command in [["status"], ["rotate"], ["seal", "--context", "c"]] {
      let run = try vault(["--home", home] + command, input: secret)
      XCTAssertEqual(run.status, 1, "\(command)")
      XCTAssertTrue(run.error.contains("is corrupt"), run.error)
    }
    XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: keyfile)), keys)
  }

  func testMissingManifestWhileTheKeyfileExistsRefusesInit() throws {
    unlink(home + "/manifest.json")
    let status = try vault(["--home", home, "status"])
    XCTAssertEqual(status.status, 2)
    XCTAssertTrue(status.error.contains("`vault recover` writes it back"), status.error)
    let reinit = try vault(["--home", home, "init", "--store", "keyfile", "--keyfile", keyfile])
    XCTAssertEqual(reinit.status, 1)
    XCTAssertTrue(reinit.error.contains("is not empty") && reinit.error.contains("`vault recover`"), reinit.error)
  }

  func testDeletedKeyIsReportedNeverRegenerated() throws {
    let sealed = try vault(["--home", home, "seal", "--context", "c"], input: secret).output
    let keys = try Data(contentsOf: URL(fileURLWithPath: keyfile))
    unlink(keyfile)
    let run = try vault(["--home", home, "open", "--context", "c"], input: sealed)
    XCTAssertEqual(run.status, 1)
    XCTAssertTrue(run.error.contains("the keyfile \(keyfile), which holds this vault's keys, is not there"), run.error)
    XCTAssertFalse(FileManager.default.fileExists(atPath: keyfile), "no new keyfile was made")
    try keys.write(to: URL(fileURLWithPath: keyfile))
    chmod(keyfile, 0o600)
    XCTAssertEqual(try vault(["--home", home, "open", "--context", "c"], input: sealed).output, secret)
  }

  /// Two operators rotating at once: the manifest lock serialises them, so versions 2 and 3 each
  /// get exactly one key and everything sealed before still opens.
  func testConcurrentRotationsFromTwoProcessesDoNotCollide() throws {
    let sealed = try vault(["--home", home, "seal", "--context", "c"], input: secret).output
    let first = try Spawn.start(vaultBinary(), ["--home", home, "rotate", "--json"])
    let second = try Spawn.start(vaultBinary(), ["--home", home, "rotate", "--json"])
    let results = [first.finish(), second.finish()]
    XCTAssertEqual(results.map(\.status), [0, 0], results.map(\.error).joined())
    let newVersions = results.compactMap {
      (try? JSONSerialization.jsonObject(with: Data($0.output)) as? [String: Any])?["new_version"] as? Int
    }
    XCTAssertEqual(Set(newVersions), [2, 3])
    let status =
      try JSONSerialization.jsonObject(
        with: Data(try vault(["--home", home, "status", "--json"]).output)) as! [String: Any]
    XCTAssertEqual(status["active_version"] as? Int, 3)
    XCTAssertEqual(try vault(["--home", home, "open", "--context", "c"], input: sealed).output, secret)
  }

  func testNothingSecretIsPrinted() throws {
    let runs = [
      try vault(["--home", home, "status"]), try vault(["--home", home, "status", "--json"]),
      try vault(["--home", home, "doctor"]), try vault(["--home", home, "rotate"]),
    ]
    let keyBytes = try Data(contentsOf: URL(fileURLWithPath: keyfile))
    let keyHex = keyBytes[16..<48].map { String(format: "%02x", $0) }.joined()
    for run in runs {
      XCTAssertFalse(run.outputText.contains(keyHex))
      XCTAssertFalse(run.error.contains(keyHex))
    }
  }
}
