import Foundation
import VaultTestSupport
import XCTest

/// libcurl and libsecret are loaded with dlopen when first used (Sources/CCurl, Sources/CLibSecret),
/// not linked: a command that neither sends nor reaches the Secret Service loads neither, and a
/// machine without them still runs keyfile vaults and scans. Without them, what needs them fails by
/// kind and loses nothing; it never falls back to making a new key.
final class OptionalLibrariesTests: XCTestCase {
  var temporary: TemporaryDirectory!
  override func setUp() { temporary = TemporaryDirectory() }
  override func tearDown() { temporary = nil }

  private let secret = Array("the launch code is not here".utf8)
  private static let libsecret = "libsecret-1.so.0"
  private static let libcurl = "libcurl.so.4"

  /// The libraries the dynamic linker loaded into a run of `vault arguments` (LD_DEBUG=files names
  /// each file it opens, dlopen'ed ones included), with its result.
  private func loadedLibraries(_ arguments: [String]) throws -> (run: Spawned, files: String) {
    let run = try vault(arguments, environment: environment(["LD_DEBUG": "files"]))
    let opened = run.error.split(separator: "\n").filter { $0.contains("file=") }
    return (run, opened.joined(separator: "\n"))
  }

  func testCommandsThatNeedNeitherLoadNeitherAndTheBinaryDoesNotLinkThem() throws {
    let linked = try Spawn.run("/usr/bin/ldd", [vaultBinary()])
    XCTAssertEqual(linked.status, 0, linked.error)
    XCTAssertTrue(linked.outputText.contains("libsqlite3.so"), "the check reads ldd's list: \(linked.outputText)")
    for library in ["libcurl", "libsecret", "libglib-2.0", "libgio-2.0", "libgnutls", "libgcrypt"] {
      XCTAssertFalse(linked.outputText.contains(library), "\(library) is linked: \(linked.outputText)")
    }

    let home = temporary.sub("home")
    let keyfile = temporary.sub("keys/v.keys")
    let created = try loadedLibraries(["--home", home, "init", "--store", "keyfile", "--keyfile", keyfile])
    XCTAssertEqual(created.run.status, 0, created.run.error)
    let empty = temporary.sub("empty")
    try FileManager.default.createDirectory(atPath: empty, withIntermediateDirectories: true)
    for arguments in [
      ["scan", empty], ["--home", home, "rotate"], ["--home", home, "telemetry", "log", "tap"],
      ["--home", home, "queue", "stats"],
    ] {
      let (run, files) = try loadedLibraries(arguments)
      XCTAssertEqual(run.status, 0, "\(arguments): \(run.error.suffix(500))")
      XCTAssertTrue(files.contains("libsqlite3.so"), "LD_DEBUG lists what was loaded: \(arguments)")
      XCTAssertFalse(files.contains(Self.libcurl), "\(arguments) loaded libcurl")
      XCTAssertFalse(files.contains(Self.libsecret), "\(arguments) loaded libsecret")
    }
    // The init of a keyfile vault still asks the Secret Service for keys a lost manifest left
    // there, so it loads libsecret (on a machine without it, that check is skipped, below).
    XCTAssertTrue(created.files.contains(Self.libsecret), "init looks for orphaned keys")

    // What sends loads libcurl, when it sends.
    let (flush, files) = try loadedLibraries([
      "--home", home, "telemetry", "flush", "--endpoint", "http://127.0.0.1:9/v1/telemetry/batch",
    ])
    XCTAssertEqual(flush.status, 0, flush.error.suffix(500).description)
    XCTAssertTrue(files.contains(Self.libcurl), "a flush with events to send loads libcurl")
  }

