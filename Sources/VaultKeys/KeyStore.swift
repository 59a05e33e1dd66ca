import Foundation
import VaultCrypto

/// The random 8-byte identifier of a vault's keyring. Every envelope carries it, so data restored
/// under a different keyring is told apart from tampered data.
public struct KeyringID: Hashable, Sendable, CustomStringConvertible {
  /// The length of every keyring id, in bytes: the size of the field in an envelope's header.
  public static let byteCount = 8
  /// The id as it is written into every envelope's header.
  public let bytes: [UInt8]

  /// Wraps the id as read from an envelope's header or a keyfile.
  ///
  /// - Parameter bytes: exactly `byteCount` bytes; anything else gives nil.
  public init?(bytes: [UInt8]) {
    guard bytes.count == Self.byteCount else { return nil }
    self.bytes = bytes
  }

  /// Parses the 16-character hex form used in the manifest and the Secret Service (written in
  /// lowercase by `hex`; uppercase digits are accepted too).
  ///
  /// - Parameter hex: the hex form; nil unless it is 16 characters of 8 hex pairs.
  public init?(hex: String) {
    // Exactly the form `hex` writes (16 lowercase hex digits): one id has one spelling, so ids
    // compared as text (manifest, container metadata) cannot differ in case or a sign and match.
    let digits = Array(hex.utf8)
    guard digits.count == 2 * Self.byteCount else { return nil }
    func value(_ digit: UInt8) -> UInt8? {
      switch digit {
      case UInt8(ascii: "0")...UInt8(ascii: "9"): digit - UInt8(ascii: "0")
      case UInt8(ascii: "a")...UInt8(ascii: "f"): digit - UInt8(ascii: "a") + 10
      default: nil
      }
    }
    var bytes: [UInt8] = []
    for pair in stride(from: 0, to: digits.count, by: 2) {
      guard let high = value(digits[pair]), let low = value(digits[pair + 1]) else { return nil }
      bytes.append(high << 4 | low)
    }
    self.bytes = bytes
  }

  /// A new id for a new vault, from `SecureRandom`: 64 random bits, so two vaults' ids do not
  /// collide by chance.
  ///
  /// - Returns: the new id.
  /// - Throws: `CryptoError.randomUnavailable` when the generator fails.
  public static func random() throws -> KeyringID { KeyringID(bytes: try SecureRandom.bytes(byteCount))! }

  /// The 16-character lowercase hex form: what the manifest, `status` and the Secret Service show.
  public var hex: String { bytes.map { String(format: "%02x", $0) }.joined() }
  /// The hex form, so an id prints as it appears in the manifest.
  public var description: String { hex }
}

/// Which backend holds a vault's key material.
public enum KeyStoreKind: String, Codable, Sendable, CaseIterable {
  /// The desktop keyring (GNOME Keyring, KWallet) over D-Bus: keys unlocked with the user's login.
  case secretService = "secret-service"
  /// A private file outside the vault's home (`KeyfileStore`), for servers and headless use.
  case keyfile
  /// Process memory only (`InMemoryKeyStore`): for tests; a vault on it cannot be reopened.
  case memory
}

/// Non-key records a vault keeps in its key store beside the keys, under fixed names.
///
/// They live in the key store (not in the vault home) because the home can be copied, restored
/// from an older backup or written by someone who cannot read the keys.
public enum KeyStoreRecord: String, Sendable, CaseIterable {
  /// The 32-byte key that authenticates the manifest (HMAC-SHA256). Made once, never retired.
  case integrityKey = "integrity-key"
  /// The newest manifest exactly as written (its signed bytes), so a stale or rolled-back manifest
  /// in the home is recognised and superseded. At most `KeyStoreRecord.maximumByteCount` bytes.
  case manifestMirror = "manifest"

  /// The largest record a store must accept.
  public static let maximumByteCount = 256 * 1024
}

