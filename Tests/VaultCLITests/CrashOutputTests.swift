import Foundation
import VaultTestSupport
import XCTest

/// A crash never prints key material or plaintext and never leaves a core file (issue 8, item 14).
///
/// Swift's runtime (5.9 and later, on by default on Linux) catches fatal signals and runs
/// swift-backtrace, which prints every register of the crashed thread in hex and decimal together
/// with 16 bytes of the memory each one points at. tools/crash/vault-trap-worker holds a known key
/// and plaintext, puts them in registers and traps; these tests read what reaches stderr.
final class CrashOutputTests: XCTestCase {
  var temporary: TemporaryDirectory!
  private let key: [UInt8] = (0..<32).map { UInt8(0xa0 + $0) }
  private let plaintext = Array("canary-crash-7f3e the north gate at 06:40, bring the ledger".utf8)

  override func setUp() { temporary = TemporaryDirectory() }
  override func tearDown() { temporary = nil }

  private var worker: String { (vaultBinary() as NSString).deletingLastPathComponent + "/vault-trap-worker" }

  /// Every form a secret could take in a crash report: text, hex of each 8-byte word in both byte
  /// orders (registers print as little-endian integers), and base64.
  private func leaks(in text: String) -> [String] {
    var forms: [String] = []
    let plainText = String(decoding: plaintext, as: UTF8.self)
    for start in stride(from: 0, to: plaintext.count - 8, by: 4) {
      forms.append(String(plainText.dropFirst(start).prefix(8)))
    }
    for secret in [key, plaintext] {
      for start in stride(from: 0, through: secret.count - 8, by: 1) {
        let word = Array(secret[start..<(start + 8)])
        forms.append(word.map { String(format: "%02x", $0) }.joined())
        forms.append(word.reversed().map { String(format: "%02x", $0) }.joined())
        forms.append(word.map { String(format: "%02x", $0) }.joined(separator: " "))
      }
      forms.append(String(Data(secret).base64EncodedString().prefix(16)))
    }
    let lowered = text.lowercased()
    return forms.filter { lowered.contains($0.lowercased()) }
  }

  /// Runs the worker in a fresh directory with core dumps allowed (`ulimit -c unlimited`) and the
  /// runtime's backtracer as it is by default (SWIFT_BACKTRACE unset).
  private func crash(_ mode: String, harden: Bool) throws -> (run: Spawned, cores: [String]) {
    let directory = temporary.sub("\(mode)-\(harden)")
    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    let run = try Spawn.run(
      "/bin/sh", ["-c", "ulimit -c unlimited; cd \"$DIR\" && exec \"$WORKER\" \"$MODE\" $HARDEN"],
      input: key + plaintext,
      environment: environment([
        "DIR": directory, "WORKER": worker, "MODE": mode, "HARDEN": harden ? "--harden" : "",
        "SWIFT_BACKTRACE": nil,
      ]))
    let cores = try FileManager.default.contentsOfDirectory(atPath: directory).filter { $0.hasPrefix("core") }
    return (run, cores)
  }

  /// Cores go to a file in the working directory here (core_pattern "core"); a pipe to a crash
  /// collector cannot be observed from a test.
  private var coresLandInTheWorkingDirectory: Bool {
    let pattern = (try? String(contentsOfFile: "/proc/sys/kernel/core_pattern", encoding: .utf8)) ?? ""
    return pattern.hasPrefix("core")
  }

  /// The threat, shown: without hardening, the default backtracer prints the plaintext and a core
  /// file holds everything. (If this ever stops leaking, the test below proves less; look again.)
  func testWithoutHardeningTheRuntimeBacktracerPrintsTheSecret() throws {
    // The runtime's crash handler starts swift-backtrace with clone(2) from the signal handler;
    // under ThreadSanitizer the child dies in TSan's fork hook (CHECK failed: tsan_rtl.cpp:261),
    // and swift-backtrace, left waiting for it, keeps the worker's stderr open for ever. Under
    // AddressSanitizer the backtrace comes, but none of the secret is in what it prints (seen in
    // a whole-suite run), so the leak this test shows is not there to see.
    try XCTSkipIf(Sanitizer.current != nil, "a sanitizer changes what the runtime's crash handler prints")
    let (run, cores) = try crash("overflow", harden: false)
    XCTAssertEqual(run.status, 128 + SIGILL, run.error)
    XCTAssertTrue(run.error.contains("Registers:"), run.error)
    XCTAssertFalse(leaks(in: run.error).isEmpty, "the detector sees the leak: \(run.error)")
    if coresLandInTheWorkingDirectory { XCTAssertFalse(cores.isEmpty, "a core file was written") }
  }

  func testHardenedCrashesPrintNoSecretAndWriteNoCore() throws {
    let signals: [String: Int32] = ["overflow": SIGILL, "unwrap": SIGILL, "abort": SIGABRT, "segv": SIGSEGV]
    for (mode, signal) in signals.sorted(by: { $0.key < $1.key }) {
      let (run, cores) = try crash(mode, harden: true)
      XCTAssertEqual(run.status, 128 + signal, "\(mode) dies by its signal: \(run.error)")
      XCTAssertEqual(leaks(in: run.error), [], "\(mode): \(run.error)")
      XCTAssertFalse(run.error.contains("Registers"), "\(mode): \(run.error)")
      XCTAssertFalse(run.error.contains("Backtracing"), "\(mode): \(run.error)")
      XCTAssertTrue(run.error.contains("crash report suppressed"), "\(mode): \(run.error)")
      XCTAssertEqual(cores, [], "\(mode): no core file")
      XCTAssertTrue(run.output.isEmpty)
    }
    // The runtime's own message for a failed force-unwrap is fixed text; nothing of ours.
    let unwrap = try crash("unwrap", harden: true).run
    XCTAssertTrue(unwrap.error.contains("Unexpectedly found nil while unwrapping an Optional value"), unwrap.error)
  }

