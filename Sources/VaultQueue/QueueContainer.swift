internal import CSQLite
import Foundation
import Vault
import VaultCrypto
import VaultKeys

/// A durable, sealed record queue in one SQLite file: the storage engine behind the outbox and
/// telemetry.
///
/// Every record's payload is sealed by the vault with the queue name and record id as context,
/// so a ciphertext cannot be moved between rows or queues. Plaintext columns hold only ids, queue
/// names, times, sizes, attempts, state, key version and error kinds.
///
/// Durability: WAL with `synchronous=FULL`; `enqueue` returns only after its transaction commits.
/// Thread-safe (calls are serialised on one connection) and multi-process-safe (each process opens
/// its own connection; writers take SQLite's write lock with `BEGIN IMMEDIATE`).
public final class QueueContainer: @unchecked Sendable {
  /// The container file's absolute path (as registered with the vault and shown in errors).
  public let path: String
  /// How this connection treats the container: cap, age, retries, leases.
  public let configuration: QueueConfiguration
  let vault: Vault
  let clock: @Sendable () -> Date
  let monotonic: @Sendable () -> MonotonicReading
  let random: @Sendable () -> Double
  private let lock = NSLock()
  /// Enqueues from several threads share one transaction and one fsync (see `GroupCommit`).
  let groupCommit = GroupCommit()
  private let storage: Storage

  /// How `init` treats the file at `path`.
  public enum OpenMode: Sendable {
    /// For writers: opens the container, creating it only when `path` is not registered with the
    /// vault and holds nothing (no file, or an empty one), and registers it before any record is
    /// written. A registered path that is missing, empty or holds another container is refused.
    case createIfNeeded
    /// The container must already exist (registered or not; it is registered when it is not).
    case existing
    /// Read-only inspection: nothing is created, changed or registered.
    case readOnly
  }

  /// The random id this container keeps in its metadata (and the manifest records).
  public var containerID: String { storage.containerID }

  /// Opens the container at `path` for `vault`.
  ///
  /// `clock` is the wall clock (times shown, due times, leases); `monotonic` measures records' age
  /// (see `QueueConfiguration.maximumAge`). Tests replace both.
  /// The file is looked at read-only first, so a file that is not a vault container is refused
  /// without being changed. Unless `mode` is `.readOnly`, the container is registered with the
  /// vault (so rotation re-seals it) before any record is written, and a `CapVictims.only` limit
  /// is stored in it.
  ///
  /// - Parameters:
  ///   - path: the container file; made absolute against the working directory.
  ///   - vault: the vault whose keys seal and open the records.
  ///   - configuration: cap, age, retry and lease settings for this connection.
  ///   - mode: whether a missing container may be created (the default), must exist, or is only
  ///     read.
  ///   - clock: the wall clock; `Date.init` by default.
  ///   - random: uniform numbers in [0, 1) for the backoff's jitter.
  ///   - monotonic: the clock that measures age; CLOCK_BOOTTIME by default.
  /// - Throws: `QueueError.invalidConfiguration` for a `byteCap` below 89 bytes or a `maximumAge`
  ///   under 1 ms (unless `.readOnly`); `.registeredContainerMissing` / `.registeredContainerReplaced` when a
  ///   registered path does not hold the registered container; `.noContainer` when `.existing` or
  ///   `.readOnly` finds none; `.foreignContainer` when it was created by another vault;
  ///   `.corrupt`, `.notAFile` or `.notAQueueContainer` for a file that is not a container;
  ///   `.newerSchema` for one made by a newer vault; `.unsafeDirectory`, `.ownedByOther` or
  ///   `.openToOthers` for a directory or file someone else may change (see `probe(path:)`); the
  ///   other `QueueError` kinds for a file that cannot be read or written (permissions, a read-only
  ///   or full disk, too many open files).
  ///   `VaultError.containerBesideKeyfile` for a container in the keyfile's directory;
  ///   `RotationError` when registering would conflict with another registered path; the
  ///   manifest's errors when it cannot be read or written.
  public convenience init(
    path: String, vault: Vault, configuration: QueueConfiguration = QueueConfiguration(),
    mode: OpenMode = .createIfNeeded, clock: @escaping @Sendable () -> Date = Date.init,
    random: @escaping @Sendable () -> Double = { Double.random(in: 0..<1) },
    monotonic: @escaping @Sendable () -> MonotonicReading = MonotonicReading.system
  ) throws {
    try self.init(
      path: path, vault: vault, configuration: configuration, mode: mode, restoring: nil, clock: clock,
      random: random, monotonic: monotonic)
  }