/// Where key material lives: one item (or entry) per key version.
///
/// Implementations must never invent a key: `loadKey` returns nil only when the store can tell
/// for certain that the version is absent, and throws when it cannot tell (locked, timed out,
/// unreadable, insecure). `storeKey` refuses to replace an existing version with other material;
/// storing the very key a version already holds changes nothing and succeeds, so a call retried
/// after its answer was lost (a daemon that stored the key and died) does not fail.
public protocol KeyStore: Sendable {
  /// Which backend this is: what the manifest records and error messages name.
  var kind: KeyStoreKind { get }
  /// Loads a version's key.
  ///
  /// - Parameters:
  ///   - keyring: the vault whose key it is.
  ///   - version: the key version.
  /// - Returns: the key, or nil only when the store can tell for certain that it holds none.
  /// - Throws: `KeyStoreError` when the store cannot tell (locked, timed out, unreadable,
  ///   insecure) or the material is not a 256-bit key (`.corruptKey`).
  func loadKey(keyring: KeyringID, version: UInt32) throws -> SymmetricKey?
  /// Stores a new version's key; never replaces one. Storing the key the version already holds
  /// succeeds and changes nothing.
  ///
  /// - Parameters:
  ///   - key: the key.
  ///   - keyring: the vault whose key it is.
  ///   - version: the key version.
  /// - Throws: `KeyStoreError.keyExists` when the version already holds another key; other
  ///   `KeyStoreError` cases when the store cannot be written.
  func storeKey(_ key: SymmetricKey, keyring: KeyringID, version: UInt32) throws
  /// Deletes a version's material: what retiring a version does, after the manifest says so.
  ///
  /// - Parameters:
  ///   - keyring: the vault whose key it is.
  ///   - version: the key version.
  /// - Returns: whether anything was deleted (false when the version was not stored).
  /// - Throws: `KeyStoreError` when the store cannot be read or written.
  func deleteKey(keyring: KeyringID, version: UInt32) throws -> Bool
  /// The versions whose material the store holds for `keyring`.
  ///
  /// - Parameter keyring: the vault whose keys are listed.
  /// - Returns: the stored versions, whatever the manifest says about them.
  /// - Throws: `KeyStoreError` when the store cannot be read.
  func storedVersions(keyring: KeyringID) throws -> [UInt32]
  /// Throws the reason a new key could not be stored right now (locked, no provider, bad
  /// permissions), so a rotation can refuse before it records anything.
  ///
  /// - Throws: `KeyStoreError` naming that reason; returns when a key could be stored now.
  func checkWritable() throws
  /// A named record for `keyring`; nil only when the store can tell for certain it is absent.
  ///
  /// - Parameters:
  ///   - record: which record.
  ///   - keyring: the vault whose record it is.
  /// - Returns: the record's bytes in zeroizing storage, or nil when it is absent.
  /// - Throws: `KeyStoreError` when the store cannot tell, or the record is larger than any vault
  ///   writes (`.corruptRecord`).
  func loadRecord(_ record: KeyStoreRecord, keyring: KeyringID) throws -> SecureBytes?
  /// Stores `bytes` as the named record, replacing any previous value atomically.
  ///
  /// - Parameters:
  ///   - record: which record.
  ///   - bytes: its new value, at most `KeyStoreRecord.maximumByteCount` bytes.
  ///   - keyring: the vault whose record it is.
  /// - Throws: `KeyStoreError.recordTooLarge` for a value over the limit (nothing is stored);
  ///   `.keyfileMissing` when the manifest's copy is written to a keyfile that is not there (a
  ///   keyfile is made only by the integrity key or a key); other `KeyStoreError` cases when the
  ///   store cannot be written.
  func storeRecord(_ record: KeyStoreRecord, bytes: UnsafeRawBufferPointer, keyring: KeyringID) throws
  /// Every different key the store holds for a version: more than one only in a store that can
  /// hold several items for one version (the Secret Service), where `loadKey` refuses them as
  /// `.ambiguousKey`. Material that is not a 256-bit key is left out.
  ///
  /// - Parameters:
  ///   - keyring: the vault whose keys they are.
  ///   - version: the key version.
  /// - Returns: the distinct keys, empty when the store holds none.
  /// - Throws: `KeyStoreError` when the store cannot tell (locked, timed out, unreadable).
  func loadKeyCandidates(keyring: KeyringID, version: UInt32) throws -> [SymmetricKey]
}

