import CProcessHardening
internal import CScanKernels
import Foundation
import Vault

/// Memory one scanning thread reuses from file to file: the buffer each chunk is read into
/// (`Scanner.chunk` and the overlap), allocated once instead of an array per chunk.
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

/// Where the scan's descriptors are seen from other threads: `/proc/self/fd/` for the process's
/// own table, `/proc/self/task/T/fd/` for the private table of the scan's walk thread T. A link
/// under it names the open file itself (`stat` follows it), from any thread of the process.
struct DescriptorLinks {
  let prefix: String

  static let process = DescriptorLinks(prefix: "/proc/self/fd/")

  /// The link of descriptor `fd`.
  func link(_ fd: Int32) -> String { prefix + String(fd) }

  /// The path of `name` (raw bytes) in the directory open at `directory` (or `name` itself, a
  /// path, for `AT_FDCWD`), through the directory's link.
  func path(in directory: Int32, _ name: [UInt8]) -> [UInt8] {
    directory == AT_FDCWD ? name : Array(link(directory).utf8) + [0x2f] + name
  }
}

/// Scans the files one walk opens on two worker threads, and puts together the report in walk
/// order, exactly as one thread reading them one after the other would: each file's detector
/// findings are collected apart, then, on the calling thread and in walk order, its container
/// audit runs (`--verify` opens envelopes on one thread only), its per-file limits apply, and it
/// joins the report after what the walk noted before it (skipped and unreadable paths).
///
/// The walk and the workers run on threads with a descriptor table of their own
/// (`vault_private_descriptor_table`): on Linux, closing any descriptor of a file drops every POSIX
/// lock the closing table holds on that file, so a scan that opened and closed a database with its
/// descriptors in the process's table would drop the locks of the SQLite connections the process
/// has open on it (another process could then take itself for the last user and remove its WAL).
/// The calling thread opens nothing itself: it reads each database it audits through SQLite, by
/// the walk thread's link to the descriptor (`DescriptorLinks`), and SQLite keeps one process's
/// connections to a file from dropping each other's locks. Only the walk thread closes the
/// descriptors it opened, once the calling thread is done with them. Nothing the caller gave runs on
/// those threads: the progress handler and the vault are used on the calling thread alone, and the
/// threads are joined before `run` returns, so nothing the caller gave is released there either.
/// Where a table of its own is refused (a seccomp filter that denies unshare), the scan reads
/// nothing (`ScanError.noPrivateDescriptorTable`), unless the scanner may share the process's
/// (`Scanner.sharesProcessDescriptorTable`, for `vault scan`).
///
/// Memory stays bounded: at most two files are read at once, each by its thread's one chunk
/// buffer (`Scanner.chunk`, 256 KiB, and the overlap; up to `Scanner.wholeRecordLimit` once a
/// file was read in one piece) and that file's decoders
/// (`InflateAllowance`), and at most `window` files (2 to 16, fewer under a low open-file limit)
/// are open and waiting to be put in the report; each holds its descriptor, one for its
/// directory, and its findings (at most 100 per detector, `ScanReport.findingsPerDetectorPerFile`).
/// The walk waits when the window is full.
/// A scan of a single file starts no worker (the walk thread reads it). Threads are started with
/// `SystemThread`, which says when one cannot be: the scan then fails with
/// `ProcessResources.Shortage.threads` (no walk thread) or goes on with fewer workers.
final class FilePipeline: @unchecked Sendable {
  // Everything below is guarded by `condition`, except `scanner` (read-only: its patterns, searcher
  // and budget are all a worker uses), `report` (the calling thread's alone), `walkBody` and
  // `inlineScratch` (the walk thread's alone).
  private let condition = NSCondition()
  private let scanner: Scanner
  private let window: Int
  static let workers = 2
  /// Gives the calling thread a descriptor table of its own (0), or says why not (an errno).
  /// Tests replace it to see what a refusal does.
  nonisolated(unsafe) static var privateDescriptorTable: () -> Int32 = { vault_private_descriptor_table() }
  /// Starts the walk thread and the workers (`SystemThread.spawn`). Tests replace it to see what a
  /// thread that cannot be created does.
  nonisolated(unsafe) static var spawnThread: (Int, @escaping @Sendable () -> Void) -> (pthread_t?, Int32) = {
    SystemThread.spawn(stackSize: $0, $1)
  }
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