  /// Makes an empty container at `path` under the id `containerID` for a backup's snapshot of it to
  /// be merged into (VaultBackup): a registered container whose file is missing or empty (its id
  /// must be the registered one), or a container this vault does not know yet. Registered as the
  /// public initializer registers; a file that holds anything is refused. `origin`, the snapshot's
  /// instance, is recorded as `restored_from` in the transaction that makes the container, so a
  /// merge stopped at any point after finds it a copy of that snapshot when run again (and
  /// restores what it had not added yet) rather than a container of unknown past (review).
  ///
  /// - Throws: `QueueError.storage` when the file is not missing or empty, or the registered id
  ///   differs; otherwise what the public initializer throws.
  package convenience init(
    restoring path: String, containerID: String, origin: String?, merge: UnfinishedMerge, vault: Vault
  ) throws {
    try self.init(path: path, vault: vault, mode: .createIfNeeded, restoring: containerID, origin: origin, merge: merge)
  }

  private init(
    path: String, vault: Vault, configuration: QueueConfiguration = QueueConfiguration(), mode: OpenMode,
    restoring restoredID: String?, origin: String? = nil, merge: UnfinishedMerge? = nil,
    clock: @escaping @Sendable () -> Date = Date.init,
    random: @escaping @Sendable () -> Double = { Double.random(in: 0..<1) },
    monotonic: @escaping @Sendable () -> MonotonicReading = MonotonicReading.system
  ) throws {
    let path = absolutePath(path)
    let configuration = configuration.withNumericTimes
    // A reader (status, stats, scan) never enqueues or expires anything.
    if mode != .readOnly { try configuration.checkKeepsRecords() }
    self.path = path
    self.vault = vault
    self.configuration = configuration
    self.clock = clock
    self.monotonic = monotonic
    self.random = random
    let keyring = vault.keyringID.hex
    let registered = try vault.registeredContainer(at: path)
    // A writer plays back what a writer killed mid-transaction left, as SQLite itself would; the
    // read-only probe below could not, and readers (status, stats, scan) never change a file.
    if mode != .readOnly { Self.rollBackInterruptedWrite(path) }
    let probe = try Self.probe(path: path)
    let storageMode: Storage.Mode
    let restorable: Bool
    switch probe {
    case .missing, .empty: restorable = true
    default: restorable = false
    }
    switch (probe, registered) {
    case (_, _) where restoredID != nil && restorable:
      if let expected = registered?.id, expected != restoredID {
        throw QueueError.registeredContainerReplaced(path: path, expected: expected, found: restoredID ?? "")
      }
      if registered == nil {
        try vault.checkContainerLocation(path)
        // Registered before the file is made: a merge killed in between leaves a registered
        // container that is missing (which backup and rotation refuse, and the rerun restores),
        // not a file nothing points to (a backup went on without it and pruned the bundle that
        // held its records; an outside review).
        try vault.registerContainer(path, id: restoredID!)
      }
      storageMode = .create(
        minimumSealVersion: vault.activeVersion, containerID: restoredID, restoredFrom: origin, merge: merge)
    case (_, _) where restoredID != nil && !restorable:
      throw QueueError.storage(path: path, detail: "a container to restore into must be missing or empty")
    case (.missing, .some), (.empty, .some):
      throw QueueError.registeredContainerMissing(path: path)
    case (.missing, nil), (.empty, nil):
      guard case .createIfNeeded = mode else { throw QueueError.noContainer(path: path) }
      try vault.checkContainerLocation(path)
      storageMode = .create(minimumSealVersion: vault.activeVersion)
    case (.notAContainer(let reason), _):
      // A file that is not SQLite at all is most likely a container whose bytes were damaged.
      if reason == Self.notSQLite { throw QueueError.corrupt(path: path) }
      if reason == Self.notRegular { throw QueueError.notAFile(path: path) }
      throw QueueError.notAQueueContainer(path: path)
    case (.container(let found, let id), _):
      guard found == keyring else { throw QueueError.foreignContainer(path: path, found: found, expected: keyring) }
      if let expected = registered?.id, id != expected {
        throw QueueError.registeredContainerReplaced(path: path, expected: expected, found: id)
      }
      storageMode = mode == .readOnly ? .readOnly : .existing
    }
    storage = try Self.translating(path) { try Storage(path: path, keyringID: keyring, mode: storageMode) }
    if mode != .readOnly {
      // A container that can hold records must be known to rotation before it holds any, or its
      // keys could be retired.
      try vault.registerContainer(path, id: storage.containerID)
      if registered == nil {
        // Registered now (new, or put back after `vault container forget`): raised to the active
        // version as a rotation would, so rotation does not take it for an older copy of itself.
        // Its records keep their versions, and those versions stay until it is re-sealed.
        try Self.translating(path) {
          try storage.transaction { try storage.setMinimumSealVersion(vault.activeVersion) }
        }
      }
      // A limit on what the cap may drop is kept in the container, so every writer honours it
      // (`vault telemetry log` into memo's container must not push out a memo either).
      if case .only(let names) = configuration.capVictims {
        let text = try Self.capVictimsText(names)
        try Self.translating(path) {
          if try Self.storedCapVictims(storage) != text {
            try storage.transaction {
              _ = try storage.statement(
                "INSERT INTO meta (key, value) VALUES ('cap_victims', ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value"
              ).run([.text(text)])
            }
          }
        }
      }
      // The age clock starts before the first record is stamped with it.
      try Self.translating(path) {
        if try !ageClockStarted(storage) {
          try storage.transaction { _ = try observeAge(storage, wall: milliseconds(clock()), reading: monotonic()) }
        }
      }
    }
  }

