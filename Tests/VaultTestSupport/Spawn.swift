import Foundation

/// Runs a program with posix_spawn and waits for it.
///
/// Foundation's `Process` detects a child's exit through a descriptor the child inherits; a child
/// that daemonizes (gnome-keyring-daemon --daemonize) passes it on to the daemon and
/// `waitUntilExit` never returns. Here only stdin, stdout and stderr are passed on.
public struct Spawned: Sendable {
  public let status: Int32
  public let output: [UInt8]
  public let error: String

  public var outputText: String { String(decoding: output, as: UTF8.self) }
}

// glibc (2.34+) declares this only under _GNU_SOURCE, which Swift's Glibc module does not set.
@_silgen_name("posix_spawn_file_actions_addclosefrom_np")
private func spawnCloseFrom(_ actions: UnsafeMutablePointer<posix_spawn_file_actions_t>, _ from: Int32) -> Int32

public enum Spawn {
  /// Runs `executable` with `arguments`, feeding `input` on stdin and collecting stdout and stderr.
  /// `environment` replaces the child's environment when given. The exit status is the child's
  /// exit code, or 128 + signal number when a signal ended it.
  @discardableResult
  public static func run(
    _ executable: String, _ arguments: [String], input: [UInt8] = [], environment: [String: String]? = nil
  ) throws -> Spawned {
    let child = try start(executable, arguments, environment: environment)
    return child.finish(input: input)
  }

  /// Starts a program without waiting; `finish` feeds its input and collects its result.
  /// - Parameters:
  ///   - blockedSignals: signals blocked in the child's initial mask (a mask survives exec, so a
  ///     parent can leave signals blocked); none by default.
  ///   - standardError: a descriptor to give the child as its stderr instead of a pipe that
  ///     `finish` drains (its result's `error` is then empty).
  /// The test process ignores SIGPIPE, so that writing a child's input after the child exited is
  /// EPIPE, which `finish` tolerates, and not the end of the whole test run: a CI run at 7bf171d
  /// died of signal 13 when `vault` refused a usage error before reading its one byte of input.
  /// Children start with every signal at its default (`POSIX_SPAWN_SETSIGDEF` below).
  private static let ignoreBrokenPipes: Void = { _ = signal(SIGPIPE, SIG_IGN) }()

  public static func start(
    _ executable: String, _ arguments: [String], environment: [String: String]? = nil,
    blockedSignals: [Int32] = [], standardError: Int32? = nil
  ) throws -> Child {
    _ = ignoreBrokenPipes
    let stdinPipe = Pipe()
    let stdoutPipe = Pipe()
    let stderrPipe = Pipe()
    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    defer { posix_spawn_file_actions_destroy(&actions) }
    posix_spawn_file_actions_adddup2(&actions, stdinPipe.fileHandleForReading.fileDescriptor, 0)
    posix_spawn_file_actions_adddup2(&actions, stdoutPipe.fileHandleForWriting.fileDescriptor, 1)
    posix_spawn_file_actions_adddup2(&actions, standardError ?? stderrPipe.fileHandleForWriting.fileDescriptor, 2)
    // Close every other inherited descriptor in the child (glibc 2.34 and later).
    _ = spawnCloseFrom(&actions, 3)

    // Threads in the test process may block signals; the child starts with only `blockedSignals` blocked.
    var attributes = posix_spawnattr_t()
    posix_spawnattr_init(&attributes)
    defer { posix_spawnattr_destroy(&attributes) }
    var mask = sigset_t()
    sigemptyset(&mask)
    for signal in blockedSignals { sigaddset(&mask, signal) }
    posix_spawnattr_setsigmask(&attributes, &mask)
    var defaults = sigset_t()
    sigfillset(&defaults)
    posix_spawnattr_setsigdefault(&attributes, &defaults)
    posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))

    let env = (environment ?? ProcessInfo.processInfo.environment).map { "\($0.key)=\($0.value)" }
    var pid: pid_t = 0
    let result = withCStrings([executable] + arguments) { argv in
      withCStrings(env) { envp in posix_spawn(&pid, executable, &actions, &attributes, argv, envp) }
    }
    guard result == 0 else { throw POSIXError(POSIXErrorCode(rawValue: result) ?? .EIO) }
    try stdinPipe.fileHandleForReading.close()
    try stdoutPipe.fileHandleForWriting.close()
    try stderrPipe.fileHandleForWriting.close()
    return Child(
      pid: pid, stdin: stdinPipe.fileHandleForWriting, stdout: stdoutPipe.fileHandleForReading,
      stderr: stderrPipe.fileHandleForReading)
  }

  private static func withCStrings<R>(_ strings: [String], _ body: ([UnsafeMutablePointer<CChar>?]) -> R) -> R {
    var pointers: [UnsafeMutablePointer<CChar>?] = strings.map { strdup($0) }
    pointers.append(nil)
    defer { for pointer in pointers { free(pointer) } }
    return body(pointers)
  }
}

/// A started child process.
public final class Child: @unchecked Sendable {
  public let pid: pid_t
  let stdin: FileHandle
  let stdout: FileHandle
  let stderr: FileHandle

  init(pid: pid_t, stdin: FileHandle, stdout: FileHandle, stderr: FileHandle) {
    self.pid = pid
    self.stdin = stdin
    self.stdout = stdout
    self.stderr = stderr
  }

  public func kill(_ signal: Int32) { _ = Glibc.kill(pid, signal) }

  /// Waits at most `seconds` for the child to end and reaps it: its status as in `Spawned`
  /// (128 + signal when a signal ended it), or nil if it is still running. After a status,
  /// `finish` still collects the output (its status is then meaningless).
  public func exitStatus(within seconds: Double) -> Int32? {
    let deadline = Date().addingTimeInterval(seconds)
    var status: Int32 = 0
    repeat {
      if waitpid(pid, &status, WNOHANG) == pid {
        return (status & 0x7f) == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
      }
      Thread.sleep(forTimeInterval: 0.05)
    } while Date() < deadline
    return nil
  }

  /// Writes `input`, closes stdin, drains both outputs concurrently (so no pipe fills), and waits.
  public func finish(input: [UInt8] = []) -> Spawned {
    let group = DispatchGroup()
    let collected = Collected()
    DispatchQueue.global().async(group: group) { [stdin] in
      // The throwing write: a child that exits before reading (one refused under ulimit -v, or a
      // usage error) makes this EPIPE (SIGPIPE is ignored: `ignoreBrokenPipes`), which the
      // non-throwing `write(_:)` turns into a trap of the test process.
      try? stdin.write(contentsOf: Data(input))
      try? stdin.close()
    }
    DispatchQueue.global().async(group: group) { [stdout] in collected.setOutput(stdout.readDataToEndOfFile()) }
    DispatchQueue.global().async(group: group) { [stderr] in collected.setError(stderr.readDataToEndOfFile()) }
    var status: Int32 = 0
    while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
    group.wait()
    let code = (status & 0x7f) == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
    return Spawned(
      status: code, output: [UInt8](collected.output), error: String(decoding: collected.error, as: UTF8.self))
  }
}

private final class Collected: @unchecked Sendable {
  private let lock = NSLock()
  private var outputData = Data()
  private var errorData = Data()
  func setOutput(_ data: Data) { lock.withLock { outputData = data } }
  func setError(_ data: Data) { lock.withLock { errorData = data } }
  var output: Data { lock.withLock { outputData } }
  var error: Data { lock.withLock { errorData } }
}
