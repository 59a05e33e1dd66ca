// C boundary: prctl, setrlimit, sigaction and the standard descriptors, through CProcessHardening.
internal import CProcessHardening
import Glibc
import Synchronization

/// Process-wide protections for a process that holds keys and plaintext: call `apply()` first
/// thing in `main`, before any key is loaded. `vault` and `memo` do.
///
/// What it does, and why:
/// - **No core dumps.** `prctl(PR_SET_DUMPABLE, 0)` and RLIMIT_CORE 0 (soft and hard, as
///   OpenSSH's ssh-agent does): a crash writes no core file and systemd-coredump stores nothing.
///   It also stops other processes of the same user from attaching with ptrace or reading
///   /proc/PID/mem (root still can).
/// - **No crash reports.** Swift's runtime (5.9 and later) catches fatal signals and runs
///   swift-backtrace, which prints every register of the crashed thread and 16 bytes of memory
///   at each, to stderr (and so to the journal under systemd); a key or plaintext in a register
///   is printed. `apply()` replaces those handlers (SIGQUIT, SIGABRT, SIGBUS, SIGFPE, SIGILL,
///   SIGSEGV, SIGTRAP) with one that writes a fixed line naming the program and the signal, reads
///   nothing else, and lets the process die by that same signal (so exit statuses and service
///   managers see the crash as before).
/// - **A file-size limit is an error, not a death.** Under `ulimit -f` a write past the limit
///   raises SIGXFSZ, whose default action kills the process without a word (exit 153). It is
///   ignored, so the write fails with EFBIG and takes the caller's error path. (An ignored signal
///   stays ignored across exec: a child started from here inherits it.)
/// - **Standard descriptors held open.** If descriptor 0, 1 or 2 is closed at start, the next
///   file opened (a database, the keyfile) would take its number, and output meant for stdout
///   would be written into it. They are pointed at /dev/null and reported in
///   `closedStandardStreams`, so a command line can still refuse to use them.
///
/// What it cannot do: the Swift runtime prints its own "Fatal error: …" line before trapping,
/// which for `try!` includes the error's description (vault's errors never hold secrets; an
/// app's own errors are its business). A debugger attached by root, and the kernel, still see
/// everything. Key buffers are also kept out of dumps and swap individually (`SecureBytes`).
public enum ProcessHardening {
  /// What `apply()` achieved; each step is independent and best effort.
  public struct Report: Sendable, Equatable {
    /// The process is marked non-dumpable.
    public var nonDumpable: Bool
    /// RLIMIT_CORE is 0.
    public var coreDumpsDisabled: Bool
    /// Fatal signals go to the fixed-message handler, not to the runtime's backtracer.
    public var crashReportsSuppressed: Bool
    /// Standard descriptors (0, 1, 2) that were closed at start and now hold /dev/null.
    public var closedStandardStreams: [Int32]
    /// SIGXFSZ is ignored: a write past `ulimit -f` fails with EFBIG.
    public var fileSizeSignalIgnored: Bool
  }

  private static let closedMask = Atomic<Int32>(0)

  /// Applies every protection above; safe to call more than once. Never throws and never exits:
  /// a step the platform refuses is reported as `false`, the others still apply.
  ///
  /// - Returns: which protections are in force, and which standard descriptors were closed.
  @discardableResult
  public static func apply() -> Report {
    let closed = reserveStandardDescriptors()
    if !closed.isEmpty {
      closedMask.bitwiseOr(closed.reduce(0) { $0 | (1 << $1) }, ordering: .relaxed)
    }
    var noCore = rlimit(rlim_cur: 0, rlim_max: 0)
    let coreDisabled = setrlimit(Int32(RLIMIT_CORE.rawValue), &noCore) == 0
    let nonDumpable = vault_set_nondumpable() == 0 && vault_get_dumpable() == 0
    let handlers = vault_install_fatal_signal_handlers() == 0
    let fileSize = vault_ignore_file_size_signal() == 0
    return Report(
      nonDumpable: nonDumpable, coreDumpsDisabled: coreDisabled, crashReportsSuppressed: handlers,
      closedStandardStreams: closedStandardStreams, fileSizeSignalIgnored: fileSize)
  }

  /// The standard descriptors `apply()` found closed (ascending); empty before it runs.
  public static var closedStandardStreams: [Int32] {
    let mask = closedMask.load(ordering: .relaxed)
    return (0...2).filter { mask & (1 << $0) != 0 }
  }

  /// Whether fatal signals currently reach the fixed-message handler (another library may have
  /// installed its own since).
  public static var isApplied: Bool {
    vault_get_dumpable() == 0
      && [SIGSEGV, SIGILL, SIGABRT].allSatisfy { vault_fatal_signal_handler_installed($0) != 0 }
  }

  /// Points each closed standard descriptor at /dev/null; returns the ones that were closed.
  private static func reserveStandardDescriptors() -> [Int32] {
    var closed: [Int32] = []
    for fd in Int32(0)...2 where fcntl(fd, F_GETFD) == -1 && errno == EBADF {
      // Lower descriptors are open (or were just reserved), so open() returns `fd` itself.
      let null = open("/dev/null", O_RDWR)
      if null >= 0, null != fd {
        _ = dup2(null, fd)
        _ = close(null)
      }
      closed.append(fd)
    }
    return closed
  }
}
