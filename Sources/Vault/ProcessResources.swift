// C boundary: getrlimit/setrlimit, /proc/self/fd and pthread_create, to check resource limits at start.
import Glibc

/// Checks at start that the process can get what the libraries under vault assume it can, so a
/// tight `ulimit` gives one clear error instead of a trap or a hang later.
///
/// Measured here (Swift 6.3, Debian 12): with few file descriptors libdispatch traps creating its
/// epoll instance and GLib aborts creating D-Bus wake-up pipes; when a thread cannot be created
/// (`ulimit -v`, `ulimit -u`, a cgroup's pids limit) libdispatch retries `pthread_create` once a
/// second forever, so `DispatchQueue.async` never returns. Neither can be caught afterwards.
public enum ProcessResources {
  /// What is short, with the limit that makes it so.
  public enum Shortage: Error, Equatable, CustomStringConvertible {
    /// RLIMIT_NOFILE leaves fewer free descriptors than the process needs, and its hard limit
    /// forbids raising it. `alreadyOpen` counts the descriptors other than 0, 1 and 2 that were
    /// open at the check (inherited from the parent, usually); each takes one from the limit.
    case openFiles(limit: Int, needed: Int, alreadyOpen: Int)
    /// A thread could not be created (`errno`); the address-space and process limits, if any.
    case threads(errno: Int32, addressSpaceLimit: UInt64?, processLimit: UInt64?)

    /// A sentence for a person naming the limit, its value, and how to raise it.
    public var description: String {
      switch self {
      case .openFiles(let limit, let needed, 0):
        return "the open-file limit is \(limit) (ulimit -n); at least \(needed) are needed (libdispatch, "
          + "D-Bus and SQLite abort when they cannot open one); raise it (ulimit -n 1024) and run again"
      case .openFiles(let limit, let needed, let open):
        return "the open-file limit is \(limit) (ulimit -n) and \(open) descriptors besides stdin, stdout and "
          + "stderr are already open; \(needed + open) are needed: \(needed) (libdispatch, D-Bus and SQLite abort "
          + "when they cannot open one) plus one for each of those; raise the limit (ulimit -n 1024), or close "
          + "the descriptors the parent leaves open, and run again"
      case .threads(let code, let addressSpace, let processes):
        let reason = String(cString: strerror(code))
        if let addressSpace {
          return "cannot start a thread (\(reason)) under the address-space limit of \(addressSpace / 1_048_576) MiB "
            + "(ulimit -v); raise it (ulimit -v unlimited, or at least 512 MiB more) and run again"
        }
        if let processes {
          return "cannot start a thread (\(reason)) under the limit of \(processes) processes (ulimit -u); "
            + "raise it and run again"
        }
        return "cannot start a thread (\(reason)): the system refused it (memory, or a cgroup's pids limit)"
      }
    }
  }

