import CSQLite
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
  public let path: String
  public let configuration: QueueConfiguration
  let vault: Vault
  let clock: @Sendable () -> Date
  let monotonic: @Sendable () -> MonotonicReading
  let random: @Sendable () -> Double
  private let lock = NSLock()
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
  /// without being changed.
  /// - Throws: `QueueError.registeredContainerMissing` / `.registeredContainerReplaced` when a
  ///   registered path does not hold the registered container; `.noContainer` when `.existing` or
  ///   `.readOnly` finds none; `.foreignContainer` when it was created by another vault; the other
  ///   `QueueError` kinds for unreadable, read-only, full or corrupt files.
  public init(
    path: String, vault: Vault, configuration: QueueConfiguration = QueueConfiguration(),
    mode: OpenMode = .createIfNeeded, clock: @escaping @Sendable () -> Date = Date.init,
    random: @escaping @Sendable () -> Double = { Double.random(in: 0..<1) },
    monotonic: @escaping @Sendable () -> MonotonicReading = MonotonicReading.system
  ) throws {
    let path = absolutePath(path)
    self.path = path
    self.vault = vault
    self.configuration = configuration
    self.clock = clock
    self.monotonic = monotonic
    self.random = random
    let keyring = vault.keyringID.hex
    let registered = try vault.registeredContainer(at: path)
    let probe = try Self.probe(path: path)
    let storageMode: Storage.Mode
    switch (probe, registered) {
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
      // A limit on what the cap may drop is kept in the container, so every writer honours it
      // (`vault telemetry log` into memo's container must not push out a memo either).
      if case .only(let names) = configuration.capVictims {
        let text = try Self.capVictimsText(names)
        try Self.translating(path) {
          var stored: String?
          try storage.readCapVictims.query { stored = $0.text(0) }
          if stored != text { try storage.transaction { _ = try storage.writeCapVictims.run([.text(text)]) } }
        }
      }
      // The age clock starts before the first record is stamped with it.
      try Self.translating(path) {
        var started = false
        try storage.readAgeClock.query { if $0.text(0) == "age_clock" { started = true } }
        if !started {
          try storage.transaction { _ = try observeAge(storage, wall: milliseconds(clock()), reading: monotonic()) }
        }
      }
    }
  }

  /// How a cap limit is kept in the container's meta (and bound in SQL): a sorted JSON array.
  static func capVictimsText(_ names: Set<String>) throws -> String {
    String(decoding: try JSONEncoder().encode(names.sorted()), as: UTF8.self)
  }

  static let notSQLite = "not a SQLite database"
  static let notRegular = "not a regular file"

  /// What the file at `path` is, read without creating or changing anything.
  public static func probe(path: String) throws -> ContainerProbe {
    var info = stat()
    guard lstat(path, &info) == 0 else {
      if errno == ENOENT { return .missing }
      throw QueueError.cannotOpen(path: path, reason: String(cString: strerror(errno)))
    }
    guard info.st_mode & S_IFMT == S_IFREG else { return .notAContainer(reason: notRegular) }
    guard info.st_size > 0 else { return .empty }
    // Only the 16-byte SQLite header is read here; O_NONBLOCK guards against a FIFO swapped in since lstat.
    let fd = Glibc.open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK)
    guard fd >= 0 else {
      let code = errno
      if code == EACCES || code == EPERM { throw QueueError.permissionDenied(path: path) }
      if code == EMFILE || code == ENFILE { throw QueueError.tooManyOpenFiles(path: path) }
      throw QueueError.cannotOpen(path: path, reason: String(cString: strerror(code)))
    }
    var header = [UInt8](repeating: 0, count: 16)
    let read = header.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress!, 16) }
    close(fd)
    guard read == 16, header == Array("SQLite format 3".utf8) + [0] else {
      return .notAContainer(reason: notSQLite)
    }
    return try translating(path) {
      let connection = try Connection(path: path, readOnly: true)
      try connection.execute("PRAGMA busy_timeout = 10000")
      // A database with no schema at all (a container whose creation was cut short) holds nothing.
      var objects = 0
      try connection.prepare("SELECT count(*) FROM sqlite_master").query { objects = Int($0.int(0)) }
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

  /// Records per key version in the container at `path`, from each envelope's header, read without
  /// any key (for `vault status`, which must work while the keyring is locked). Nil when the file
  /// does not exist.
  public static func recordCounts(path: String, keyring: KeyringID) throws -> RecordCounts? {
    guard FileManager.default.fileExists(atPath: path) else { return nil }
    return try translating(path) {
      let connection = try Connection(path: path, readOnly: true)
      try connection.execute("PRAGMA busy_timeout = 10000")
      return try headerCounts(
        connection.prepare(
          "SELECT substr(CAST(envelope AS BLOB), 1, 17) AS header, count(*) FROM records GROUP BY header"),
        keyring: keyring)
    }
  }

  /// Sorts the grouped 17-byte envelope headers into versions of `keyring` and foreign rows.
  static func headerCounts(_ statement: Statement, keyring: KeyringID) throws -> RecordCounts {
    var counts = RecordCounts(byVersion: [:])
    let prefixes = headerPrefixes(keyring)
    try statement.query { row in
      let header = row.blob(0)
      let count = Int(row.int(1))
      guard header.count == 17, prefixes.contains(where: { header.prefix(13).elementsEqual($0) }) else {
        counts.foreign += count
        return
      }
      let version = header[13..<17].reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
      counts.byVersion[version, default: 0] += count
      counts.suitesByVersion[version, default: []].insert(header[header.startIndex + 4])
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

  // MARK: - Enqueue

  /// Seals `payload` and stores it durably in `queue` under `id` (a random id when nil).
  /// - Returns: `.duplicate` (storing nothing) when a record with `id` is already in the container.
  @discardableResult
  public func enqueue(_ payload: [UInt8], queue: String, id: UUID? = nil) throws -> EnqueueOutcome {
    try enqueue(contentsOf: [(try id ?? SecureRandom.uuid(), payload)], queue: queue)[0]
  }

  /// Seals and stores several records in one transaction (one fsync for all of them).
  @discardableResult
  public func enqueue(contentsOf records: [(id: UUID, payload: [UInt8])], queue: String) throws -> [EnqueueOutcome] {
    try Self.validate(queue)
    for record in records where record.payload.count + Envelope.overhead > configuration.byteCap {
      throw QueueError.recordTooLarge(bytes: record.payload.count + Envelope.overhead, cap: configuration.byteCap)
    }
    return try withStorage { storage in
      try storage.transaction {
        // Rotation raises this before re-sealing. A writer still holding an older active key
        // reloads the manifest here, inside the write transaction: the rotator needs this same
        // write lock to raise it again, and it activates a version in the manifest before raising
        // the minimum to it, so one reload is always enough.
        let minimum = try storage.minimumSealVersion()
        if vault.activeVersion < minimum { try vault.reload() }
        guard vault.activeVersion >= minimum else {
          throw QueueError.storage(path: path, detail: "the vault's active key is older than the container's minimum")
        }
        let now = milliseconds(clock())
        let born = try ageNow(storage, wall: now, reading: monotonic())
        // Rows inserted by this transaction are never the cap's victims.
        let lastExisting = try storage.maxSeq.scalar() ?? 0
        var outcomes: [EnqueueOutcome] = []
        var added = 0
        for record in records {
          let idText = record.id.uuidString.lowercased()
          let envelope = try vault.seal(record.payload, context: context(queue: queue, id: idText))
          // The unique id decides: an existing record is kept as it is and reported as a duplicate.
          let inserted = try envelope.withUnsafeBytes { bytes in
            try storage.insert.run([
              .text(idText), .text(queue), .integer(now), .integer(Int64(envelope.count)),
              .integer(Int64(try Envelope.header(of: bytes).version)), .blob(bytes), .integer(born),
            ])
          }
          guard inserted == 1 else {
            outcomes.append(.duplicate)
            continue
          }
          added += envelope.count
          outcomes.append(.stored)
        }
        try storage.addBytes(added)
        try enforceCap(storage, victimsUpTo: lastExisting)
        return outcomes
      }
    }
  }

  /// Deletes the oldest records (not in flight, not added by this transaction) until the container
  /// is under its cap, counting them. Throws (rolling the enqueue back) when that cannot be done,
  /// so a record reported as stored is never one the cap removed.
  private func enforceCap(_ storage: Storage, victimsUpTo lastExisting: Int64) throws {
    var total = try storage.totalBytes()
    guard total > configuration.byteCap else { return }
    // This writer's limit, else the one a writer stored in the container, else any queue.
    var stored: String?
    try storage.readCapVictims.query { stored = $0.text(0) }
    let queues: Statement.Value =
      switch configuration.capVictims {
      case .anyQueue: stored.map { .text($0) } ?? .null
      case .only(let names):
        .text(try Self.capVictimsText(names))
      }
    var dropped = 0
    while total > configuration.byteCap {
      var victims: [(Int64, Int)] = []
      try storage.oldestDroppable.query([.integer(lastExisting), queues]) { row in
        victims.append((row.int(0), Int(row.int(1))))
      }
      guard !victims.isEmpty else {
        throw QueueError.capExceeded(cap: configuration.byteCap)
      }
      for (seq, size) in victims where total > configuration.byteCap {
        try storage.deleteBySeq.run([.integer(seq)])
        total -= size
        dropped += 1
        try storage.addBytes(-size)
      }
    }
    try storage.countDrop(.cap, dropped)
  }

  // MARK: - Delivery

  /// Claims due records of `queue`, oldest first, for delivery: at most `maxCount` records and
  /// about `maxBytes` of envelope (at least one record when any is due). Each claimed record is
  /// leased for `lease` seconds (at most `configuration.maximumLease`); if it is neither acked nor
  /// failed by then (a crash), it is due again. A deliverer that works longer keeps its lease with
  /// a `Claim`. Records that do not open are moved to review (counted as `undecryptable`), and the
  /// rest keep flowing.
  ///
  /// Clock steps strand nothing: a pending record due further ahead than `maximumDelay`, or a
  /// lease ending further ahead than `maximumLease`, was written by a clock that has since been set
  /// back, and is claimable now.
  ///
  /// With `dueBy`, only records due by then are claimed (a delivery pass uses its start time, so
  /// records it rescheduled with a near-zero jitter are not claimed again in the same pass). When
  /// a key cannot be read (locked keyring, timeout), the claimed records are released and the
  /// error is thrown: an unavailable key is not a broken record.
  public func claim(
    queue: String, maxCount: Int = 100, maxBytes: Int = 1 << 20, lease: TimeInterval = 60, dueBy: Date? = nil
  ) throws -> [ClaimedRecord] {
    try withStorage { storage in
      let leasedAt = BootClock.nanoseconds()
      let now = milliseconds(clock())
      // Strictly before the pass began: a retry rescheduled in the same millisecond waits.
      let due = dueBy.map { min(milliseconds($0) - 1, now) } ?? now
      var claimed: [(id: String, envelope: [UInt8], attempts: Int, createdAt: Int64, version: Int64)] = []
      let leaseUntil = now + Self.span(min(max(lease, 0), configuration.maximumLease))
      try storage.transaction {
        try expire(storage, now: now)
        var bytes = 0
        try storage.due.query([
          .text(queue), .integer(now), .integer(Int64(maxCount)), .integer(due),
          .integer(now + Self.span(configuration.maximumDelay)),
          .integer(now + Self.span(configuration.maximumLease)),
        ]) { row in
          let size = Int(row.int(3))
          guard claimed.isEmpty || bytes + size <= maxBytes else { return }
          bytes += size
          claimed.append((row.text(0) ?? "", row.blob(1), Int(row.int(2)) + 1, row.int(4), row.int(5)))
        }
        for record in claimed { try storage.markInFlight.run([.integer(leaseUntil), .text(record.id)]) }
      }
      var opened: [ClaimedRecord] = []
      var undecryptable: [(id: String, version: Int64)] = []
      for record in claimed {
        do {
          let payload = try vault.open(record.envelope, context: context(queue: queue, id: record.id))
          opened.append(
            ClaimedRecord(
              id: UUID(uuidString: record.id)!, queue: queue, payload: payload, attempts: record.attempts,
              createdAt: Date(timeIntervalSince1970: Double(record.createdAt) / 1000), leaseToken: leaseUntil,
              leasedAt: leasedAt))
        } catch is EnvelopeError {
          // The envelope itself is bad (tampered, moved, another keyring, retired key).
          undecryptable.append((record.id, record.version))
        } catch {
          // The key could not be read right now: give every claimed record back and report it.
          try storage.transaction { for record in claimed { try storage.release.run([.text(record.id)]) } }
          throw error
        }
      }
      if !undecryptable.isEmpty {
        try storage.transaction {
          var moved = 0
          for record in undecryptable {
            // Only if the row still holds the envelope that failed (a rotation may have re-sealed it).
            moved += try storage.quarantine.run([.text("undecryptable"), .text(record.id), .integer(record.version)])
          }
          try storage.countDrop(.undecryptable, moved)
        }
      }
      return opened
    }
  }

  /// Deletes delivered records, then checkpoints the WAL so their frames do not linger.
  public func ack(_ ids: [UUID]) throws {
    guard !ids.isEmpty else { return }
    try withStorage { storage in
      try storage.transaction {
        var freed = 0
        for id in ids {
          if let size = try storage.sizeOf.scalar([.text(id.uuidString.lowercased())]) {
            try storage.deleteByID.run([.text(id.uuidString.lowercased())])
            freed += Int(size)
          }
        }
        try storage.addBytes(-freed)
      }
      storage.checkpoint()
    }
  }

  /// Records a failed delivery: schedules the next attempt (exponential backoff with full jitter
  /// over all attempts, or `retryAfter` when the server gave one, capped), or parks the record when
  /// the server has refused it `attemptCeiling` times.
  ///
  /// - Parameter serverAnswered: false for network failures (no route, refused connection,
  ///   timeout). Those never count toward the ceiling: a record is not parked because the device
  ///   was offline for a day.
  ///   - sharedDelay: draw one jittered delay for all `ids` (from the highest attempt count among
  ///     them), so records sent together are retried together (a telemetry batch keeps its events
  ///     and its Idempotency-Key).
  @discardableResult
  public func fail(
    _ ids: [UUID], errorKind: String, retryAfter: TimeInterval? = nil, serverAnswered: Bool = true,
    sharedDelay: Bool = false
  ) throws -> [UUID: FailOutcome] {
    try withStorage { storage in
      let now = clock()
      var outcomes: [UUID: FailOutcome] = [:]
      var shared: TimeInterval?
      if sharedDelay, retryAfter == nil {
        var most: Int64 = 0
        for id in ids {
          try storage.attemptsOf.query([.text(id.uuidString.lowercased())]) { most = max(most, $0.int(0)) }
        }
        shared = configuration.backoff.delay(afterAttempts: Int(most), unit: random())
      }
      try storage.transaction {
        var parked = 0
        for id in ids {
          let idText = id.uuidString.lowercased()
          var attempts: Int64?
          var failures: Int64 = 0
          try storage.attemptsOf.query([.text(idText)]) { row in
            attempts = row.int(0)
            failures = row.int(1)
          }
          guard let attempts else { continue }
          if serverAnswered { failures += 1 }
          if serverAnswered, failures >= configuration.attemptCeiling {
            try storage.park.run([.text(errorKind), .integer(failures), .text(idText)])
            outcomes[id] = .parked
            parked += 1
          } else {
            let delay =
              retryAfter.map { min(max($0, 0), configuration.maximumRetryAfter) } ?? shared
              ?? configuration.backoff.delay(afterAttempts: Int(attempts), unit: random())
            let due = now.addingTimeInterval(delay)
            try storage.reschedule.run([
              .integer(milliseconds(due)), .text(errorKind), .integer(failures), .text(idText),
            ])
            outcomes[id] = .retryAt(due)
          }
        }
        try storage.countDrop(.parked, parked)
      }
      return outcomes
    }
  }

  /// Parks records at once (for example after a refused token refresh): kept, listable,
  /// resendable, never retried automatically.
  public func park(_ ids: [UUID], errorKind: String) throws {
    try move(ids, to: .parked, errorKind: errorKind, counting: .parked)
  }

  /// Gives claimed records back (pending, the claim's attempt not counted), as when a delivery
  /// pass ends before sending them.
  public func release(_ ids: [UUID]) throws {
    guard !ids.isEmpty else { return }
    try withStorage { storage in
      try storage.transaction { for id in ids { try storage.release.run([.text(id.uuidString.lowercased())]) } }
    }
  }

  /// Moves records the server refused to review; they are kept and never retried automatically.
  public func reject(_ ids: [UUID], errorKind: String) throws {
    try move(ids, to: .review, errorKind: errorKind, counting: .rejected)
  }

  /// Moves records out of the delivery flow in one transaction and counts them in the ledger.
  private func move(_ ids: [UUID], to state: RecordState, errorKind: String, counting reason: DropReason) throws {
    try withStorage { storage in
      try storage.transaction {
        var moved = 0
        for id in ids {
          moved += try storage.setState.run([
            .text(state.rawValue), .text(errorKind), .text(id.uuidString.lowercased()),
          ])
        }
        try storage.countDrop(reason, moved)
      }
    }
  }

  /// Returns parked or review records to pending with a fresh attempt count, and records stranded
  /// by a clock step too (a lease that ended, or ends further ahead than `maximumLease`; a due time
  /// further ahead than `maximumDelay`). A record leased by a live deliverer is left alone. Returns
  /// how many moved.
  @discardableResult
  public func resend(_ ids: [UUID]) throws -> Int {
    try withStorage { storage in
      let now = milliseconds(clock())
      let leaseLimit = now + Self.span(configuration.maximumLease)
      let dueLimit = now + Self.span(configuration.maximumDelay)
      return try storage.transaction {
        try ids.reduce(0) {
          $0
            + (try storage.resend.run([
              .text($1.uuidString.lowercased()), .integer(now), .integer(leaseLimit), .integer(dueLimit),
            ]))
        }
      }
    }
  }

  /// Extends the leases `held` (record id → lease token) to `lease` seconds from now, each only if
  /// that claim still holds it. Returns the new tokens of the records still held; a record acked,
  /// failed, released or claimed by another deliverer since is left out.
  func renew(_ held: [UUID: Int64], lease: TimeInterval) throws -> [UUID: Int64] {
    guard !held.isEmpty else { return [:] }
    return try withStorage { storage in
      var leaseUntil = milliseconds(clock()) + Self.span(min(max(lease, 0), configuration.maximumLease))
      // The new token must differ from the old ones, or a renewal could not be told from them.
      while held.values.contains(leaseUntil) { leaseUntil += 1 }
      return try storage.transaction {
        var renewed: [UUID: Int64] = [:]
        for (id, token) in held
        where try storage.renew.run([.integer(leaseUntil), .text(id.uuidString.lowercased()), .integer(token)]) == 1 {
          renewed[id] = leaseUntil
        }
        return renewed
      }
    }
  }

  /// Gives back the records `held` (record id → lease token) that this claim still holds: pending,
  /// the claim's attempt not counted. Returns how many went back.
  @discardableResult
  func release(held: [UUID: Int64]) throws -> Int {
    guard !held.isEmpty else { return 0 }
    return try withStorage { storage in
      try storage.transaction {
        try held.reduce(0) {
          $0 + (try storage.releaseHeld.run([.text($1.key.uuidString.lowercased()), .integer($1.value)]))
        }
      }
    }
  }

  /// A length of time in the milliseconds the columns hold.
  static func span(_ interval: TimeInterval) -> Int64 { Int64((interval * 1000).rounded()) }

  /// Makes the pending records of `queue` that last failed for want of a network due now (the
  /// network changed: their backoff restarts). Records a server answered (`http-…`: its
  /// Retry-After, backoff after a 5xx) keep their due time. Attempt counts are kept, so the
  /// attempt ceiling still parks what keeps failing.
  @discardableResult
  public func makeDue(queue: String) throws -> Int {
    try withStorage { storage in try storage.transaction { try storage.makeDue.run([.text(queue)]) } }
  }

  /// Deletes pending and parked records older than the maximum age, counting them. Age is read on
  /// the container's age clock (advanced here), never straight from the wall clock.
  private func expire(_ storage: Storage, now: Int64) throws {
    let ageClock = try observeAge(storage, wall: now, reading: monotonic())
    guard let age = configuration.maximumAge else { return }
    var freed = 0
    var count = 0
    let cutoff = ageClock - Self.span(age)
    try storage.expired.query([.integer(cutoff)]) { row in
      freed += Int(row.int(1))
      count += 1
    }
    guard count > 0 else { return }
    try storage.deleteExpired.run([.integer(cutoff)])
    try storage.addBytes(-freed)
    try storage.countDrop(.age, count)
  }

  // MARK: - Age

  /// The container's age clock now, in milliseconds: the value it had at its last observation plus
  /// the time that really passed since, by the monotonic clock when the reading is of the same
  /// boot, else by the wall clock's advance (never negative). Before its first observation, the
  /// wall clock.
  private func ageNow(_ storage: Storage, wall: Int64, reading: MonotonicReading) throws -> Int64 {
    var values: [String: String] = [:]
    try storage.readAgeClock.query { values[$0.text(0) ?? ""] = $0.text(1) }
    guard let last = values["age_clock"].flatMap({ Int64($0) }),
      let lastWall = values["age_wall"].flatMap({ Int64($0) })
    else { return wall }
    if !reading.boot.isEmpty, values["age_boot"] == reading.boot,
      let lastMonotonic = values["age_monotonic"].flatMap({ Int64($0) })
    {
      return last + max(0, reading.milliseconds - lastMonotonic)
    }
    return last + max(0, wall - lastWall)
  }

  /// Advances the age clock to now and records the readings it was advanced from. Inside a
  /// transaction.
  @discardableResult
  private func observeAge(_ storage: Storage, wall: Int64, reading: MonotonicReading) throws -> Int64 {
    let now = try ageNow(storage, wall: wall, reading: reading)
    for (key, value) in [
      ("age_clock", String(now)), ("age_wall", String(wall)), ("age_boot", reading.boot),
      ("age_monotonic", String(reading.milliseconds)),
    ] {
      try storage.writeMetaText.run([.text(key), .text(value)])
    }
    return now
  }

  // MARK: - Inspection

  public func stats() throws -> QueueStats {
    try withStorage { storage in
      var stats = QueueStats(
        container: path, total: 0, bytes: 0, byState: [:], byVersion: [:], byQueue: [:], dropped: [:],
        minimumSealVersion: UInt32(try storage.minimumSealVersion()))
      for state in RecordState.allCases { stats.byState[state.rawValue] = 0 }
      for reason in DropReason.allCases { stats.dropped[reason.rawValue] = 0 }
      try storage.countByState.query { stats.byState[$0.text(0) ?? "?"] = Int($0.int(1)) }
      // From the envelopes' own headers, as rotation counts them (not the plaintext column).
      for (version, count) in try Self.headerCounts(storage.countByHeader, keyring: vault.keyringID).byVersion {
        stats.byVersion[String(version)] = count
      }
      try storage.countByQueue.query { stats.byQueue[$0.text(0) ?? "?"] = Int($0.int(1)) }
      try storage.drops.query { stats.dropped[$0.text(0) ?? "?"] = Int($0.int(1)) }
      stats.total = stats.byState.values.reduce(0, +)
      stats.bytes = try storage.totalBytes()
      return stats
    }
  }

  /// Records (metadata only) of `queue` (all queues when nil) in `state` (all when nil), oldest first.
  public func list(queue: String? = nil, state: RecordState? = nil) throws -> [RecordSummary] {
    try withStorage { storage in
      var rows: [RecordSummary] = []
      try storage.listAll.query([queue.map { .text($0) } ?? .null, state.map { .text($0.rawValue) } ?? .null]) { row in
        rows.append(
          RecordSummary(
            id: row.text(0) ?? "", queue: row.text(1) ?? "",
            state: RecordState(rawValue: row.text(2) ?? "") ?? .pending, attempts: Int(row.int(3)),
            errorKind: row.text(4), createdAt: Self.timestamp(milliseconds: row.int(5)),
            nextAttemptAt: row.int(6) > 0 ? Self.timestamp(milliseconds: row.int(6)) : nil,
            bytes: Int(row.int(7)), keyVersion: UInt32(clamping: row.int(8))))
      }
      return rows
    }
  }

  /// The container's clock (for a delivery pass that claims what is due by its start).
  public var now: Date { clock() }

  /// How many records of `queue` are in `state` (without loading them).
  public func count(queue: String, state: RecordState) throws -> Int {
    try withStorage { Int(try $0.countInState.scalar([.text(queue), .text(state.rawValue)]) ?? 0) }
  }

  /// Writes the WAL back into the database and truncates it, so deleted or re-sealed rows leave no
  /// stale frames. Never waits: returns false (nothing lost; it runs again next time) when another
  /// connection is reading an older snapshot or writing.
  @discardableResult
  public func checkpoint() throws -> Bool { try withStorage { $0.checkpoint() } }

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
  static func timestamp(milliseconds: Int64) -> String {
    let formatter = ISO8601DateFormatter()
    formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
    formatter.timeZone = TimeZone(identifier: "UTC")
    return formatter.string(from: Date(timeIntervalSince1970: Double(milliseconds) / 1000))
  }

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
      default: break
      }
      if error.isFull { throw QueueError.diskFull(path: path) }
      if error.isOutOfMemory { throw QueueError.outOfMemory(path: path) }
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
        throw QueueError.cannotOpen(
          path: path, reason: error.systemErrno != 0 ? String(cString: strerror(error.systemErrno)) : error.message)
      }
      if error.isCorrupt { throw QueueError.corrupt(path: path) }
      if error.isBusy { throw QueueError.busy(path: path) }
      throw QueueError.storage(path: path, detail: error.description)
    }
  }
}

func milliseconds(_ date: Date) -> Int64 { Int64((date.timeIntervalSince1970 * 1000).rounded()) }
