import Foundation

/// Memory one scanning thread reuses from file to file: the buffer each chunk is read into (4 MiB
/// and the overlap), allocated once instead of an array per chunk.
final class ScanScratch {
  private var storage: UnsafeMutableRawBufferPointer

  init(count: Int = 0) {
    storage = .allocate(byteCount: max(count, 1), alignment: 16)
  }

  /// A buffer of at least `count` bytes (its contents are whatever the last read left there).
  func buffer(_ count: Int) -> UnsafeMutableRawBufferPointer {
    if storage.count < count {
      storage.deallocate()
      storage = .allocate(byteCount: count, alignment: 16)
    }
    return UnsafeMutableRawBufferPointer(rebasing: storage[0..<count])
  }

  deinit { storage.deallocate() }
}

/// A regular file the walk opened and checked, to be read by the detectors.
struct OpenedFile {
  let fd: Int32
  /// The directory it was opened in (or `AT_FDCWD`): where its `-wal` and `-shm` files are looked for.
  let directory: Int32
  let name: [UInt8]
  let shown: String
  let size: Int
}

/// Scans the files one walk opens on two worker threads, and puts together the report in walk
/// order, exactly as one thread reading them one after the other would: each file's detector
/// findings are collected apart, then, on the calling thread and in walk order, its container
/// audit runs (`--verify` opens envelopes on one thread only), its per-file limits apply, and it
/// joins the report after what the walk noted before it (skipped and unreadable paths).
///
/// Memory stays bounded: at most two files are read at once, each by its thread's one chunk
/// buffer (4 MiB and the overlap) and that file's decoders (`InflateAllowance`), and at most
/// `window` files (2 to 16, fewer under a low open-file limit) are open and waiting to be put in
/// the report; each holds its descriptor, one for its directory, and its findings (at most 100
/// per detector, `ScanReport.findingsPerDetectorPerFile`). The walk waits when the window is full.
/// A scan of a single file starts no thread.
final class FilePipeline: @unchecked Sendable {
  // Everything below is guarded by `condition`, except `scanner` (read-only: its patterns, searcher
  // and budget are all a worker uses) and `report` (the calling thread's alone).
  private let condition = NSCondition()
  private let scanner: Scanner
  private let window: Int
  static let workers = 2
  private static let sidecarSuffixes = ["-wal", "-shm", "-journal"].map { Array($0.utf8) }

  /// A file handed to the workers, and what they found in it.
  private final class Job {
    let file: OpenedFile
    var result: ScanReport?
    var kind = FileKind.other
    var bytesDone = 0

    init(_ file: OpenedFile) { self.file = file }
  }

  /// What the report takes next, in walk order: what the walk noted, or a file.
  private enum Slot {
    case walk(ScanReport)
    case file(Job)
  }

  private var slots: [Slot] = []
  private var front = 0
  private var waiting: [Job] = []
  private var openJobs = 0
  private var started = 0
  private var stopping = false
  private var live = 0
  private var filesStarted = 0
  private var bytesDone = 0
  private var report: ScanReport

  init(scanner: Scanner) {
    self.scanner = scanner
    var limit = rlimit()
    let soft = getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 ? Int(clamping: limit.rlim_cur) : 64
    // Two descriptors per waiting file: within the spare half the walk leaves (`Scanner.depthLimit`).
    window = max(2, min(16, soft / 8))
    report = ScanReport()
    if scanner.vault != nil { report.verify = VerifyReport() }
  }

