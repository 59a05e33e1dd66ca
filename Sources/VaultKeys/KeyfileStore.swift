import Foundation
import Synchronization
import VaultCrypto

/// Keeps a vault's keys, and its named records, in one 0600 file inside a 0700 directory.
///
/// The file is replaced atomically on every change (under an exclusive `flock` of its directory,
/// so two processes never lose each other's change), read into zeroizing memory, and refused when
/// its mode, its directory's mode or its owner is wrong.
///
/// Keyfile format 2, big-endian, written by this release:
///
///     offset  size      field
///     0       3         magic "VKF"
///     3       1         format = 2
///     4       8         keyring (vault) id
///     12      4         key entry count N
///     16      4         record count M
///     20      36 × N    key entries: 4-byte version, then 32 key bytes; ascending by version,
///                       each version once (a file listing one twice is refused)
///     …       …         M records, ascending by name (bytewise):
///                         1 byte   name length L (1 … 64)
///                         L bytes  name, printable ASCII ("integrity-key", "manifest")
///                         4 bytes  value length V (at most `KeyStoreRecord.maximumByteCount`)
///                         V bytes  value
///     end−32  32        SHA-256 of every byte before it (detects corruption; it is not a MAC)
///
/// Format 1 (read, never written) is the same without the record count and the records:
/// "VKF", 1, keyring id, N, the key entries, SHA-256. A format-1 file is rewritten as format 2 on
/// the next change. A release that reads only format 1 refuses format 2 ("unknown format"), so it
/// can never rewrite a file and drop records it does not know; for the same reason this release
/// keeps records whose names it does not know, unchanged, when it rewrites a file.
public final class KeyfileStore: KeyStore {
  /// The keyfile, as given (not made absolute): what every read and rewrite opens.
  public let path: String
  private let protectedData: @Sendable () -> ProtectedData
  private let lock = Mutex<Void>(())

  /// Where the data a keyfile protects lives. A keyfile there would travel with every copy or
  /// backup of the data, so it is refused (`KeyStoreError.keyfileInsideData`).
  public struct ProtectedData: Sendable, Equatable {
    /// The vault home: the keyfile may not be anywhere inside it.
    public var home: String?
    /// Container files: the keyfile may not be in the directory that holds one.
    public var containers: [String]

    /// Names the data a keyfile must stay away from; the default names none.
    ///
    /// - Parameters:
    ///   - home: the vault home, or nil.
    ///   - containers: the container files' paths.
    public init(home: String? = nil, containers: [String] = []) {
      self.home = home
      self.containers = containers
    }
  }

  /// A store over the keyfile at `path`; nothing is read or created until it is used.
  ///
  /// - Parameters:
  ///   - path: the keyfile.
  ///   - protectedData: where the vault's data lives; asked before every read and write (a
  ///     container registered later counts too). The default protects nothing.
  public init(path: String, protectedData: @escaping @Sendable () -> ProtectedData = { ProtectedData() }) {
    self.path = path
    self.protectedData = protectedData
  }

  public var kind: KeyStoreKind { .keyfile }

  /// The default place for a vault's keyfile: outside its data directory, under the user's
  /// configuration directory (`$XDG_CONFIG_HOME/vault-keys/<vault id>.keys`).
  ///
  /// - Parameters:
  ///   - keyring: the vault id that names the file.
  ///   - environment: read for `XDG_CONFIG_HOME` and, when that is unset or empty, `HOME`
  ///     (`$HOME/.config`; the account's home directory when `HOME` is unset too).
  /// - Returns: the path; nothing is created.
  public static func defaultPath(keyring: KeyringID, environment: [String: String]) -> String {
    defaultDirectory(environment: environment) + "/\(keyring.hex).keys"
  }

  /// The directory of `defaultPath`: `$XDG_CONFIG_HOME/vault-keys`, else `$HOME/.config/vault-keys`.
  package static func defaultDirectory(environment: [String: String]) -> String {
    let config =
      environment["XDG_CONFIG_HOME"].flatMap { $0.isEmpty ? nil : $0 }
      ?? ((environment["HOME"] ?? NSHomeDirectory()) + "/.config")
    return config + "/vault-keys"
  }

  public func loadKey(keyring: KeyringID, version: UInt32) throws -> SymmetricKey? {
    try lock.withLock { _ in try read(keyring: keyring)?.keys[version] }
  }

  public func storeKey(_ key: SymmetricKey, keyring: KeyringID, version: UInt32) throws {
    try storeKey(key, keyring: keyring, version: version, mustExist: false)
  }