  /// The walk stops at its next file: the calling thread failed, the rest is not read.
  private struct Abandoned: Error {}

  private var slots: [Slot] = []
  private var front = 0
  /// Slots handed to the calling thread and not yet in its report.
  private var outstanding = 0
  private var waiting: [Job] = []
  /// Files opened by the walk and not yet closed.
  private var openFiles = 0
  /// Files the calling thread is done with: the walk thread closes them.
  private var closable: [OpenedFile] = []
  private var workersTried = false
  private var workerThreads: [pthread_t] = []
  private var stopping = false
  private var abandoned = false
  private var walking = true
  private var walkError: (any Error)?
  private var finished = false
  private var walkEnded = false
  private var links = DescriptorLinks.process
  private var filesStarted = 0
  private var bytesDone = 0
  private var report: ScanReport
  private var walkBody: ((FilePipeline, inout ScanReport) throws -> Void)?
  private lazy var inlineScratch = ScanScratch()

  init(scanner: Scanner) {
    self.scanner = scanner
    var limit = rlimit()
    let soft = getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 ? Int(clamping: limit.rlim_cur) : 64
    // Two descriptors per waiting file: within the spare half the walk leaves (`Scanner.depthLimit`).
    window = max(2, min(16, soft / 8))
    report = ScanReport()
    if scanner.vault != nil { report.verify = VerifyReport() }
  }

  /// Runs `walk` on a thread of its own, which submits each file it finds (`submit`) and notes what
  /// it skips in the report it is given, and puts every file in the report here, on the calling
  /// thread, in walk order. Returns once the walk thread has closed every descriptor it opened.
  /// - Returns: the report in walk order (findings not yet sorted).
  /// - Throws: what `walk` throws (`ScanError.unreadable`), or what `Scanner.completeFile` throws.
  func run(_ walk: @escaping (FilePipeline, inout ScanReport) throws -> Void) throws -> ScanReport {
    walkBody = walk
    // The walk keeps its own stack of directories; this is the main thread's usual stack.
    let (walker, error) = Self.spawnThread(8 << 20) { [self] in walkThread() }
    guard let walker else { throw ProcessResources.threadShortage(errno: error) }
    var failure: (any Error)?
    do {
      try mergeWhileWalking()
    } catch {
      failure = error
    }
    condition.lock()
    if failure != nil { abandoned = true }
    finished = true
    condition.broadcast()
    while !walkEnded { condition.wait() }
    let walkError = walkError
    condition.unlock()
    // Joined, so that nothing of this pipeline (the scanner, its vault and progress handler) is
    // released on the walk thread or a worker, whose descriptor table is not the process's: a
    // deinit there that closes a descriptor would close the wrong one.
    SystemThread.join(walker)
    if let failure { throw failure }
    if let walkError { throw walkError }
    return report
  }