  /// How a cap limit is kept in the container's meta (and bound in SQL): a sorted JSON array.
  static func capVictimsText(_ names: Set<String>) throws -> String {
    String(decoding: try JSONEncoder().encode(names.sorted()), as: UTF8.self)
  }

  /// The cap limit a writer stored in the container (`capVictimsText`), or nil when none did.
  static func storedCapVictims(_ storage: Storage) throws -> String? {
    var stored: String?
    try storage.statement("SELECT value FROM meta WHERE key = 'cap_victims'").query { stored = $0.text(0) }
    return stored
  }

  static let notSQLite = "not a SQLite database"
  static let notRegular = "not a regular file"

  /// What the file at `path` is, read without creating or changing anything.
  ///
  /// - Parameter path: the file to look at (not followed when it is a symlink).
  /// - Returns: `.missing`, `.empty` (no bytes, or a database with no schema),
  ///   `.notAContainer(reason:)` (not a regular file, not SQLite, no container tables or keyring
  ///   id), or `.container` with its keyring id and container id.
  /// - Throws: `QueueError.permissionDenied`, `.tooManyOpenFiles` or `.cannotOpen` when the file
  ///   cannot be looked at (`.cannotOpen` too when its -wal or -shm is not a regular file);
  ///   `.unsafeDirectory` when group or others may write its directory, or another user than you
  ///   or root owns it; `.ownedByOther` or `.openToOthers` when another user owns, or group or
  ///   others may write, it or its -wal, -shm or -journal (checked first, whether or not there is
  ///   a file yet); the other `QueueError` kinds when its database cannot be read.
  public static func probe(path: String) throws -> ContainerProbe {
    // First: a -wal planted where a container is about to be made would be used by it.
    try checkPrivate(path)
    var info = stat()
    guard lstat(path, &info) == 0 else {
      if errno == ENOENT { return .missing }
      throw QueueError.cannotOpen(path: path, reason: String(cString: strerror(errno)))
    }
    guard info.st_mode & S_IFMT == S_IFREG else { return .notAContainer(reason: notRegular) }
    // A -wal or -shm that is a FIFO (or a link, a directory …) would be waited on, or changed, by
    // SQLite: a reader created a -shm beside it and changed its mode, and rotation found it only
    // after making its new version active (outside operator review). Refused before any open.
    if let special = specialFile(at: path, reported: path) { throw special }
    guard info.st_size > 0 else { return .empty }
    // SQLite itself tells a file that is not a database (SQLITE_NOTADB): no descriptor of our own
    // is opened here, because closing one would drop the POSIX locks of every connection this
    // process has open on the file, and another process closing its connection would then take
    // itself for the last one and delete the WAL our connections still write to (records lost;
    // ProcessLockTests). SQLite's own descriptors keep those locks.
    return try translating(path) {
      let connection = try Connection(path: path, readOnly: true)
      try connection.execute("PRAGMA busy_timeout = 10000")
      // A database with no schema at all (a container whose creation was cut short) holds nothing.
      var objects = 0
      do {
        try connection.prepare("SELECT count(*) FROM sqlite_master").query { objects = Int($0.int(0)) }
      } catch let error as SQLiteError where error.isNotADatabase {
        return .notAContainer(reason: notSQLite)
      }
      guard objects > 0 else { return .empty }
      var tables = 0
      try connection.prepare(
        "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN ('records', 'meta')"
      ).query { tables = Int($0.int(0)) }
      guard tables == 2 else { return .notAContainer(reason: "no vault queue tables") }
      var keyring: String?
      var id: String?
      try connection.prepare("SELECT key, value FROM meta WHERE key IN ('keyring_id', 'container_id')").query { row in
        if row.text(0) == "keyring_id" { keyring = row.text(1) } else { id = row.text(1) }
      }
      guard let keyring else { return .notAContainer(reason: "no keyring id") }
      return .container(keyringID: keyring, containerID: id)
    }
  }