  /// `storeKey`, refusing with `KeyStoreError.keyfileMissing` (writing nothing) when `mustExist`
  /// and the file is not there. A vault's integrity key makes its keyfile, before any key, so a
  /// vault stores every key this way: a file gone by then was moved or deleted, and making it
  /// again would leave a keyfile holding only the new key, which hid the loss of the others.
  package func storeKey(_ key: SymmetricKey, keyring: KeyringID, version: UInt32, mustExist: Bool) throws {
    try change(keyring: keyring, createDirectory: !mustExist, mustExist: mustExist) { contents in
      if let stored = contents.keys[version] {
        guard stored == key else { throw KeyStoreError.keyExists(version: version) }
        return false
      }
      contents.keys[version] = key
      return true
    }
  }

  public func deleteKey(keyring: KeyringID, version: UInt32) throws -> Bool {
    var deleted = false
    try change(keyring: keyring, createDirectory: false) { contents in
      deleted = contents.keys.removeValue(forKey: version) != nil
      return deleted
    }
    return deleted
  }

  public func storedVersions(keyring: KeyringID) throws -> [UInt32] {
    try lock.withLock { _ in try read(keyring: keyring).map { $0.keys.keys.sorted() } ?? [] }
  }

  public func checkWritable() throws {
    try lock.withLock { _ in
      // Reading applies the location, owner and mode checks; then the directory must accept a new file.
      try checkLocation()
      if let file = try SecureFile.read(path, requirePrivate: true) { _ = file }
      if FileManager.default.fileExists(atPath: directory), access(directory, W_OK) != 0 {
        throw KeyStoreError.io(path: directory, operation: "write to", errno: errno)
      }
    }
  }

  public func loadRecord(_ record: KeyStoreRecord, keyring: KeyringID) throws -> SecureBytes? {
    try lock.withLock { _ in
      try read(keyring: keyring)?.records[record.rawValue].map { value in
        value.withUnsafeBytes { SecureBytes(copying: $0) }
      }
    }
  }

  public func storeRecord(_ record: KeyStoreRecord, bytes: UnsafeRawBufferPointer, keyring: KeyringID) throws {
    guard bytes.count <= KeyStoreRecord.maximumByteCount else {
      throw KeyStoreError.recordTooLarge(
        record: record.rawValue, byteCount: bytes.count, limit: KeyStoreRecord.maximumByteCount)
    }
    let value = SecureBytes(copying: bytes)
    // The manifest's copy goes only into a keyfile that is there: every vault writes its integrity
    // key (which makes the file) before its first manifest, so a file that is gone was moved or
    // deleted, and writing would make a keyfile holding none of the vault's keys, which hid the
    // loss (an outside review: a seal's manifest write after the keyfile was deleted made a
    // keyless one, and `doctor` no longer said the keyfile was not found).
    let mirror = record == .manifestMirror
    try change(keyring: keyring, createDirectory: !mirror, mustExist: mirror) { contents in
      contents.records[record.rawValue] = value
      return true
    }
  }

  /// Whether a keyfile exists at `path` at all (used to refuse `init` over someone's keys).
  public var exists: Bool {
    var info = stat()
    return lstat(path, &info) == 0
  }

  /// The file's permission bits, for status output; nil when it does not exist.
  public var mode: UInt32? {
    var info = stat()
    return lstat(path, &info) == 0 ? UInt32(info.st_mode) & 0o7777 : nil
  }

  private var directory: String {
    let directory = (path as NSString).deletingLastPathComponent
    return directory.isEmpty ? "." : directory
  }

  /// Refuses a keyfile inside the vault home or beside one of its containers.
  private func checkLocation() throws {
    let data = protectedData()
    guard data.home != nil || !data.containers.isEmpty else { return }
    let keyfileDirectory = Self.resolved(directory)
    if let home = data.home {
      let resolvedHome = Self.resolved(home)
      if keyfileDirectory == resolvedHome || keyfileDirectory.hasPrefix(resolvedHome == "/" ? "/" : resolvedHome + "/")
      {
        throw KeyStoreError.keyfileInsideData(path: path, dataDirectory: home)
      }
    }
    for container in data.containers {
      let containerDirectory = (container as NSString).deletingLastPathComponent
      if Self.resolved(containerDirectory) == keyfileDirectory {
        throw KeyStoreError.keyfileInsideData(path: path, dataDirectory: containerDirectory)
      }
    }
  }