  /// The walk thread: takes a descriptor table of its own, walks, then closes what the calling
  /// thread is done with until it is done with everything, stops the workers, and closes the rest.
  private func walkThread() {
    var failure: (any Error)?
    let refused = Self.privateDescriptorTable()
    var directory = [CChar](repeating: 0, count: 128)
    if refused == 0, vault_thread_descriptor_directory(&directory, directory.count) == 0 {
      let prefix = String(decoding: directory.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
      condition.lock()
      links = DescriptorLinks(prefix: prefix)
      condition.unlock()
    } else if !scanner.sharesProcessDescriptorTable {
      // Closing what it read in the process's table could drop the locks of the process's own
      // SQLite connections: not scanned at all (a seccomp filter that denies unshare).
      failure = ScanError.noPrivateDescriptorTable(errno: refused == 0 ? ENAMETOOLONG : refused)
    }
    var segment = ScanReport()
    if failure == nil {
      do {
        try walkBody?(self, &segment)
        try awaitFiles { $0.waiting.isEmpty }
      } catch {
        failure = error
      }
    }
    condition.lock()
    if failure == nil && !segment.isEmpty {
      slots.append(.walk(segment))
      outstanding += 1
    }
    if !(failure is Abandoned) { walkError = failure }
    walking = false
    condition.broadcast()
    while true {
      if !closable.isEmpty {
        closeClosable()
        continue
      }
      if finished { break }
      condition.wait()
    }
    // Each worker ends once it has finished the file it is reading.
    stopping = true
    condition.broadcast()
    let workers = workerThreads
    workerThreads = []
    condition.unlock()
    for worker in workers { SystemThread.join(worker) }
    condition.lock()
    let left = slots[front...].compactMap { slot -> OpenedFile? in
      if case .file(let job) = slot { return job.file }
      return nil
    }
    slots = []
    front = 0
    waiting = []
    closable += left
    closeClosable()
    walkEnded = true
    condition.broadcast()
    condition.unlock()
  }

  /// Closes the files in `closable` (`condition` held; released while closing). Walk thread only.
  private func closeClosable() {
    let files = closable
    closable = []
    condition.unlock()
    for file in files { Self.close(file) }
    condition.lock()
    openFiles -= files.count
    condition.broadcast()
  }

  /// Waits on the walk thread, closing what the calling thread is done with, until `done` holds
  /// (`condition` not held). A queued file no worker was started for is read here meanwhile.
  /// - Throws: `Abandoned` once the calling thread has failed.
  private func awaitFiles(until done: (FilePipeline) -> Bool) throws {
    condition.lock()
    defer { condition.unlock() }
    while true {
      if !closable.isEmpty {
        closeClosable()
        continue
      }
      if abandoned { throw Abandoned() }
      if workerThreads.isEmpty, !waiting.isEmpty {
        readNext(scratch: inlineScratch)
        continue
      }
      if done(self) { return }
      condition.wait()
    }
  }

  /// Opens the regular file `name` in `directory` (as `Scanner.openFile` does) and queues it
  /// behind what the walk noted so far (`segment`, emptied). Waits while `window` files are open.
  /// Walk thread only.
  /// - Throws: `Abandoned` once the calling thread has failed.
  func submit(in directory: Int32, name: [UInt8], shown: String, segment: inout ScanReport) throws {
    // A database's container audit reads it through SQLite, which may write its -shm file (the
    // WAL index): a -wal, -shm or -journal file is read only once every file before it is in the
    // report, audits included, as one thread reading them in turn would (its name sorts right
    // after the database's, so little is lost).
    if Self.sidecarSuffixes.contains(where: { name.count > $0.count && name.suffix($0.count).elementsEqual($0) }) {
      try awaitFiles { $0.waiting.isEmpty && $0.outstanding == 0 }
    }
    try awaitFiles { $0.openFiles < $0.window }
    guard let file = scanner.openFile(in: directory, name: name, shown: shown, report: &segment) else { return }
    // The file is read after the walk has moved on and closed its directory: the job keeps its
    // own descriptor of it. Without one (the open-file limit), once every file before is closed.
    var own = directory == AT_FDCWD ? AT_FDCWD : fcntl(directory, F_DUPFD_CLOEXEC, 0)
    if directory != AT_FDCWD && own < 0 {
      condition.lock()
      openFiles += 1
      condition.unlock()
      do {
        try awaitFiles { $0.outstanding == 0 && $0.openFiles == 1 && $0.waiting.isEmpty }
      } catch {
        Glibc.close(file.fd)
        condition.lock()
        openFiles -= 1
        condition.unlock()
        throw error
      }
      own = fcntl(directory, F_DUPFD_CLOEXEC, 0)
      condition.lock()
      openFiles -= 1
      condition.unlock()
      guard own >= 0 else {
        let reason = Scanner.reason(errno)
        Glibc.close(file.fd)
        segment.incomplete.append(Skipped(path: shown, reason: "not read (\(reason))"))
        return
      }
    }
    let job = Job(OpenedFile(fd: file.fd, directory: own, name: file.name, shown: file.shown, size: file.size))
    condition.lock()
    if !segment.isEmpty {
      slots.append(.walk(segment))
      outstanding += 1
    }
    segment = ScanReport()
    slots.append(.file(job))
    outstanding += 1
    waiting.append(job)
    openFiles += 1
    // Workers start with the second file: a scan of one file starts none.
    if !workersTried && openFiles >= 2 { startWorkers() }
    condition.broadcast()
    condition.unlock()
  }

  /// The calling thread's part: puts each slot into the report as soon as it and every slot
  /// before it are ready, audits included, until the walk has ended and every slot is in, calling
  /// the scanner's progress about four times a second meanwhile.
  /// - Throws: what `Scanner.completeFile` throws; stops at once when the walk failed.
  private func mergeWhileWalking() throws {
    var reported = (0, 0)
    condition.lock()
    while true {
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
      if ready.isEmpty {
        if walkError != nil || (!walking && slots.isEmpty) { break }
        _ = condition.wait(until: Date(timeIntervalSinceNow: 0.25))
      }
      let (files, bytes, links) = (filesStarted, bytesDone, links)
      condition.unlock()
      for (index, slot) in ready.enumerated() {
        switch slot {
        case .walk(let segment): report.append(segment)
        case .file(let job):
          do {
            try complete(job, links: links)
          } catch {
            // The files taken off the queue with it are not read further: the walk closes them.
            condition.lock()
            for case .file(let rest) in ready[index...] { closable.append(rest.file) }
            condition.broadcast()
            condition.unlock()
            throw error
          }
        }
        condition.lock()
        outstanding -= 1
        if case .file(let job) = slot { closable.append(job.file) }
        condition.broadcast()
        condition.unlock()
      }
      if (files, bytes) != reported {
        reported = (files, bytes)
        scanner.progress?(files, bytes)
      }
      condition.lock()
    }
    condition.unlock()
  }

  /// The rest of a file, on the calling thread and in walk order: its container audit and limits,
  /// then its place in the report.
  private func complete(_ job: Job, links: DescriptorLinks) throws {
    condition.lock()
    var part = job.result ?? ScanReport()
    job.result = nil
    condition.unlock()
    part.verify = report.verify
    try scanner.completeFile(job.file, kind: job.kind, links: links, report: &part)
    report.verify = part.verify
    part.verify = nil
    report.append(part)
  }

  /// Starts the workers (`condition` held), on the walk thread: they share its descriptor table.
  /// A worker that cannot be started is done without: with none, the walk thread reads each file.
  private func startWorkers() {
    workersTried = true
    for _ in 0..<Self.workers {
      // The scan's own recursion is shallow; this is the main thread's usual stack.
      guard let worker = Self.spawnThread(8 << 20, { [self] in work() }).0 else { break }
      workerThreads.append(worker)
    }
  }

  /// Takes the next queued file, runs the detectors over it (`condition` released meanwhile) and
  /// hands the result back; `condition` held on entry and on return, and a file queued.
  private func readNext(scratch: ScanScratch) {
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

  /// A worker: takes the next queued file, runs the detectors over it, hands the result back.
  private func work() {
    let scratch = ScanScratch()
    condition.lock()
    while true {
      while waiting.isEmpty && !stopping { condition.wait() }
      guard !stopping else { break }
      readNext(scratch: scratch)
    }
    condition.unlock()
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
    screenAttributes(file.fd, path: file.shown, report: &report)
    return scanFile(
      file.fd, size: file.size, path: file.shown, name: String(decoding: baseName, as: UTF8.self), scratch: scratch,
      report: &report, progress: progress)
  }

  /// The extended attributes of the file or directory open at `fd`, names and values, searched
  /// for every form of every canary: they are written on disk beside its data (a browser or
  /// `wget` keeps a download's address, query string and all, in `user.xdg.origin.url`). Each
  /// match is a finding (region "xattr", offset 0). An attribute list or value that cannot be
  /// read makes `path` incomplete; a file system without extended attributes has nothing to
  /// search. Without canaries nothing is read.
  func screenAttributes(_ fd: Int32, path: String, report: inout ScanReport) {
    guard !patterns.isEmpty else { return }
    func incomplete(_ code: Int32) {
      report.incomplete.append(
        Skipped(path: path, reason: "extended attributes not fully read (\(Self.reason(code)))"))
    }
    let list: [UInt8]
    switch Self.sizedRead({ flistxattr(fd, $0?.assumingMemoryBound(to: CChar.self), $1) }) {
    case .success(let bytes): list = bytes
    case .failure(let failure) where failure.code == ENOTSUP: return
    case .failure(let failure): return incomplete(failure.code)
    }
    for name in list.split(separator: 0) {
      var value: [UInt8] = []
      switch Self.withCString(Array(name), { cName in Self.sizedRead { fgetxattr(fd, cName, $0, $1) } }) {
      case .success(let bytes): value = bytes
      // Removed since it was listed: nothing of it is on disk any more.
      case .failure(let failure) where failure.code == ENODATA: break
      case .failure(let failure): incomplete(failure.code)
      }
      // One finding per canary form found in the attribute (its name or its value).
      var said = Set<String>()
      for bytes in [Array(name), value] {
        reportForms(of: canaryMatches(in: bytes), in: bytes, at: path, region: "xattr", said: &said, report: &report)
      }
    }
  }

  /// A failed system call's errno.
  struct CallFailure: Error { let code: Int32 }

  /// What a call that is asked for its size first (a null buffer) and then filled (`flistxattr`,
  /// `fgetxattr`) gives: read into a buffer of that size, once more when it grew in between
  /// (ERANGE).
  static func sizedRead(_ call: (UnsafeMutableRawPointer?, Int) -> Int) -> Result<[UInt8], CallFailure> {
    for attempt in 0..<2 {
      let size = call(nil, 0)
      guard size >= 0 else { return .failure(CallFailure(code: errno)) }
      guard size > 0 else { return .success([]) }
      var bytes = [UInt8](repeating: 0, count: size)
      let got = bytes.withUnsafeMutableBytes { call($0.baseAddress, size) }
      if got >= 0 { return .success(Array(bytes[0..<got])) }
      guard errno == ERANGE, attempt == 0 else { return .failure(CallFailure(code: errno)) }
    }
    return .failure(CallFailure(code: ERANGE))
  }

  /// The rest of reading `file`, in walk order on the scan's calling thread: a SQLite database is
  /// audited as a container through the link to the same descriptor (through its WAL when a `-wal`
  /// or `-shm` file sits next to it), then the file's findings beyond the per-detector limit are
  /// counted. `links` says where the descriptors of `file` are seen from this thread.
  /// - Throws: what `audit` throws.
  func completeFile(_ file: OpenedFile, kind: FileKind, links: DescriptorLinks, report: inout ScanReport) throws {
    if kind == .database {
      // A -wal or -shm file next to it means a connection is or was live: read through the WAL.
      let sidecars = {
        [Array("-wal".utf8), Array("-shm".utf8)].contains { suffix in
          var sidecar = stat()
          return Self.withCString(links.path(in: file.directory, file.name + suffix)) {
            fstatat(AT_FDCWD, $0, &sidecar, AT_SYMLINK_NOFOLLOW)
          } == 0
        }
      }
      try audit(
        link: links.link(file.fd), path: file.shown, live: sidecars(), sidecarsAppeared: sidecars, report: &report)
    }
    report.finishFile(file.shown)
  }
}