extension KeyStore {
  /// A store that holds at most one item per version has one candidate: what `loadKey` reads.
  public func loadKeyCandidates(keyring: KeyringID, version: UInt32) throws -> [SymmetricKey] {
    try loadKey(keyring: keyring, version: version).map { [$0] } ?? []
  }

  /// Loads a version's key; where the store holds several different keys for it, takes the one
  /// whose key-check value is `check` (the manifest's record, which only the key that sealed the
  /// data matches): a stray item beside vault's own no longer stops the vault. Without a recorded
  /// value, or when not exactly one candidate matches it, they stay `.ambiguousKey`.
  ///
  /// - Parameters:
  ///   - keyring: the vault whose key it is.
  ///   - version: the key version.
  ///   - check: the key-check value recorded for `version`, or nil when none is recorded.
  /// - Returns: the key, or nil only when the store can tell for certain that it holds none.
  /// - Throws: as `loadKey`. The caller still compares a single key with `check`.
  public func loadKey(keyring: KeyringID, version: UInt32, check: String?) throws -> SymmetricKey? {
    do {
      return try loadKey(keyring: keyring, version: version)
    } catch KeyStoreError.ambiguousKey(let version, let count) where check != nil {
      let matching = try loadKeyCandidates(keyring: keyring, version: version).filter {
        try KeyVersionRecord.checkValue(of: $0) == check
      }
      guard matching.count == 1 else { throw KeyStoreError.ambiguousKey(version: version, count: count) }
      return matching[0]
    }
  }

  /// Stores a new version's key for a vault whose integrity key is already stored: a keyfile must
  /// still be there (`KeyfileStore.storeKey(_:keyring:version:mustExist:)`); other stores as
  /// `storeKey`.
  package func storeVaultKey(_ key: SymmetricKey, keyring: KeyringID, version: UInt32) throws {
    if let keyfile = self as? KeyfileStore {
      try keyfile.storeKey(key, keyring: keyring, version: version, mustExist: true)
    } else {
      try storeKey(key, keyring: keyring, version: version)
    }
  }
}