  /// `path` absolute, with symlinks resolved as far as it exists (a directory not made yet
  /// resolves through its nearest existing parent).
  static func resolved(_ path: String) -> String {
    let absolute =
      ((path.hasPrefix("/") ? path : FileManager.default.currentDirectoryPath + "/" + path) as NSString)
      .standardizingPath
    var head = absolute
    var tail: [String] = []
    while true {
      if let real = realpath(head, nil) {
        defer { free(real) }
        let base = String(cString: real)
        return tail.reversed().reduce(base) { ($0 as NSString).appendingPathComponent($1) }
      }
      let parent = (head as NSString).deletingLastPathComponent
      guard !parent.isEmpty, parent != head else { return absolute }
      tail.append((head as NSString).lastPathComponent)
      head = parent
    }
  }

  private func read(keyring: KeyringID) throws -> KeyfileContents? {
    try checkLocation()
    guard let file = try SecureFile.read(path, requirePrivate: true) else { return nil }
    return try file.withUnsafeBytes { try KeyfileContents(parsing: $0, path: path, expecting: keyring) }
  }

  /// Removes `<keyfile>.tmp-*` files a crash left behind in the middle of a rewrite: they hold
  /// keys (perhaps of versions since retired). Runs under the same directory lock as every write,
  /// so a write in progress is never touched.
  ///
  /// - Returns: how many were removed (0 when the directory does not exist).
  /// - Throws: `KeyStoreError` when the directory cannot be opened, locked or synced; a
  ///   leftover that cannot be removed is skipped (and not counted), not an error.
  @discardableResult
  public func removeLeftoverTemporaryFiles() throws -> Int {
    try lock.withLock { _ in
      let fd = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
      if fd < 0, errno == ENOENT { return 0 }
      guard fd >= 0 else { throw KeyStoreError.io(path: directory, operation: "open directory", errno: errno) }
      defer { close(fd) }
      while flock(fd, LOCK_EX) != 0 {
        guard errno == EINTR else { throw KeyStoreError.io(path: directory, operation: "lock", errno: errno) }
      }
      return try sweepTemporaries()
    }
  }