  func testWithoutLibsecretTheSecretServiceFailsByKindAndNoKeyIsMade() throws {
    try XCTSkipUnless(TestKeyring.isAvailable, "no private Secret Service; run the tests via tools/test.sh")
    let home = temporary.sub("home")
    XCTAssertEqual(try vault(["--home", home, "init", "--store", "secret-service"]).status, 0)
    let sealed = try vault(["--home", home, "seal", "--context", "c"], input: secret)
    XCTAssertEqual(sealed.status, 0, sealed.error)
    let manifest = try Data(contentsOf: URL(fileURLWithPath: home + "/manifest.json"))
    let missing = "libsecret (\(Self.libsecret)) could not be loaded"

    let open = try withoutLibraries([Self.libsecret], ["--home", home, "open", "--context", "c"], input: sealed.output)
    XCTAssertEqual(open.status, 1, open.error)
    XCTAssertTrue(open.error.contains(missing), open.error)
    XCTAssertTrue(open.error.contains("file too short"), "the dynamic linker's reason: \(open.error)")
    XCTAssertTrue(open.output.isEmpty)
    let rotate = try withoutLibraries([Self.libsecret], ["--home", home, "rotate"])
    XCTAssertEqual(rotate.status, 1, rotate.error)
    XCTAssertTrue(rotate.error.contains(missing), rotate.error)
    XCTAssertEqual(
      try Data(contentsOf: URL(fileURLWithPath: home + "/manifest.json")), manifest, "nothing rotated, no key made")
    let doctor = try withoutLibraries([Self.libsecret], ["--home", home, "doctor", "--json"])
    XCTAssertEqual(doctor.status, 1, doctor.outputText)
    XCTAssertTrue(doctor.outputText.contains("\"detail\" : \"not usable: \(missing)"), doctor.outputText)

    // A new vault: asked for the Secret Service, init refuses; left to choose, it takes a keyfile
    // and says why.
    let other = temporary.sub("other")
    let refused = try withoutLibraries([Self.libsecret], ["--home", other, "init", "--store", "secret-service"])
    XCTAssertEqual(refused.status, 1, refused.error)
    XCTAssertTrue(refused.error.contains(missing), refused.error)
    XCTAssertFalse(FileManager.default.fileExists(atPath: other + "/manifest.json"))
    let auto = try withoutLibraries(
      [Self.libsecret], ["--home", other, "init", "--keyfile", temporary.sub("k/other.keys")])
    XCTAssertEqual(auto.status, 0, auto.error)
    XCTAssertTrue(auto.error.contains(missing), "auto says why it fell back: \(auto.error)")
    XCTAssertTrue(auto.error.contains("libsecret could not be loaded"), "the orphan check says it was skipped")

    // With the library back, the first vault's key opens what it sealed.
    let reopened = try vault(["--home", home, "open", "--context", "c"], input: sealed.output)
    XCTAssertEqual(reopened.status, 0, reopened.error)
    XCTAssertEqual(reopened.output, secret)
  }