  /// Raises the soft open-file limit to `target`, or as far towards it as the hard limit allows
  /// (never lowers it).
  ///
  /// - Parameter target: the number of descriptors wanted (a negative one asks for nothing).
  /// - Returns: the soft limit now, which is below `target` when the hard limit is; 0 when the
  ///   limit cannot be read.
  @discardableResult
  public static func raiseOpenFileLimit(to target: Int) -> Int {
    var files = rlimit()
    guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &files) == 0 else { return 0 }
    // `rlim_t(-1)` traps (an outside review): a negative target needs no raise.
    let wanted = rlim_t(clamping: max(target, 0))
    if files.rlim_cur < wanted {
      var raised = files
      raised.rlim_cur = min(files.rlim_max, wanted)
      if setrlimit(Int32(RLIMIT_NOFILE.rawValue), &raised) == 0 { files = raised }
    }
    return Int(clamping: files.rlim_cur)
  }

  /// Makes sure `openFiles` descriptors can be had, counting 0, 1 and 2 among them (so a process
  /// with only those open needs a limit of `openFiles`, and each other descriptor already open,
  /// typically inherited, one more), raising the soft open-file limit as far as the hard limit
  /// allows; then checks that `threads` threads can run at once, as libdispatch's pool, GLib's
  /// D-Bus worker and URLSession's thread need.
  ///
  /// - Parameters:
  ///   - needed: descriptors the process needs, counting 0, 1 and 2.
  ///   - threads: threads that must be able to exist at once.
  /// - Throws: `Shortage.openFiles` when the hard limit is too low, `Shortage.threads` when a
  ///   thread cannot be created.
  public static func ensure(openFiles needed: Int = 64, threads: Int = 8) throws(Shortage) {
    // A negative count needs nothing (`rlim_t` of one trapped: an outside review).
    let needed = max(needed, 0)
    var files = rlimit()
    if getrlimit(Int32(RLIMIT_NOFILE.rawValue), &files) == 0 {
      // Only descriptors below the limit take a slot; one at or above it (opened before the
      // limit was lowered) does not, but it would if the limit were raised past it.
      let others = openDescriptors(below: Int(clamping: max(files.rlim_max, files.rlim_cur))).filter { $0 > 2 }
      func taken(below limit: Int) -> Int { others.count { $0 < limit } }
      // The smallest limit with `needed` slots for the standard three and everything new.
      var wanted = needed
      while needed + taken(below: wanted) > wanted { wanted = needed + taken(below: wanted) }
      if files.rlim_cur < rlim_t(clamping: wanted) {
        let limit = raiseOpenFileLimit(to: wanted)
        guard limit >= wanted else {
          throw .openFiles(limit: limit, needed: needed, alreadyOpen: taken(below: limit))
        }
      }
    }
    // Threads that end at once but are joined only after all have started, so that `threads`
    // stacks exist at the same time (glibc keeps them cached for the threads that follow).
    var started: [pthread_t] = []
    var failure: Int32 = 0
    for _ in 0..<max(threads, 0) {
      var thread = pthread_t()
      let result = pthread_create(&thread, nil, { _ in nil }, nil)
      guard result == 0 else {
        failure = result
        break
      }
      started.append(thread)
    }
    for thread in started { pthread_join(thread, nil) }
    guard failure == 0 else { throw threadShortage(errno: failure) }
  }

  /// ``Shortage/threads(errno:addressSpaceLimit:processLimit:)`` for a thread that could not be
  /// created just now (`errno`, from `pthread_create`), with the limits in force.
  package static func threadShortage(errno: Int32) -> Shortage {
    .threads(errno: errno, addressSpaceLimit: finiteLimit(RLIMIT_AS), processLimit: finiteLimit(__RLIMIT_NPROC))
  }

  /// A note for storage errors when a file-size limit (`ulimit -f`) is in force, else "". With
  /// SIGXFSZ ignored (`ProcessHardening`) a write past the limit fails with EFBIG, which SQLite
  /// reports as a plain "disk I/O error"; the note names the likelier cause.
  package static var fileSizeNote: String {
    guard let limit = finiteLimit(RLIMIT_FSIZE) else { return "" }
    return "; the file-size limit is \(limit) bytes (ulimit -f), and writing past it fails (File too large): "
      + "raise it (ulimit -f unlimited) and retry"
  }

  /// The open descriptors numbered below `limit`, from /proc/self/fd (less the one reading it);
  /// without /proc, by asking fcntl about each number up to 65536.
  private static func openDescriptors(below limit: Int) -> [Int32] {
    if let directory = opendir("/proc/self/fd") {
      defer { closedir(directory) }
      let own = dirfd(directory)
      var found: [Int32] = []
      while let entry = readdir(directory) {
        let name = String(decoding: directoryEntryName(entry), as: UTF8.self)
        if let fd = Int32(name), fd != own, fd < limit { found.append(fd) }
      }
      return found
    }
    return (0..<Int32(clamping: min(limit, 65536))).filter { fcntl($0, F_GETFD) != -1 }
  }

  private static func finiteLimit(_ resource: __rlimit_resource) -> UInt64? {
    var limit = rlimit()
    // RLIM_INFINITY is all ones (the macro does not import).
    guard getrlimit(Int32(resource.rawValue), &limit) == 0, limit.rlim_cur != rlim_t.max else { return nil }
    return UInt64(limit.rlim_cur)
  }
}

extension ProcessResources.Shortage: CodedError {
  /// `resources.` and the case, in kebab case: stable across releases.
  public var code: String {
    switch self {
    case .openFiles: "resources.open-files"
    case .threads: "resources.threads"
    }
  }
}