  /// Removes this keyfile's `.tmp-*` files; the caller holds the directory's `flock`, which every
  /// writer takes, so none of them is a write in progress.
  private func sweepTemporaries() throws -> Int {
    let prefix = (path as NSString).lastPathComponent + ".tmp-"
    var removed = 0
    for name in (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? [] where name.hasPrefix(prefix) {
      var info = stat()
      let leftover = directory + "/" + name
      // Only regular files of ours (never follow a planted symlink).
      guard lstat(leftover, &info) == 0, info.st_mode & S_IFMT == S_IFREG, info.st_uid == geteuid() else { continue }
      if unlink(leftover) == 0 { removed += 1 }
    }
    if removed > 0 { try SecureFile.syncDirectory(directory) }
    return removed
  }

  /// Reads, lets `body` change the contents (it returns whether it changed anything), and
  /// replaces the file, all under the in-process lock and an exclusive `flock` of the directory.
  /// With `mustExist`, a file that is not there is `KeyStoreError.keyfileMissing`, and nothing
  /// is written.
  private func change(
    keyring: KeyringID, createDirectory: Bool, mustExist: Bool = false, _ body: (inout KeyfileContents) throws -> Bool
  ) throws {
    try lock.withLock { _ in
      try checkLocation()
      if createDirectory { try SecureFile.makeDirectory(directory, mode: 0o700) }
      let fd = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
      if fd < 0, errno == ENOENT, mustExist { throw KeyStoreError.keyfileMissing(path: path) }
      if fd < 0, errno == ENOENT, !createDirectory { return }
      guard fd >= 0 else { throw KeyStoreError.io(path: directory, operation: "open directory", errno: errno) }
      defer { close(fd) }
      while flock(fd, LOCK_EX) != 0 {
        guard errno == EINTR else { throw KeyStoreError.io(path: directory, operation: "lock", errno: errno) }
      }
      let existing = try read(keyring: keyring)
      if existing == nil, mustExist { throw KeyStoreError.keyfileMissing(path: path) }
      var contents = existing ?? KeyfileContents(keyring: keyring)
      guard try body(&contents) else { return }
      let file = try contents.serialized(path: path)
      try file.withUnsafeBytes { try SecureFile.atomicWrite(path, bytes: $0, mode: 0o600) }
      // A rewrite killed before its rename left a temporary with the keys of that moment: every
      // later rewrite removes it (best effort; the new file is already in place).
      _ = try? sweepTemporaries()
    }
  }
}

/// The decoded contents of a keyfile; the one place that knows its formats (parse and build).
package struct KeyfileContents {
  package var keyring: KeyringID
  package var keys: [UInt32: SymmetricKey] = [:]
  /// Every named record in the file by name, including names this release does not know.
  package var records: [String: SecureBytes] = [:]

  static let magic: [UInt8] = Array("VKF".utf8)
  static let writtenFormat: UInt8 = 2
  static let keyEntryByteCount = 4 + SymmetricKey.byteCount
  static let maximumNameByteCount = 64

  package init(keyring: KeyringID) { self.keyring = keyring }

  /// The size of a format-2 file holding `versions` keys and the records vault knows, each at
  /// its largest: what `SecureFile.readLimit` must accommodate.
  static func largestByteCount(versions: Int) -> Int {
    let records = KeyStoreRecord.allCases.reduce(0) { sum, record in
      sum + 1 + record.rawValue.utf8.count + 4 + KeyStoreRecord.maximumByteCount
    }
    return 20 + versions * keyEntryByteCount + records + SHA256.byteCount
  }

  /// Parses format 1 or 2.
  /// - Throws: `KeyStoreError.corruptKeyfile` with a reason naming what is wrong (never contents),
  ///   or `.foreignKeyfile` when it belongs to another keyring.
  package init(parsing bytes: UnsafeRawBufferPointer, path: String, expecting expected: KeyringID) throws {
    func corrupt(_ reason: String) -> KeyStoreError { .corruptKeyfile(path: path, reason: reason) }
    guard bytes.count >= 16 + SHA256.byteCount else { throw corrupt("too short") }
    guard Array(bytes[0..<3]) == Self.magic else { throw corrupt("not a vault keyfile") }
    let format = bytes[3]
    guard format == 1 || format == 2 else { throw corrupt("unknown format \(format)") }
    let checksumStart = bytes.count - SHA256.byteCount
    let expectedChecksum = try SHA256.hash(UnsafeRawBufferPointer(rebasing: bytes[0..<checksumStart]))
    guard expectedChecksum.elementsEqual(bytes[checksumStart...]) else { throw corrupt("checksum mismatch") }
    let found = KeyringID(bytes: Array(bytes[4..<12]))!
    guard found == expected else { throw KeyStoreError.foreignKeyfile(path: path, found: found, expected: expected) }
    keyring = found

    var reader = ByteReader(bytes: UnsafeRawBufferPointer(rebasing: bytes[0..<checksumStart]), offset: 12)
    let keyCount = Int(try reader.uint32(or: corrupt("truncated")))
    let recordCount = format == 1 ? 0 : Int(try reader.uint32(or: corrupt("truncated")))
    guard keyCount <= reader.remaining / Self.keyEntryByteCount else {
      throw corrupt("entry count does not match size")
    }
    for _ in 0..<keyCount {
      let version = try reader.uint32(or: corrupt("truncated"))
      // Two keys for one version: which sealed the data is unknowable, and a rewrite would drop one.
      guard keys[version] == nil else { throw KeyStoreError.duplicateKeyVersion(path: path, version: version) }
      keys[version] = try SymmetricKey(copying: try reader.take(SymmetricKey.byteCount, or: corrupt("truncated")))
    }
    var previousName: [UInt8]?
    for _ in 0..<recordCount {
      let nameCount = Int(try reader.take(1, or: corrupt("truncated record"))[0])
      let name = Array(try reader.take(nameCount, or: corrupt("truncated record")))
      guard (1...Self.maximumNameByteCount).contains(nameCount), name.allSatisfy({ (0x21...0x7e).contains($0) })
      else { throw corrupt("malformed record name") }
      guard previousName.map({ $0.lexicographicallyPrecedes(name) }) ?? true else {
        throw corrupt("records out of order or repeated")
      }
      previousName = name
      let valueCount = Int(try reader.uint32(or: corrupt("truncated record")))
      guard valueCount <= KeyStoreRecord.maximumByteCount else { throw corrupt("record larger than allowed") }
      records[String(decoding: name, as: UTF8.self)] = SecureBytes(
        copying: try reader.take(valueCount, or: corrupt("truncated record")))
    }
    guard reader.remaining == 0 else {
      throw corrupt(format == 1 ? "entry count does not match size" : "bytes after the last record")
    }
  }

  /// The format-2 file holding these contents, checksum included.
  /// - Throws: `KeyStoreError.keyfileTooLarge` when it would exceed what `SecureFile.read` loads.
  package func serialized(path: String) throws -> SecureBytes {
    let versions = keys.keys.sorted()
    let names = records.keys.sorted { Array($0.utf8).lexicographicallyPrecedes(Array($1.utf8)) }
    let recordBytes = names.reduce(0) { $0 + 1 + $1.utf8.count + 4 + records[$1]!.count }
    let bodyCount = 20 + versions.count * Self.keyEntryByteCount + recordBytes
    let total = bodyCount + SHA256.byteCount
    guard total <= SecureFile.readLimit else {
      throw KeyStoreError.keyfileTooLarge(path: path, byteCount: total, limit: SecureFile.readLimit)
    }
    return try SecureBytes(count: total) { out in
      var writer = ByteWriter(bytes: out)
      writer.put(Self.magic)
      writer.put([Self.writtenFormat])
      writer.put(keyring.bytes)
      writer.put(UInt32(versions.count))
      writer.put(UInt32(names.count))
      for version in versions {
        writer.put(version)
        keys[version]!.withUnsafeBytes { writer.put($0) }
      }
      for name in names {
        writer.put([UInt8(name.utf8.count)] + Array(name.utf8))
        let value = records[name]!
        writer.put(UInt32(value.count))
        value.withUnsafeBytes { writer.put($0) }
      }
      let checksum = try SHA256.hash(UnsafeRawBufferPointer(rebasing: out[0..<bodyCount]))
      writer.put(checksum)
    }
  }
}

/// Reads big-endian fields from a buffer, refusing to run past its end.
private struct ByteReader {
  let bytes: UnsafeRawBufferPointer
  var offset: Int