  /// Rolls back what a writer killed in a rollback-journal transaction left (a hot `-journal`:
  /// a container's creation runs in one, before the file switches to WAL), as SQLite does whenever
  /// a connection that may write reads the file. A read-only connection cannot, and fails with
  /// SQLITE_READONLY_ROLLBACK on every read, so a container killed while being created would be
  /// refused forever. Called only where the caller is about to write the container anyway (never
  /// by a reader: status, stats and scan change no file). Nothing happens without a `-journal`
  /// file; when the rollback cannot be done (a read-only mount, a locked file), the open that
  /// follows says why. A journal (or database) others may write is never played back: its pages
  /// would be written into the container; the probe that follows refuses it.
  ///
  /// - Parameter path: the database file (its `-journal` is looked for beside it).
  package static func rollBackInterruptedWrite(_ path: String) {
    var info = stat()
    guard (try? checkPrivate(path)) != nil,
      lstat(path + "-journal", &info) == 0, info.st_mode & S_IFMT == S_IFREG, info.st_size > 0,
      lstat(path, &info) == 0, info.st_mode & S_IFMT == S_IFREG,
      let connection = try? Connection(path: path, create: false)
    else { return }
    // The first read takes a shared lock, finds the journal hot (no writer holds a reserved lock)
    // and plays it back; a live writer's journal is not hot and is left to it.
    try? connection.execute("PRAGMA busy_timeout = 10000")
    try? connection.prepare("SELECT count(*) FROM sqlite_master").query { _ in }
  }