  /// `vault` and `memo` harden themselves first thing: a fatal signal while they wait for a record
  /// on stdin prints the fixed message only and leaves no core.
  func testVaultAndMemoSuppressCrashReportsAndCores() throws {
    // ThreadSanitizer intercepts signals and runs the handlers itself: in the whole-suite run at
    // 1d1232f the `vault` sent SIGSEGV died of TSan's own check (tsan_interceptors_posix.cpp:2184,
    // "thr->slot", a known class of TSan runtime failure in signal handling) and the `memo` after
    // it waited in a futex inside TSan for over 30 minutes, so the suite never ended. What this
    // proves is the handler as built, which TSan replaces.
    try XCTSkipIf(Sanitizer.current == .thread, "ThreadSanitizer replaces the fatal-signal handling under test")
    let home = temporary.sub("home")
    try initKeyfileVault(home: home, keyfile: temporary.sub("keys/v.keys"))
    let memo = (vaultBinary() as NSString).deletingLastPathComponent + "/memo"
    for (name, arguments) in [("vault", [vaultBinary(), "seal", "--context", "c"]), ("memo", [memo, "send"])] {
      for signal in [SIGSEGV, SIGQUIT] {
        let directory = temporary.sub("\(name)-\(signal)")
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let child = try Spawn.start(
          "/bin/sh", ["-c", "ulimit -c unlimited; cd \"$DIR\" && exec \"$@\"", "sh"] + arguments,
          environment: environment(["DIR": directory, "VAULT_HOME": home, "SWIFT_BACKTRACE": nil]))
        // Hardening is done once SIGPIPE is ignored (main's next step); then it blocks reading stdin.
        try waitUntilIgnoring(SIGPIPE, pid: child.pid)
        child.kill(signal)
        let run = child.finish(input: [])
        XCTAssertEqual(run.status, 128 + signal, "\(name): \(run.error)")
        XCTAssertFalse(run.error.contains("Registers"), "\(name): \(run.error)")
        XCTAssertTrue(run.error.contains("crash report suppressed"), "\(name): \(run.error)")
        XCTAssertEqual(
          try FileManager.default.contentsOfDirectory(atPath: directory).filter { $0.hasPrefix("core") }, [],
          "\(name): no core file")
      }
    }
  }

  /// A crashed process whose stderr blocks (a full pipe nobody reads) cannot write its line; the
  /// handler's alarm(5) ends it by SIGALRM, even when the parent left SIGALRM blocked (a signal
  /// mask survives exec). It used to hang forever then.
  func testCrashWithBlockedStandardErrorEndsEvenWhenSIGALRMWasBlocked() throws {
    // ThreadSanitizer intercepts signals and their handlers: in the whole-suite run at 29466e8
    // the crashed `vault` died of TSan's own check (tsan_interceptors_posix.cpp:2184, "thr->slot")
    // instead of running the handler under test, and the test waited its 20 s (it had passed at
    // 402f208: the failure depends on timing). What it proves is the handler as built, which TSan
    // replaces.
    try XCTSkipIf(Sanitizer.current == .thread, "ThreadSanitizer replaces the fatal-signal handling under test")
    let home = temporary.sub("home")
    try initKeyfileVault(home: home, keyfile: temporary.sub("keys/v.keys"))
    for blocked in [[SIGALRM], []] {
      var full: [Int32] = [0, 0]
      XCTAssertEqual(pipe(&full), 0)
      defer {
        close(full[0])
        close(full[1])
      }
      let flags = fcntl(full[1], F_GETFL)
      _ = fcntl(full[1], F_SETFL, flags | O_NONBLOCK)
      let page = [UInt8](repeating: 0x78, count: 4096)
      while page.withUnsafeBytes({ write(full[1], $0.baseAddress, $0.count) }) > 0 {}
      _ = fcntl(full[1], F_SETFL, flags)
      let child = try Spawn.start(
        vaultBinary(), ["seal", "--context", "c"],
        environment: environment(["VAULT_HOME": home, "SWIFT_BACKTRACE": nil]), blockedSignals: blocked,
        standardError: full[1])
      try waitUntilIgnoring(SIGPIPE, pid: child.pid)
      child.kill(SIGSEGV)
      let status = child.exitStatus(within: 20)
      if status == nil { child.kill(SIGKILL) }
      _ = child.finish()
      XCTAssertEqual(status, 128 + SIGALRM, "blocked \(blocked): ended by SIGALRM after 5 s, not hung")
    }
  }

  private func waitUntilIgnoring(_ signal: Int32, pid: pid_t) throws {
    let deadline = Date().addingTimeInterval(20)
    while Date() < deadline {
      let status = (try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)) ?? ""
      if let line = status.split(separator: "\n").first(where: { $0.hasPrefix("SigIgn:") }),
        let mask = UInt64(line.dropFirst("SigIgn:".count).trimmingCharacters(in: .whitespaces), radix: 16),
        mask & (1 << UInt64(signal - 1)) != 0
      {
        return
      }
      Thread.sleep(forTimeInterval: 0.02)
    }
    XCTFail("process \(pid) never ignored signal \(signal)")
  }
}