/// Why a key store could not do what was asked. The text names a kind and a fix, never key bytes.
public enum KeyStoreError: Error, Equatable, Sendable, CustomStringConvertible {
  /// No D-Bus session bus to reach the Secret Service on (`detail` says why): a headless session.
  case noSessionBus(detail: String)
  /// The session bus has no Secret Service provider (no keyring daemon running).
  case noProvider
  /// libsecret (`library`, the soname vault loads when the Secret Service is first used) is not
  /// installed or lacks a function vault calls (`reason`, the dynamic linker's message): the
  /// Secret Service cannot be reached from here. The next use tries again.
  case libraryMissing(library: String, reason: String)
  /// The Secret Service has no default collection to keep keys in.
  case noDefaultCollection
  /// The Secret Service collection or item is locked: the user must unlock it first.
  case locked
  /// The Secret Service's default collection is its `session` collection, kept in memory only and
  /// emptied when the session ends: a key stored there would be lost with every record under it.
  case sessionCollection
  /// The Secret Service did not answer `operation` within `seconds`: a hung daemon, not a missing key.
  /// Also for an operation not asked because a call moments before went unanswered (`operation`
  /// then says "not asked").
  case timedOut(seconds: Double, operation: String)
  /// Any other Secret Service failure, with its message.
  case service(detail: String)
  /// `storeKey` found the version already holding another key: a key is never overwritten.
  case keyExists(version: UInt32)
  /// The stored material for a version is not a 256-bit key.
  case corruptKey(version: UInt32)
  /// The keyfile (or its directory) is open to group or others: refused until it is private.
  case insecurePermissions(path: String, mode: UInt32, isDirectory: Bool)
  /// The keyfile belongs to another user than the one running (`expected`).
  case wrongOwner(path: String, owner: UInt32, expected: UInt32)
  /// The keyfile's directory is shared (sticky or writable by others), belongs to another user, or
  /// (when `owner` is `expected`) is open to group or others and holds other files than keyfiles
  /// (/etc, /home): a directory whose mode vault never advises changing.
  case unsafeKeyfileDirectory(path: String, mode: UInt32, owner: UInt32, expected: UInt32)
  /// The keyfile path is a symlink, directory, FIFO, socket or device: never followed or opened.
  case notARegularFile(path: String)
  /// The keyfile cannot be parsed (`reason` says how); no new key is made in its place.
  case corruptKeyfile(path: String, reason: String)
  /// The keyfile holds another vault's keys (`found`).
  case foreignKeyfile(path: String, found: KeyringID, expected: KeyringID)
  /// A file-system call on a key store file failed, with its `errno`.
  case io(path: String, operation: String, errno: Int32)
  /// `storeRecord` was given more than a key store holds; nothing was stored.
  case recordTooLarge(record: String, byteCount: Int, limit: Int)
  /// A stored record is not what vault wrote (larger than any record it writes, or an integrity
  /// key that is not 32 bytes).
  case corruptRecord(record: String)
  /// Several Secret Service items hold the same key version with different keys; vault will not
  /// guess which is right.
  case ambiguousKey(version: UInt32, count: Int)
  /// A keyfile lists one key version more than once.
  case duplicateKeyVersion(path: String, version: UInt32)
  /// The keyfile lies inside the data it protects (the vault home, or beside a container).
  case keyfileInsideData(path: String, dataDirectory: String)
  /// A key store file has more than one name: another may sit inside the data or outlive a rewrite.
  case hardLinked(path: String, links: Int)
  /// Several equally new Secret Service items hold one record; vault will not guess which is right.
  case ambiguousRecord(record: String, count: Int)
  /// A keyfile rewrite would grow past what vault reads back; nothing was written.
  case keyfileTooLarge(path: String, byteCount: Int, limit: Int)
  /// A write of the manifest's copy found no keyfile there (moved, renamed or deleted since the
  /// vault was opened): nothing was written and no file was made in its place, which would hold
  /// none of the vault's keys.
  case keyfileMissing(path: String)