  /// Opens the regular file `name` in `directory` (as `Scanner.openFile` does) and queues it
  /// behind what the walk noted so far (`segment`, emptied). Waits while `window` files are open.
  /// - Throws: what `Scanner.completeFile` throws for a file put in the report meanwhile.
  func submit(in directory: Int32, name: [UInt8], shown: String, segment: inout ScanReport) throws {
    // A database's container audit reads it through SQLite, which may write its -shm file (the
    // WAL index): a -wal, -shm or -journal file is read only once every file before it is in the
    // report, audits included, as one thread reading them in turn would (its name sorts right
    // after the database's, so little is lost).
    if Self.sidecarSuffixes.contains(where: { name.count > $0.count && name.suffix($0.count).elementsEqual($0) }) {
      try drain()
    }
    guard let file = scanner.openFile(in: directory, name: name, shown: shown, report: &segment) else { return }
    // The workers read the file after the walk has moved on and closed its directory: the job
    // keeps its own descriptor of it. Without one, the file is read here, in order, at once.
    let own = directory == AT_FDCWD ? AT_FDCWD : fcntl(directory, F_DUPFD_CLOEXEC, 0)
    guard own >= 0 else {
      try drain()
      report.append(segment)
      segment = ScanReport()
      try read(file, into: &report)
      Glibc.close(file.fd)
      return
    }
    let job = Job(OpenedFile(fd: file.fd, directory: own, name: file.name, shown: file.shown, size: file.size))
    condition.lock()
    if !segment.isEmpty { slots.append(.walk(segment)) }
    segment = ScanReport()
    slots.append(.file(job))
    waiting.append(job)
    openJobs += 1
    // Threads start with the second file: a scan of one file (the fuzz target's) starts none.
    if started == 0 && openJobs >= 2 { startWorkers() }
    condition.broadcast()
    condition.unlock()
    try merge(waitingAbove: window - 1)
  }

  /// Waits for every file, adds what the walk noted after the last one (`segment`), and returns the
  /// report in walk order (findings not yet sorted).
  /// - Throws: what `Scanner.completeFile` throws.
  func finish(segment: ScanReport) throws -> ScanReport {
    try drain()
    report.append(segment)
    return report
  }

  /// Puts every queued file in the report: read on this thread if no worker was started.
  private func drain() throws {
    condition.lock()
    let unstarted = started == 0
    condition.unlock()
    if unstarted {
      // At most one file is queued when no thread was started.
      condition.lock()
      let jobs = waiting
      waiting = []
      condition.unlock()
      for job in jobs {
        var part = ScanReport()
        let (files, bytes) = (report.filesScanned + 1, report.bytesScanned)
        job.kind = scanner.readDetectors(job.file, scratch: inlineScratch, report: &part) { done in
          scanner.progress?(files, bytes + done)
        }
        condition.lock()
        job.result = part
        condition.unlock()
      }
    }
    try merge(waitingAbove: 0)
  }

  private lazy var inlineScratch = ScanScratch()

  /// Puts finished files at the front into the report, in order, then waits until at most `limit`
  /// files are open, calling the scanner's progress about four times a second while it waits.
  private func merge(waitingAbove limit: Int) throws {
    while true {
      condition.lock()
      var ready: [Slot] = []
      while front < slots.count {
        if case .file(let job) = slots[front], job.result == nil { break }
        ready.append(slots[front])
        front += 1
      }
      if front == slots.count {
        slots = []
        front = 0
      }
      let blocked = ready.isEmpty && openJobs > limit
      if blocked { _ = condition.wait(until: Date(timeIntervalSinceNow: 0.25)) }
      let (files, bytes) = (filesStarted, bytesDone)
      condition.unlock()
      for (index, slot) in ready.enumerated() {
        switch slot {
        case .walk(let segment): report.append(segment)
        case .file(let job):
          do {
            try complete(job)
          } catch {
            // The files taken off the queue with it are not read further: their descriptors close.
            for case .file(let rest) in ready[(index + 1)...] { Self.close(rest.file) }
            throw error
          }
        }
      }
      if started > 0 { scanner.progress?(files, bytes) }
      if ready.isEmpty && !blocked { return }
    }
  }

  /// The rest of a file, on this thread and in walk order: its container audit and limits, then
  /// its place in the report. Its descriptors are closed whatever happens.
  private func complete(_ job: Job) throws {
    condition.lock()
    openJobs -= 1
    var part = job.result ?? ScanReport()
    job.result = nil
    condition.unlock()
    defer { Self.close(job.file) }
    part.verify = report.verify
    try scanner.completeFile(job.file, kind: job.kind, report: &part)
    report.verify = part.verify
    part.verify = nil
    report.append(part)
  }

  /// Reads a file the walk could not hand over, here and now, into the report.
  private func read(_ file: OpenedFile, into report: inout ScanReport) throws {
    let (files, bytes) = (report.filesScanned + 1, report.bytesScanned)
    let kind = scanner.readDetectors(file, scratch: inlineScratch, report: &report) { done in
      scanner.progress?(files, bytes + done)
    }
    try scanner.completeFile(file, kind: kind, report: &report)
  }