  /// Records per key version in the container at `path`, from each envelope's header, read without
  /// any key (for `vault status`, which must work while the keyring is locked). Nil when the file
  /// does not exist.
  ///
  /// - Parameters:
  ///   - path: the container file.
  ///   - keyring: the vault whose envelopes are counted by version; others count as foreign.
  /// - Returns: the counts, or nil when there is no file at `path`.
  /// - Throws: `QueueError` when the file cannot be read as a container (no `records` table
  ///   included, or not a regular file: `.cannotOpen`, before any open); `.unsafeDirectory`, `.ownedByOther` or `.openToOthers` as `probe(path:)`, before
  ///   anything is opened (SQLite run as root gives a -wal it opens the database's owner).
  public static func recordCounts(path: String, keyring: KeyringID) throws -> RecordCounts? {
    try checkPrivate(path)
    // A FIFO in the file's place would be waited on by SQLite's open, for good (`vault status`
    // hung on one; an outside review).
    if let special = specialFile(at: path, reported: path) { throw special }
    guard FileManager.default.fileExists(atPath: path) else { return nil }
    return try translating(path) {
      let connection = try Connection(path: path, readOnly: true)
      try connection.execute("PRAGMA busy_timeout = 10000")
      return try headerCounts(connection.prepare(headerCountsSQL.description), keyring: keyring)
    }
  }

  /// The bundles whose merge into the container at `path` (`vault restore` into its home) began and
  /// did not finish: it may lack records they hold, and a backup refuses it until each merge is
  /// run again or the container is accepted as it is (for `vault status` and `vault doctor`;
  /// read-only, no key).
  ///
  /// - Parameter path: the container file.
  /// - Returns: the bundle files, as they were given to the merges; empty also when there is no
  ///   container at `path` (no file, an empty one, another kind of file: what reads it says so).
  /// - Throws: as `recordCounts(path:keyring:)`.
  public static func unfinishedMerges(path: String) throws -> [String] {
    // (The probe refuses what `recordCounts` refuses, before any open.)
    guard case .container = try probe(path: path) else { return [] }
    return try translating(path) {
      let connection = try Connection(path: path, readOnly: true)
      try connection.execute("PRAGMA busy_timeout = 10000")
      // The marks alone, not the whole lineage (which lists every id a restored copy started with).
      var bundles: [String] = []
      try connection.prepare("SELECT key, value FROM meta WHERE \(UnfinishedMerge.marks) ORDER BY value").query {
        bundles.append(UnfinishedMerge(snapshot: "", value: $0.text(1) ?? "").bundle)
      }
      return bundles
    }
  }

  /// The first 17 bytes of every record's envelope (magic, format, suite, keyring id, version),
  /// for `headerCounts`. Counting reads the version from each envelope's authenticated header,
  /// never from the plaintext key_version column, which anyone able to write the file could
  /// relabel; the value is cast to a BLOB first, since substr() counts characters, not bytes, in a
  /// value someone retyped as TEXT. The rows are counted in `headerCounts`, not by a `GROUP BY`:
  /// SQLite grouped them by sorting every header in a temporary b-tree, which took six times as
  /// long as reading them (3.3 s against 0.5 s for 262,144 records of 1 KiB, `sqlite3`).
  static let headerCountsSQL: StaticString = "SELECT substr(CAST(envelope AS BLOB), 1, 17) FROM records"