  /// A sentence for a person that names the kind of failure and the fix; never key bytes.
  public var description: String {
    switch self {
    case .noSessionBus(let detail):
      "no D-Bus session bus (\(detail)); run inside a desktop session or dbus-run-session, or use a keyfile store"
    case .noProvider:
      "no Secret Service provider on the session bus (org.freedesktop.secrets); start gnome-keyring-daemon or use a keyfile store"
    case .libraryMissing(let library, let reason):
      "libsecret (\(library)) could not be loaded (\(reason)); install it (Debian: libsecret-1-0) or use a keyfile store"
    case .noDefaultCollection:
      "the Secret Service has no default collection; create one with your keyring manager"
    case .locked:
      "the Secret Service collection is locked; unlock it (log in to the desktop or use your keyring manager) and retry"
    case .sessionCollection:
      "the Secret Service's default collection is its session collection, which is kept in memory only and "
        + "emptied when the session ends: keys stored there would be lost, and every record sealed under them; "
        + "make a collection that is saved to disk (such as login) the default with your keyring manager, or use "
        + "a keyfile store"
    case .timedOut(let seconds, let operation):
      "the Secret Service did not answer within \(formatSeconds(seconds)) s (\(operation)); the keyring daemon may be hung: restart it and retry"
    case .service(let detail):
      "the Secret Service failed: \(detail)"
    case .keyExists(let version):
      "key version \(version) already exists in the store; refusing to overwrite it"
    case .corruptKey(let version):
      "the stored material for key version \(version) is not a 256-bit key; restore the key store from a backup"
    case .insecurePermissions(let path, let mode, let isDirectory):
      "\(isDirectory ? "keyfile directory" : "keyfile") \(path) has mode \(octal(mode)), open to group or others; "
        + "run: chmod \(isDirectory ? "700" : "600") \(ShellWord.quoted(path))   (then check nobody else copied it)"
    case .wrongOwner(let path, let owner, let expected) where SecureFile.isInDirectoryOf(expected, path):
      // In a directory of the user's own: made there by vault run as that uid (with sudo).
      "keyfile \(path) belongs to uid \(owner), while its directory is yours (uid \(expected)); if vault wrote it "
        + "while run as uid \(owner), give it back: \(SecureFile.chown(to: expected)) \(ShellWord.quoted(path)) (each key "
        + "is checked against the manifest's record of it, so a replaced one is refused after that)"
    case .wrongOwner(let path, let owner, let expected) where expected == 0:
      // Never tell root to take a user's file: that would lock the user out of their own keys.
      "keyfile \(path) belongs to uid \(owner), not root; run as uid \(owner), its owner, "
        + "or give root a keyfile of its own"
    case .wrongOwner(let path, let owner, let expected):
      "keyfile \(path) is owned by uid \(owner), not by you (uid \(expected)); if it is yours (made by vault run "
        + "with sudo), run: sudo chown \(expected) \(ShellWord.quoted(path)); otherwise use a keyfile of your own"
    case .unsafeKeyfileDirectory(let path, let mode, let owner, let expected):
      Self.unsafeDirectoryText(path: path, mode: mode, owner: owner, expected: expected)
    case .notARegularFile(let path):
      "\(path) is not a regular file (a symlink, directory, FIFO, socket or device); use a regular file as the keyfile"
    case .corruptKeyfile(let path, let reason):
      "keyfile \(path) is corrupt (\(reason)); restore it from a backup: no new key was made"
    case .foreignKeyfile(let path, let found, let expected):
      "keyfile \(path) belongs to vault \(found), not \(expected); use this vault's keyfile"
    case .io(let path, let operation, let code) where code == ENOSPC || code == EDQUOT:
      // A full disk is not damage: the file a write replaces stays as it was (atomicWrite), so the
      // fix is space, never a restore.
      "\(operation) \(path) failed: \(String(cString: strerror(code))); the disk (or quota) holding "
        + "\((path as NSString).deletingLastPathComponent) is full: free space there and retry"
    case .io(let path, let operation, let code) where code == EROFS:
      "\(operation) \(path) failed: \(String(cString: strerror(code))); this needs to write there (commands that "
        + "only read, such as status, list and stats, work on a read-only mount): remount it read-write and retry"
    case .io(let path, let operation, let code):
      "\(operation) \(path) failed: \(String(cString: strerror(code)))"
    case .recordTooLarge(let record, let byteCount, let limit):
      "the \(record) record is \(byteCount) bytes, more than the \(limit) a key store holds; nothing was stored"
    case .corruptRecord(let record):
      "the stored \(record) record is not what vault wrote (not a size vault writes); restore the key store from a backup"
    case .ambiguousKey(let version, let count):
      "the Secret Service holds \(count) items for key version \(version) of this vault, with different keys, and "
        + "vault cannot tell which one sealed your data (not exactly one holds the key the manifest recorded); "
        + "remove the ones vault did not make with your keyring manager (e.g. seahorse: compare their labels and "
        + "home attributes), then retry"
    case .duplicateKeyVersion(let path, let version):
      "keyfile \(path) lists key version \(version) more than once, so vault cannot tell which key sealed your "
        + "data; restore the keyfile from a backup (nothing was changed)"
    case .hardLinked(let path, let links):
      "\(path) has \(links) names (hard links); another name may sit inside the data or outlive a rewrite with "
        + "retired keys in it: find the others (find / -samefile \(ShellWord.quoted(path))) and remove them"
    case .keyfileInsideData(let path, let directory):
      "keyfile \(path) is inside \(directory), the data it protects, so every copy or backup of the data carries "
        + "its keys; keep the keyfile outside it, in a private directory of its own (the default, "
        + "$XDG_CONFIG_HOME/vault-keys/<vault id>.keys, else ~/.config/vault-keys/<vault id>.keys, is)"
    case .ambiguousRecord(let record, let count):
      "the Secret Service holds \(count) equally new items for the \(record) record and vault cannot tell which is "
        + "right; remove the ones you did not make with your keyring manager (e.g. seahorse), then retry"
    case .keyfileTooLarge(let path, let byteCount, let limit):
      "keyfile \(path) would grow to \(byteCount) bytes, more than the \(limit) vault reads back; nothing was "
        + "written (rotate to retire unused key versions)"
    case .keyfileMissing(let path):
      "the keyfile \(path), which holds the vault's keys, is not there (moved, renamed or deleted since the vault "
        + "was opened); nothing was written and no keyfile was made in its place. If it was moved, put it back "
        + "there; if it was deleted, restore it from a backup"
    }
  }
}