  /// Starts the workers (`condition` held).
  private func startWorkers() {
    started = Self.workers
    live = Self.workers
    for _ in 0..<Self.workers {
      let thread = Thread { [self] in work() }
      // The scan's own recursion is shallow; this is the main thread's usual stack.
      thread.stackSize = 8 << 20
      thread.start()
    }
  }

  /// A worker: takes the next queued file, runs the detectors over it, hands the result back.
  private func work() {
    let scratch = ScanScratch()
    condition.lock()
    while true {
      while waiting.isEmpty && !stopping { condition.wait() }
      guard !stopping else { break }
      let job = waiting.removeFirst()
      filesStarted += 1
      condition.unlock()
      var part = ScanReport()
      let kind = scanner.readDetectors(job.file, scratch: scratch, report: &part) { done in
        condition.lock()
        bytesDone += done - job.bytesDone
        job.bytesDone = done
        condition.unlock()
      }
      condition.lock()
      job.kind = kind
      job.result = part
      condition.broadcast()
    }
    live -= 1
    condition.broadcast()
    condition.unlock()
  }

  /// Stops the workers once each has finished the file it is reading, and closes every file still
  /// open (after an error, the rest is not read). Safe to call more than once.
  func stop() {
    condition.lock()
    stopping = true
    condition.broadcast()
    while live > 0 { condition.wait() }
    let left = slots[front...].compactMap { slot -> Job? in
      if case .file(let job) = slot { return job }
      return nil
    }
    slots = []
    front = 0
    waiting = []
    condition.unlock()
    for job in left { Self.close(job.file) }
  }

  /// Closes a queued file's descriptor and its own one of its directory.
  private static func close(_ file: OpenedFile) {
    Glibc.close(file.fd)
    if file.directory != AT_FDCWD { Glibc.close(file.directory) }
  }
}

extension Scanner {
  /// Opens the regular file `name` in the directory open at `directory` (or a path, with
  /// `AT_FDCWD`) without following a symlink or waiting on a FIFO swapped in since it was looked
  /// at, and checks it is still a regular file; nil (and the reason listed as incomplete) when not.
  func openFile(in directory: Int32, name: [UInt8], shown: String, report: inout ScanReport) -> OpenedFile? {
    let fd = Self.withCString(name) { openat(directory, $0, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC) }
    guard fd >= 0 else {
      let code = errno
      let reason = code == ELOOP ? "changed while being scanned (now a symlink)" : Self.reason(code)
      report.incomplete.append(Skipped(path: shown, reason: "not readable (\(reason))"))
      return nil
    }
    var info = stat()
    guard fstat(fd, &info) == 0, info.st_mode & S_IFMT == S_IFREG else {
      close(fd)
      report.incomplete.append(
        Skipped(path: shown, reason: "not read (changed while being scanned: no longer a regular file)"))
      return nil
    }
    return OpenedFile(fd: fd, directory: directory, name: name, shown: shown, size: Int(info.st_size))
  }

  /// The detectors' part of reading `file` (any thread): what `scanFile` finds.
  func readDetectors(
    _ file: OpenedFile, scratch: ScanScratch, report: inout ScanReport, progress: (_ bytesDone: Int) -> Void
  ) -> FileKind {
    let baseName = Array(file.name.split(separator: 0x2f, omittingEmptySubsequences: false).last ?? [])
    return scanFile(
      file.fd, size: file.size, path: file.shown, name: String(decoding: baseName, as: UTF8.self), scratch: scratch,
      report: &report, progress: progress)
  }

  /// The rest of reading `file`, in walk order on the scan's own thread: a SQLite database is
  /// audited as a container on the same descriptor (through its WAL when a `-wal` or `-shm` file
  /// sits next to it), then the file's findings beyond the per-detector limit are counted.
  /// - Throws: what `audit` throws.
  func completeFile(_ file: OpenedFile, kind: FileKind, report: inout ScanReport) throws {
    if kind == .database {
      // A -wal or -shm file next to it means a connection is or was live: read through the WAL.
      let live = [Array("-wal".utf8), Array("-shm".utf8)].contains { suffix in
        var sidecar = stat()
        return Self.withCString(file.name + suffix) { fstatat(file.directory, $0, &sidecar, AT_SYMLINK_NOFOLLOW) } == 0
      }
      try audit(file.fd, path: file.shown, live: live, report: &report)
    }
    report.finishFile(file.shown)
  }
}