  /// Counts the 17-byte envelope headers `statement` returns into versions of `keyring` and
  /// foreign rows (another keyring's, an unknown format or suite, or shorter than a header).
  static func headerCounts(_ statement: Statement, keyring: KeyringID) throws -> RecordCounts {
    let prefixes = headerPrefixes(keyring)
    // Rows per (version, suite byte): almost every row of a container shares one or two headers.
    var perHeader: [UInt64: Int] = [:]
    var foreign = 0
    try statement.query { row in
      row.withBlob(0) { header in
        guard header.count == 17, prefixes.contains(where: { $0.elementsEqual(header.prefix(13)) }) else {
          foreign += 1
          return
        }
        let version = header[13..<17].reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
        perHeader[UInt64(version) << 8 | UInt64(header[4]), default: 0] += 1
      }
    }
    var counts = RecordCounts(byVersion: [:])
    counts.foreign = foreign
    for (key, count) in perHeader {
      let version = UInt32(truncatingIfNeeded: key >> 8)
      counts.byVersion[version, default: 0] += count
      counts.suitesByVersion[version, default: []].insert(UInt8(truncatingIfNeeded: key))
    }
    return counts
  }

  /// The first 13 header bytes an envelope of `keyring` starts with: in format 1, then format 2.
  static func headerPrefixes(_ keyring: KeyringID) -> [[UInt8]] {
    [
      Envelope.magic + [Envelope.format1, Envelope.suiteAES256GCM] + keyring.bytes,
      Envelope.magic + [Envelope.format2, Envelope.suiteXAES256GCMCommitted] + keyring.bytes,
    ]
  }

  static func versionBytes(_ version: UInt32) -> [UInt8] {
    (0..<4).map { UInt8(truncatingIfNeeded: version >> (24 - 8 * UInt32($0))) }
  }

  // MARK: - Plumbing

  /// The context binding a record to its place: the `queue` domain with the container id, queue
  /// name and record id (format 1 used "vault.queue.v1", NUL, queue, NUL, id, without the container).
  /// Every envelope in a container is sealed with it; an audit that opens envelopes (`vault scan
  /// --verify`) rebuilds it from here, never by hand.
  package static func context(containerID: String, queue: String, id: String) -> EnvelopeContext {
    .queue(containerID: containerID, queue: queue, id: id)
  }

  /// This container's context for a record.
  func context(queue: String, id: String) -> EnvelopeContext {
    Self.context(containerID: storage.containerID, queue: queue, id: id)
  }

  /// ISO 8601 UTC with milliseconds, as `queue list` shows times.
  static func timestamp(milliseconds: Int64) -> String { timestamp(date(milliseconds: milliseconds)) }

  /// ISO 8601 in UTC with milliseconds, as `queue list` shows times.
  package static func timestamp(_ date: Date) -> String { millisecondTimestamp(date) }

  /// The id `list` shows for a row whose id column is not a UUID (written by something other than
  /// vault): the nil UUID, so the row is still listed.
  static let unreadableID = UUID(uuidString: "00000000-0000-0000-0000-000000000000")!

  static func date(timestamp text: String) -> Date? { parseMillisecondTimestamp(text) }

  static func date(milliseconds: Int64) -> Date { Date(timeIntervalSince1970: Double(milliseconds) / 1000) }

  static func validate(_ queue: String) throws {
    let bytes = Array(queue.utf8)
    guard !bytes.isEmpty, bytes.count <= 128, !bytes.contains(0) else { throw QueueError.invalidQueueName }
  }

  func withStorage<T>(_ body: (Storage) throws -> T) throws -> T {
    lock.lock()
    defer { lock.unlock() }
    return try Self.translating(path) { try body(storage) }
  }