extension KeyStoreError {
  /// Whether a directory with `directoryMode` is shared with other users: sticky (/tmp) or
  /// writable by others. Such a directory's mode is not the user's to change.
  static func isShared(directoryMode mode: UInt32) -> Bool { mode & UInt32(S_ISVTX) != 0 || mode & 0o002 != 0 }

  static func unsafeDirectoryText(path: String, mode: UInt32, owner: UInt32, expected: UInt32) -> String {
    let privateDirectory =
      "keep the keyfile in a private directory of your own (mkdir -m 700 DIR; the default, "
      + "~/.config/vault-keys, is made that way) and put the keyfile there (DIR/NAME.keys)"
    if isShared(directoryMode: mode) {
      return "keyfile directory \(path) is shared with other users (mode \(octal(mode))), so they could read, "
        + "replace or delete keys there; do not change its mode: \(privateDirectory)"
    }
    if owner == expected {
      return "keyfile directory \(path) has mode \(octal(mode)), open to group or others, and holds other files "
        + "than keyfiles, so its mode is not vault's to change: \(privateDirectory)"
    }
    if expected == 0 {
      return "keyfile directory \(path) belongs to uid \(owner), not root; run as uid \(owner), its owner, "
        + "rather than handing their directory to root, or \(privateDirectory)"
    }
    return "keyfile directory \(path) belongs to uid \(owner), not to you (uid \(expected)), who could read or "
      + "replace keys there: \(privateDirectory)"
  }
}

package func octal(_ mode: UInt32) -> String { "0" + String(mode & 0o7777, radix: 8) }

func formatSeconds(_ seconds: Double) -> String {
  seconds == seconds.rounded() ? String(Int(seconds)) : String(format: "%.1f", seconds)
}

extension KeyStoreError: CodedError {
  /// `key-store.` and the case, in kebab case: stable across releases.
  public var code: String {
    switch self {
    case .noSessionBus: "key-store.no-session-bus"
    case .noProvider: "key-store.no-provider"
    case .libraryMissing: "key-store.library-missing"
    case .noDefaultCollection: "key-store.no-default-collection"
    case .locked: "key-store.locked"
    case .sessionCollection: "key-store.session-collection"
    case .timedOut: "key-store.timed-out"
    case .service: "key-store.service"
    case .keyExists: "key-store.key-exists"
    case .corruptKey: "key-store.corrupt-key"
    case .insecurePermissions: "key-store.insecure-permissions"
    case .wrongOwner: "key-store.wrong-owner"
    case .unsafeKeyfileDirectory: "key-store.unsafe-keyfile-directory"
    case .notARegularFile: "key-store.not-a-regular-file"
    case .corruptKeyfile: "key-store.corrupt-keyfile"
    case .foreignKeyfile: "key-store.foreign-keyfile"
    case .io: "key-store.io"
    case .recordTooLarge: "key-store.record-too-large"
    case .corruptRecord: "key-store.corrupt-record"
    case .ambiguousKey: "key-store.ambiguous-key"
    case .duplicateKeyVersion: "key-store.duplicate-key-version"
    case .keyfileInsideData: "key-store.keyfile-inside-data"
    case .hardLinked: "key-store.hard-linked"
    case .ambiguousRecord: "key-store.ambiguous-record"
    case .keyfileTooLarge: "key-store.keyfile-too-large"
    case .keyfileMissing: "key-store.keyfile-missing"
    }
  }
}
