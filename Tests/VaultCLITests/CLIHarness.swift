import Foundation
import VaultTestSupport
import XCTest

@testable import VaultCLI

/// Runs the CLI in-process with captured streams.
struct InProcessRun {
  let status: Int32
  let output: [UInt8]
  let error: String
  var outputText: String { String(decoding: output, as: UTF8.self) }
}

final class Capture: @unchecked Sendable {
  var output: [UInt8] = []
  var error = ""
}

func runInProcess(_ arguments: [String], input: [UInt8] = [], environment: [String: String] = [:]) -> InProcessRun {
  let capture = Capture()
  let terminal = Terminal(
    environment: environment, readInput: { _ in input }, writeOutput: { capture.output += $0 },
    writeError: { capture.error += $0 })
  let status = VaultCommandLine(terminal: terminal).run(arguments)
  return InProcessRun(status: status, output: capture.output, error: capture.error)
}

/// The built `vault` binary (tools/test.sh sets VAULT_BINARY; otherwise the debug build).
func vaultBinary() -> String {
  if let path = ProcessInfo.processInfo.environment["VAULT_BINARY"] { return path }
  return packageRoot() + "/.build/debug/vault"
}

/// Runs the real binary as a separate process.
@discardableResult
func vault(
  _ arguments: [String], input: [UInt8] = [], environment: [String: String]? = nil
) throws -> Spawned {
  try Spawn.run(vaultBinary(), arguments, input: input, environment: environment)
}

/// Makes a keyfile vault at `home` with `vault init`, failing the test unless it succeeded.
func initKeyfileVault(home: String, keyfile: String, file: StaticString = #filePath, line: UInt = #line) throws {
  let created = try vault(["--home", home, "init", "--store", "keyfile", "--keyfile", keyfile])
  XCTAssertEqual(created.status, 0, created.error, file: file, line: line)
}

/// Backs up the vault at `home` with `vault backup --json` into `bundles` under `temporary`, with a
/// passphrase file written there (0600), failing the test unless it succeeded.
/// - Returns: the bundle's path and the passphrase file's.
func backUp(
  _ home: String, in temporary: TemporaryDirectory, environment: [String: String]? = nil,
  file: StaticString = #filePath, line: UInt = #line
) throws -> (bundle: String, passphrase: String) {
  let passphrase = temporary.sub("passphrase")
  XCTAssertTrue(FileManager.default.createFile(atPath: passphrase, contents: Data("correct horse battery".utf8)))
  XCTAssertEqual(chmod(passphrase, 0o600), 0)
  XCTAssertEqual(mkdir(temporary.sub("bundles"), 0o700), 0)
  let backup = try vault(
    ["--home", home, "backup", "--to", temporary.sub("bundles"), "--passphrase-file", passphrase, "--json"],
    environment: environment)
  XCTAssertEqual(backup.status, 0, backup.error, file: file, line: line)
  let bundle = try XCTUnwrap(
    (try JSONSerialization.jsonObject(with: Data(backup.output)) as? [String: Any])?["bundle"] as? String,
    file: file, line: line)
  return (bundle, passphrase)
}

/// The current environment with changes (nil removes a variable).
func environment(_ changes: [String: String?]) -> [String: String] {
  var env = ProcessInfo.processInfo.environment
  for (key, value) in changes { env[key] = value }
  return env
}

/// strace, which the tests use to kill the binary at a chosen system call, make one fail or hold
/// it, and to see which calls it makes.
enum Strace {
  /// Where strace is; tools/setup.sh installs it.
  static func path() throws -> String {
    try XCTUnwrap(
      ["/usr/bin/strace", "/bin/strace"].first { FileManager.default.isExecutableFile(atPath: $0) },
      "strace is installed by tools/setup.sh")
  }

  /// The environment for a program strace runs: `environment` (this process's when nil), with
  /// LeakSanitizer off when AddressSanitizer's options are set (`tools/sanitize.sh address`).
  /// LeakSanitizer cannot work in a traced process: it stops it with a fatal error ("does not
  /// work under ptrace") at exit instead of checking for leaks. AddressSanitizer's other checks
  /// stay on, and the same commands run untraced elsewhere in the suite with LeakSanitizer.
  static func environment(_ environment: [String: String]?) -> [String: String]? {
    var result = environment ?? ProcessInfo.processInfo.environment
    guard let options = result["ASAN_OPTIONS"] else { return environment }
    result["ASAN_OPTIONS"] = options + ":detect_leaks=0"
    return result
  }
}

/// Runs the real binary with `arguments`, SIGKILLed by strace at its `step`th system call among
/// `calls` (a comma-separated strace set such as "fsync,fdatasync"): its status is 128 + SIGKILL
/// when the kill came, the command's own once it finished before its `step`th such call. strace
/// is installed by tools/setup.sh.
func vaultKilled(
  at calls: String, step: Int, _ arguments: [String], input: [UInt8] = [], environment: [String: String]? = nil
) throws -> Spawned {
  let strace = try Strace.path()
  return try Spawn.run(
    strace, ["-f", "-o", "/dev/null", "-e", "inject=\(calls):signal=KILL:when=\(step)", vaultBinary()] + arguments,
    input: input, environment: Strace.environment(environment))
}

/// Runs the real binary with `arguments` while strace makes the system calls in `calls` (a
/// comma-separated strace set such as "unlink,unlinkat") fail with `error` (an errno name such as
/// "EIO") at the invocations `when` selects (strace's syntax: "3" the third, "1+" every one).
/// `also` adds more injections in strace's syntax ("openat:error=EOPNOTSUPP:when=12").
func vaultFailing(
  _ calls: String, with error: String, when: String, also: [String] = [], _ arguments: [String],
  input: [UInt8] = [], environment: [String: String]? = nil
) throws -> Spawned {
  let strace = try Strace.path()
  let injections = (["\(calls):error=\(error):when=\(when)"] + also).flatMap { ["-e", "inject=" + $0] }
  return try Spawn.run(
    strace, ["-f", "-o", "/dev/null"] + injections + [vaultBinary()] + arguments, input: input,
    environment: Strace.environment(environment))
}

/// Which `openat` of its thread the binary's first call matching `marker` (as strace prints it,
/// such as "O_TMPFILE") is, in a run of `arguments` traced by strace; nil when none matched. strace
/// counts an injection's `when` per thread, so this is what makes that call, and only it, fail.
func openatIndex(matching marker: String, _ arguments: [String], input: [UInt8] = []) throws -> Int? {
  let strace = try Strace.path()
  let log = NSTemporaryDirectory() + "/openat-\(UUID().uuidString).log"
  defer { unlink(log) }
  _ = try Spawn.run(
    strace, ["-f", "-o", log, "-e", "trace=openat", vaultBinary()] + arguments, input: input,
    environment: Strace.environment(nil))
  let lines = try String(contentsOfFile: log, encoding: .utf8).split(separator: "\n")
  guard let hit = lines.first(where: { $0.contains("openat(") && $0.contains(marker) }) else { return nil }
  let thread = hit.prefix { $0 != " " }
  let ofThread = lines.filter { $0.hasPrefix(thread + " ") && $0.contains("openat(") }
  return ofThread.firstIndex(of: hit).map { $0 + 1 }
}