  func testWithoutLibcurlNothingIsClaimedTheCommandSaysWhyAndDeliveryWorksOnceItIsBack() throws {
    let home = temporary.sub("home")
    let keyfile = temporary.sub("keys/v.keys")
    XCTAssertEqual(try vault(["--home", home, "init", "--store", "keyfile", "--keyfile", keyfile]).status, 0)
    XCTAssertEqual(try vault(["--home", home, "telemetry", "log", "tap"]).status, 0)
    let server = try TelemetryServer(directory: temporary.path, root: packageRoot())
    defer { server.stop() }
    let endpoint = server.endpoint.absoluteString
    let token = temporary.sub("token")
    try "test-token\n".write(toFile: token, atomically: true, encoding: .utf8)
    let flushArguments = [
      "--home", home, "telemetry", "flush", "--endpoint", endpoint, "--token-file", token, "--json",
    ]
    let missing = "libcurl (\(Self.libcurl)) could not be loaded"

    for action in ["flush", "watch"] {
      var arguments = flushArguments
      arguments[3] = action
      if action == "watch" { arguments.removeLast() }
      let refused = try withoutLibraries([Self.libcurl], arguments)
      XCTAssertEqual(refused.status, 1, "\(action): \(refused.error)")
      XCTAssertTrue(refused.error.contains(missing), refused.error)
      XCTAssertTrue(refused.error.contains("file too short"), "the dynamic linker's reason: \(refused.error)")
      XCTAssertTrue(refused.error.contains("nothing was claimed"), refused.error)
    }
    // The event was not touched: no attempt counted, no backoff, no error kind.
    let listed = try vault(["--home", home, "queue", "list", "--json"])
    XCTAssertTrue(listed.outputText.contains("\"attempts\" : 0"), listed.outputText)
    XCTAssertTrue(listed.outputText.contains("\"error_kind\" : null"), listed.outputText)
    XCTAssertTrue(listed.outputText.contains("\"state\" : \"pending\""), listed.outputText)
    XCTAssertEqual(server.received.count, 0)

    // doctor warns, and does not call a vault that only cannot send unhealthy.
    let doctor = try withoutLibraries([Self.libcurl], ["--home", home, "doctor", "--json"])
    XCTAssertEqual(doctor.status, 0, doctor.outputText)
    XCTAssertTrue(doctor.outputText.contains("\"detail\" : \"warning: \(missing)"), doctor.outputText)
    let healthy = try vault(["--home", home, "doctor", "--json"])
    XCTAssertTrue(healthy.outputText.contains("ok (libcurl loaded)"), healthy.outputText)

    // With libcurl there, the event goes at once.
    let sent = try vault(flushArguments)
    XCTAssertEqual(sent.status, 0, sent.error)
    XCTAssertTrue(sent.outputText.contains("\"delivered\" : 1"), sent.outputText)
    XCTAssertEqual(server.received.map(\.status), [200])

    // memo relay says so too, and keeps every memo.
    let memo = (vaultBinary() as NSString).deletingLastPathComponent + "/memo"
    XCTAssertEqual(try Spawn.run(memo, ["--home", home, "send", "hello"]).status, 0)
    let relay = try withoutLibraries([Self.libcurl], ["--home", home, "relay", "--endpoint", endpoint], binary: memo)
    XCTAssertEqual(relay.status, 1, relay.error)
    XCTAssertTrue(relay.error.contains(missing), relay.error)
    XCTAssertTrue(
      try vault(["--home", home, "queue", "list", "--queue", "memo", "--json"]).outputText.contains(
        "\"attempts\" : 0"))
  }

  /// Runs `binary arguments` (vault by default) in a private mount namespace where each of `sonames` is an empty file
  /// (bind-mounted over the library the dynamic linker would find), so dlopen fails as on a
  /// machine without it. Needs root, as the test command runs.
  private func withoutLibraries(
    _ sonames: [String], _ arguments: [String], input: [UInt8] = [], binary: String = vaultBinary()
  ) throws -> Spawned {
    let empty = temporary.sub("empty-library")
    if !FileManager.default.fileExists(atPath: empty) {
      XCTAssertTrue(FileManager.default.createFile(atPath: empty, contents: Data()))
    }
    let targets = try sonames.map { soname in
      let path = "/usr/lib/x86_64-linux-gnu/" + soname
      XCTAssertTrue(FileManager.default.fileExists(atPath: path), "\(path) is where Debian installs it")
      return try FileManager.default.destinationOfSymbolicLink(atPath: path).hasPrefix("/")
        ? FileManager.default.destinationOfSymbolicLink(atPath: path)
        : "/usr/lib/x86_64-linux-gnu/" + FileManager.default.destinationOfSymbolicLink(atPath: path)
    }
    let script = """
      empty=$1; count=$2; shift 2
      while [ "$count" -gt 0 ]; do mount --bind "$empty" "$1" || exit 99; shift; count=$((count - 1)); done
      exec "$@"
      """
    let run = try Spawn.run(
      "/usr/bin/unshare",
      ["-m", "/bin/sh", "-c", script, "sh", empty, String(targets.count)] + targets + [binary] + arguments,
      input: input)
    XCTAssertNotEqual(run.status, 99, "could not hide a library: \(run.error)")
    return run
  }
}