  /// Turns SQLite's codes into the queue's error kinds.
  static func translating<T>(_ path: String, _ body: () throws -> T) throws -> T {
    do {
      return try body()
    } catch let error as SQLiteError {
      switch error.systemErrno {
      case EMFILE, ENFILE: throw QueueError.tooManyOpenFiles(path: path)
      case EACCES, EPERM: throw QueueError.permissionDenied(path: path)
      case ENOSPC, EDQUOT: throw QueueError.diskFull(path: path)
      case EFBIG: throw QueueError.fileTooLarge(path: path)
      case EROFS: throw QueueError.readOnly(path: path)
      // A mapping refused for lack of address space (the -shm file under `ulimit -v`, reported
      // as SQLITE_IOERR_SHMMAP) is running out of memory, not a storage failure.
      case ENOMEM: throw QueueError.outOfMemory(path: path)
      default: break
      }
      if error.isFull { throw QueueError.diskFull(path: path) }
      if error.isOutOfMemory { throw QueueError.outOfMemory(path: path) }
      // SQLITE_READONLY_ROLLBACK (8 | 3 << 8): a hot journal a read-only open cannot play back.
      if error.code == 776 {
        throw QueueError.cannotOpen(
          path: path,
          reason: "a write to it was cut short (its -journal is beside it); the next open for writing plays it back")
      }
      // SQLite falls back to read-only when opening for writing fails for any reason (an I/O
      // error, too): a file and directory that are writable on a writable file system are not
      // the reason, so the operator is not sent to check permissions and mounts.
      if error.isReadOnly, writable(path) {
        throw QueueError.cannotOpen(path: path, reason: unclearOpenFailure)
      }
      if error.isReadOnly { throw QueueError.readOnly(path: path) }
      if error.isCannotOpen {
        // SQLite's errno is often that of its last fallback (a missing -shm); ask the file system.
        let target = FileManager.default.fileExists(atPath: path) ? path : (path as NSString).deletingLastPathComponent
        if access(target, W_OK) != 0 {
          switch errno {
          case EROFS: throw QueueError.readOnly(path: path)
          case EACCES, EPERM: throw QueueError.permissionDenied(path: path)
          default: break
          }
        }
        if let special = specialFile(at: path, reported: path) { throw special }
        // A disk without a free block or inode cannot make the -wal or -shm beside the file; SQLite
        // then retries read-only and reports that retry's errno (ENOENT: no such -wal), which
        // would send the operator looking for a file that is there.
        if fileSystemIsFull(holding: (path as NSString).deletingLastPathComponent) {
          throw QueueError.diskFull(path: path)
        }
        // SQLite's errno is its last fallback's: "No such file" for a file that is there, after an
        // I/O error on the -wal or -shm (a fault-injection review), names nothing to do.
        let reported = error.systemErrno != 0 ? String(cString: strerror(error.systemErrno)) : error.message
        let exists = FileManager.default.fileExists(atPath: path)
        throw QueueError.cannotOpen(
          path: path,
          reason: error.systemErrno == ENOENT && exists ? unclearOpenFailure : reported)
      }
      if error.isCorrupt { throw QueueError.corrupt(path: path) }
      if error.isBusy { throw QueueError.busy(path: path) }
      if let special = specialFile(at: path, reported: path) { throw special }
      throw QueueError.storage(path: path, detail: error.description)
    }
  }

  /// Whether the container file (when there) and its directory may be written, on a file system
  /// mounted for writing.
  static func writable(_ path: String) -> Bool {
    let directory = (path as NSString).deletingLastPathComponent
    var info = statvfs()
    guard statvfs(directory.isEmpty ? "." : directory, &info) == 0, info.f_flag & UInt(ST_RDONLY) == 0 else {
      return false
    }
    let file = FileManager.default.fileExists(atPath: path) ? access(path, W_OK) == 0 : true
    return file && access(directory.isEmpty ? "." : directory, W_OK) == 0
  }

  /// Why SQLite could not open the container for writing, when its own errno does not say (it
  /// reports its last fallback's). Nothing is opened to find out: this process may hold a
  /// connection to the file, and closing any descriptor of it would drop that connection's locks
  /// (a security review of a first version that opened the files).
  static let unclearOpenFailure =
    "SQLite could not open it, or the -wal or -shm beside it, and the file system gave no clear reason (an I/O "
    + "error?); retry, and if it lasts, check the disk"