  var remaining: Int { bytes.count - offset }

  mutating func take(_ count: Int, or failure: @autoclosure () -> KeyStoreError) throws -> UnsafeRawBufferPointer {
    guard count <= remaining else { throw failure() }
    defer { offset += count }
    return UnsafeRawBufferPointer(rebasing: bytes[offset..<(offset + count)])
  }

  mutating func uint32(or failure: @autoclosure () -> KeyStoreError) throws -> UInt32 {
    try take(4, or: failure()).reduce(0) { $0 << 8 | UInt32($1) }
  }
}

/// Writes big-endian fields into a buffer sized for them beforehand.
private struct ByteWriter {
  let bytes: UnsafeMutableRawBufferPointer
  var offset = 0

  init(bytes: UnsafeMutableRawBufferPointer) { self.bytes = bytes }

  mutating func put(_ source: UnsafeRawBufferPointer) {
    UnsafeMutableRawBufferPointer(rebasing: bytes[offset..<(offset + source.count)]).copyMemory(from: source)
    offset += source.count
  }

  mutating func put(_ source: [UInt8]) { source.withUnsafeBytes { put($0) } }

  mutating func put(_ value: UInt32) { put((0..<4).map { UInt8(truncatingIfNeeded: value >> (24 - 8 * $0)) }) }
}

extension KeyfileStore {
  /// The kind of memory-backed file system (`tmpfs`, `ramfs`) that holds `path` (or, when it does
  /// not exist yet, its directory), or nil for any other or when it cannot be told. A keyfile
  /// there is gone at the next reboot, and every record sealed under its keys with it (an outside
  /// review: `init --keyfile /dev/shm/…` was accepted without a word; `$XDG_RUNTIME_DIR` is one).
  /// Found by the file's device in /proc/self/mountinfo (the Glibc module has no statfs).
  package static func volatileFileSystem(of path: String) -> String? {
    var info = stat()
    let directory = (path as NSString).deletingLastPathComponent
    guard stat(path, &info) == 0 || stat(directory, &info) == 0,
      let table = try? String(contentsOfFile: "/proc/self/mountinfo", encoding: .utf8)
    else { return nil }
    let file = LockWait.FileID(info)
    // Each line: ID PARENT MAJOR:MINOR ROOT MOUNTPOINT OPTIONS [TAGS…] - TYPE SOURCE SUPEROPTIONS.
    for line in table.split(separator: "\n") {
      let fields = line.split(separator: " ")
      guard fields.count > 2, fields[2] == "\(file.major):\(file.minor)", let dash = fields.firstIndex(of: "-"),
        dash + 1 < fields.count
      else { continue }
      let type = String(fields[dash + 1])
      return ["tmpfs", "ramfs"].contains(type) ? type : nil
    }
    return nil
  }

  /// The warning for a keyfile at `path` on a memory-backed file system, or nil.
  package static func volatileWarning(for path: String) -> String? {
    volatileFileSystem(of: path).map {
      "the keyfile \(path) is on a \($0) file system, which is memory: it is gone at the next reboot, and every "
        + "record sealed under its keys can never be opened again; move it to a disk now (`vault keyfile move "
        + "PATH`, with PATH on a disk)"
    }
  }
}