  /// Whether the file system holding `directory` has no block or no inode left for this user
  /// (statvfs), so no new file can be made there. A file system that reports no inode count at
  /// all (btrfs) is judged by its blocks alone.
  static func fileSystemIsFull(holding directory: String) -> Bool {
    var info = statvfs()
    guard statvfs(directory.isEmpty ? "." : directory, &info) == 0 else { return false }
    return info.f_bavail == 0 || (info.f_files > 0 && info.f_favail == 0)
  }

  /// The error for something other than a regular file (a FIFO, socket, device, symlink or
  /// directory) at the database `path` or at its -wal, -shm or -journal path, which SQLite cannot
  /// use as one and may wait on (a FIFO); nil when there is none. `reported` names the container.
  package static func specialFile(at path: String, reported: String) -> QueueError? {
    specialFile(at: Array(path.utf8), reported: reported)
  }

  /// Refuses a container whose file, or -wal, -shm or -journal beside it, another user owns or
  /// group or others may write: SQLite would use a -wal someone else can append frames to as it is
  /// (one planted before the container's first open, in a shared directory such as /tmp, too).
  ///
  /// Its directory must be writable by nobody else (sticky or not: a sticky /tmp still lets others
  /// make the -wal that is not there yet) and be yours or root's: per-file checks cannot close the
  /// gap between them and SQLite's own open (outside review: a -wal planted in that gap, in /tmp,
  /// was written to by root's put, and records were lost).
  ///
  /// - Parameter owner: whose files they must be: the user running, or (for a scan's read of
  ///   another user's database) the database file's owner.
  /// - Throws: `QueueError.unsafeDirectory` for such a directory; `.ownedByOther` naming the first
  ///   file another user owns; else `.openToOthers` naming every file group or others may write.
  package static func checkPrivate(_ path: String, owner: uid_t = geteuid()) throws {
    var modes: [String: UInt32] = [:]
    let me = owner
    let directory = (path as NSString).deletingLastPathComponent
    var folder = stat()
    if stat(directory.isEmpty ? "." : directory, &folder) == 0,
      folder.st_mode & 0o022 != 0 || (folder.st_uid != me && folder.st_uid != 0)
    {
      throw QueueError.unsafeDirectory(
        path: path, directory: directory, mode: UInt32(folder.st_mode), owner: folder.st_uid)
    }
    for suffix in Vault.containerFileSuffixes {
      var info = stat()
      guard lstat(path + suffix, &info) == 0, info.st_mode & S_IFMT == S_IFREG else { continue }
      if info.st_uid != me { throw QueueError.ownedByOther(path: path, file: path + suffix, owner: info.st_uid) }
      if info.st_mode & 0o022 != 0 { modes[path + suffix] = UInt32(info.st_mode) }
    }
    if !modes.isEmpty { throw QueueError.openToOthers(path: path, modes: modes) }
  }

  /// `specialFile(at:reported:)` for a path given as its bytes (without a NUL).
  package static func specialFile(at path: [UInt8], reported: String) -> QueueError? {
    for suffix in Vault.containerFileSuffixes {
      var info = stat()
      let name = (path + Array(suffix.utf8) + [0]).map { CChar(bitPattern: $0) }
      guard lstat(name, &info) == 0, info.st_mode & S_IFMT != S_IFREG else { continue }
      let kind = SecureFile.kind(info.st_mode)
      return QueueError.cannotOpen(
        path: reported,
        reason: "its \(suffix.isEmpty ? "database file" : suffix + " file") is \(kind), not a regular file: "
          + "not opened (remove it if nothing should be there)")
    }
    return nil
  }
}

func milliseconds(_ date: Date) -> Int64 {
  // A date from a time that is not a number, or beyond any calendar, must not trap: NaN counts
  // as the epoch, and the rest is held within about ±31,700 years.
  let seconds = date.timeIntervalSince1970
  guard !seconds.isNaN else { return 0 }
  let limit = QueueContainer.longestSpan
  return Int64((min(max(seconds, -limit), limit) * 1000).rounded())
}
