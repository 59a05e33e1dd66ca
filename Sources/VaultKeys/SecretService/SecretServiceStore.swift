// C boundary: libsecret and GIO, loaded on first use (CLibSecret). Every GError in VaultKeys is turned
// into a KeyStoreError here.
internal import CLibSecret
import Dispatch
import Foundation
import Synchronization
import VaultCrypto

/// What a quick look at the Secret Service found, for `--store auto`, `status` and `doctor`.
public enum SecretServiceProbe: Equatable, Sendable {
  /// A session bus, a provider and an unlocked default collection are there: keys can be stored.
  case available
  /// Keys cannot be stored there now; the error says why (no bus, no provider, locked, timed out).
  case unavailable(KeyStoreError)
}

/// How secrets cross D-Bus between vault and the Secret Service.
public enum SecretTransfer: String, Equatable, Sendable {
  /// An encrypted transfer session (gnome-keyring, KWallet: dh-ietf1024-sha256-aes128-cbc-pkcs7).
  case encrypted
  /// A "plain" session: libsecret fell back because the provider offers nothing else, and key
  /// bytes cross the session bus unencrypted (readable by whoever can watch it).
  case plain

  /// Classifies libsecret's session algorithm; nil when no session is open.
  ///
  /// - Parameter algorithms: libsecret's name for the session's algorithms: `plain`, anything
  ///   else counts as encrypted.
  public init?(algorithms: String?) {
    guard let algorithms else { return nil }
    self = algorithms == "plain" ? .plain : .encrypted
  }

  /// What `doctor` should say about it; nil when there is nothing to warn about.
  public var warning: String? {
    switch self {
    case .encrypted: nil
    case .plain:
      "the Secret Service offers only a plain transfer session: keys cross the session bus unencrypted, "
        + "readable by any process that can watch the bus; use a provider that supports encrypted sessions "
        + "(gnome-keyring, KWallet) or a keyfile store"
    }
  }
}

/// Keeps keys in the desktop Secret Service (gnome-keyring, KWallet …) through libsecret:
/// one item per key version in the default collection, with attributes `vault-id`, `version`
/// and `home` (the vault's home directory, so `init` can refuse to orphan existing keys); and
/// one item per named record, under a schema of its own (`org.vault.Record`: `vault-id`,
/// `record`, `home`, `generation`), so searches for keys never see records.
///
/// Every call has a deadline: a hung or stopped keyring daemon yields `.timedOut` instead of
/// blocking for D-Bus's own 25–50 s, and a call made within `timeout` seconds of one that went
/// unanswered (by any store of the process) fails at once with `.timedOut`, unasked. A daemon
/// that leaves the bus mid-call is tried once more on a new connection. A locked collection is
/// reported as `.locked`, never as an absent key, because libsecret's simple lookup returns "not
/// found" for both.
public final class SecretServiceStore: KeyStore {
  /// Seconds each operation may take before it fails as `KeyStoreError.timedOut`, as clamped
  /// by `init` (0 to a day); also how long after a timeout the process's calls fail at once.
  public let timeout: Double
  private let home: String?
  // libsecret's sync calls each run a private main loop; serialise ours to keep it simple.
  private let lock = Mutex<Void>(())

  /// A store that talks to the Secret Service on the session bus; nothing is contacted until it
  /// is used.
  ///
  /// - Parameters:
  ///   - timeout: seconds each operation may take before it is cancelled, at most a day (larger
  ///     and infinite values mean a day, negative ones 0, NaN the default of 5).
  ///   - home: stored as the `home` attribute of new items.
  public init(timeout: Double = 5, home: String? = nil) {
    // Each call turns it into a Dispatch deadline and a D-Bus timeout in Int32 milliseconds,
    // conversions that trap on inf, NaN or more than 24 days.
    self.timeout = timeout.isNaN ? 5 : min(max(timeout, 0), 86_400)
    self.home = home
  }

  public var kind: KeyStoreKind { .secretService }

  /// How secrets travelled in this process's last connection (nil before any); `.plain` means
  /// libsecret fell back to an unencrypted session, which `doctor` warns about.
  public var transfer: SecretTransfer? { lastTransfer.withLock { $0 } }
  private let lastTransfer = Mutex<SecretTransfer?>(nil)

  /// Checks that a session bus, a provider and an unlocked default collection are there.
  ///
  /// - Returns: `.available`, or `.unavailable` with the reason; it never throws, so a caller
  ///   choosing a store (`--store auto`) can fall back.
  public func probe() -> SecretServiceProbe {
    do {
      try lock.withLock { _ in
        try withDeadline("probe") { cancellable in
          let service = try connect(cancellable)
          defer { vault_g_object_unref(UnsafeMutableRawPointer(service)) }
          try requireUnlockedDefaultCollection(service, cancellable)
        }
      }
      return .available
    } catch let error as KeyStoreError {
      return .unavailable(error)
    } catch {
      return .unavailable(.service(detail: "unexpected error"))
    }
  }

  public func checkWritable() throws {
    if case .unavailable(let reason) = probe() { throw reason }
  }

  public func loadKey(keyring: KeyringID, version: UInt32) throws -> SymmetricKey? {
    let (keys, items, malformed) = try readKeys(keyring: keyring, version: version)
    if items == 0 { return nil }
    if malformed {
      if items > 1 { throw KeyStoreError.ambiguousKey(version: version, count: items) }
      throw KeyStoreError.corruptKey(version: version)
    }
    // Several items for one version holding different keys: which one sealed the data is
    // unknowable here; never pick one (`loadKey(keyring:version:check:)` picks by the manifest's
    // key-check value). Copies of one key (an item copied into another collection) are that key,
    // whichever is read.
    guard keys.count == 1 else { throw KeyStoreError.ambiguousKey(version: version, count: items) }
    return keys[0]
  }

  public func loadKeyCandidates(keyring: KeyringID, version: UInt32) throws -> [SymmetricKey] {
    try readKeys(keyring: keyring, version: version).keys
  }

  /// The different 256-bit keys held by the items for `version`, how many items there are, and
  /// whether any holds material of another size. A locked item is present but unreadable: the
  /// answer is `.locked`, never "absent".
  private func readKeys(keyring: KeyringID, version: UInt32) throws -> (
    keys: [SymmetricKey], items: Int, malformed: Bool
  ) {
    try lock.withLock { _ in
      try withDeadline("load key") { cancellable in
        let service = try connect(cancellable)
        defer { vault_g_object_unref(UnsafeMutableRawPointer(service)) }
        let list = try search(service, keyring: keyring, version: version, loadSecrets: true, cancellable)
        defer { vault_item_list_free(list) }
        let items = Self.items(list)
        var keys: [SymmetricKey] = []
        var malformed = false
        for item in items {
          guard vault_secret_item_get_locked(item) == 0 else { throw KeyStoreError.locked }
          guard let value = vault_secret_item_get_secret(item) else {
            throw KeyStoreError.service(detail: "item returned no secret")
          }
          defer { vault_secret_value_unref(value) }
          var length = 0
          let bytes = vault_secret_value_get(value, &length)
          guard let bytes, length == SymmetricKey.byteCount else {
            malformed = true
            continue
          }
          let key = try SymmetricKey(copying: UnsafeRawBufferPointer(start: bytes, count: length))
          if !keys.contains(key) { keys.append(key) }
        }
        return (keys, items.count, malformed)
      }
    }
  }

  public func storeKey(_ key: SymmetricKey, keyring: KeyringID, version: UInt32) throws {
    try lock.withLock { _ in
      try withDeadline("store key") { cancellable in
        let service = try connect(cancellable)
        defer { vault_g_object_unref(UnsafeMutableRawPointer(service)) }
        try requireUnlockedDefaultCollection(service, cancellable)
        // With secrets: none to load when nothing is stored, the usual case.
        let existing = try search(service, keyring: keyring, version: version, loadSecrets: true, cancellable)
        defer { vault_item_list_free(existing) }
        if existing != nil {
          // The same key already stored is this call's own item: a daemon that stored it and died
          // before answering is asked again (`withDeadline`'s retry), and must not be told to
          // refuse. Any other material is never replaced.
          guard try Self.holdOnly(key, Self.items(existing)) else { throw KeyStoreError.keyExists(version: version) }
          return
        }

        let schema = vault_key_schema_new()
        defer { vault_secret_schema_unref(schema) }
        let attributes = vault_attributes_new(keyring.hex, String(version), home)
        defer { vault_g_hash_table_unref(attributes) }
        let value = key.withUnsafeBytes { bytes in
          vault_secret_value_new(
            bytes.baseAddress!.assumingMemoryBound(to: CChar.self), bytes.count, "application/octet-stream")
        }
        defer { vault_secret_value_unref(value) }
        var error: UnsafeMutablePointer<VaultGError>?
        let label = "vault key \(keyring.hex) version \(version)"
        let stored = vault_secret_store(
          service, schema, attributes, "default", label, value, cancellable, &error)
        guard stored != 0 else { throw translate(error, cancellable, operation: "store key") }
      }
    }
  }

  /// Whether `items` (searched with their secrets) are all unlocked and hold exactly `key`.
  private static func holdOnly(_ key: SymmetricKey, _ items: [OpaquePointer]) throws -> Bool {
    guard !items.isEmpty else { return false }
    for item in items {
      guard vault_secret_item_get_locked(item) == 0, let value = vault_secret_item_get_secret(item) else {
        return false
      }
      defer { vault_secret_value_unref(value) }
      var length = 0
      guard let bytes = vault_secret_value_get(value, &length), length == SymmetricKey.byteCount,
        try SymmetricKey(copying: UnsafeRawBufferPointer(start: bytes, count: length)) == key
      else { return false }
    }
    return true
  }

  public func deleteKey(keyring: KeyringID, version: UInt32) throws -> Bool {
    try lock.withLock { _ in
      try withDeadline("delete key") { cancellable in
        let service = try connect(cancellable)
        defer { vault_g_object_unref(UnsafeMutableRawPointer(service)) }
        // Item by item rather than libsecret's secret_service_clear_sync, which (0.20.5) returns its
        // task twice when a deletion fails or is cancelled, printing a GLib-GIO-CRITICAL on the
        // command's standard error. As clear does, a locked item is passed over: the caller checks
        // what the store still lists.
        let list = try search(service, keyring: keyring, version: version, loadSecrets: false, cancellable)
        defer { vault_item_list_free(list) }
        var deleted = false
        for item in Self.items(list) where vault_secret_item_get_locked(item) == 0 {
          var error: UnsafeMutablePointer<VaultGError>?
          guard vault_secret_item_delete(item, cancellable, &error) != 0 else {
            throw translate(error, cancellable, operation: "delete key")
          }
          deleted = true
        }
        return deleted
      }
    }
  }

  public func storedVersions(keyring: KeyringID) throws -> [UInt32] {
    try lock.withLock { _ in
      try withDeadline("list keys") { cancellable in
        let service = try connect(cancellable)
        defer { vault_g_object_unref(UnsafeMutableRawPointer(service)) }
        let items = try search(service, keyring: keyring, version: nil, loadSecrets: false, cancellable)
        defer { vault_item_list_free(items) }
        // Duplicates are listed once; loading that version reports them (`ambiguousKey`).
        return Set(attributeValues(items, "version").compactMap { UInt32($0) }).sorted()
      }
    }
  }

  /// What this store holds for `keyring` only in the collection the `session` alias names, which
  /// gnome-keyring keeps in memory and empties when the session ends or the daemon restarts: the
  /// key versions all of whose items are there, and whether every integrity-key item is. Storing
  /// there is refused (`.sessionCollection`), but an item a release before that check stored
  /// there, or one moved there by hand, is read like any other until it is gone, and every record
  /// under it with it.
  ///
  /// - Parameter keyring: the vault whose items are looked at.
  /// - Returns: those versions, sorted, and the integrity key's answer; nothing when the provider
  ///   names no session collection or does not keep aliases apart.
  /// - Throws: `KeyStoreError` when the store cannot be read (locked items are still listed).
  package func keptOnlyInMemory(keyring: KeyringID) throws -> (versions: [UInt32], integrityKey: Bool) {
    try lock.withLock { _ in
      try withDeadline("list keys") { cancellable in
        let service = try connect(cancellable)
        defer { vault_g_object_unref(UnsafeMutableRawPointer(service)) }
        var error: UnsafeMutablePointer<VaultGError>?
        guard let bus = vault_g_bus_get_session(cancellable, &error) else {
          throw translate(error, cancellable, operation: "connect to the session bus")
        }
        defer { vault_g_object_unref(UnsafeMutableRawPointer(bus)) }
        guard let session = vault_secret_session_collection_path(bus, Int32(timeout * 1000), cancellable, &error)
        else {
          if error != nil { throw translate(error, cancellable, operation: "read the session alias") }
          return ([], false)
        }
        let prefix = String(cString: session) + "/"
        vault_g_free(session)
        func inSession(_ item: OpaquePointer) -> Bool {
          vault_item_object_path(item).map { String(cString: $0).hasPrefix(prefix) } ?? false
        }
        let keys = try search(service, keyring: keyring, version: nil, loadSecrets: false, cancellable)
        defer { vault_item_list_free(keys) }
        var items: [UInt32: (all: Int, inSession: Int)] = [:]
        for item in Self.items(keys) {
          guard let value = vault_item_attribute(item, "version") else { continue }
          defer { vault_g_free(value) }
          guard let version = UInt32(String(cString: value)) else { continue }
          items[version, default: (0, 0)].all += 1
          if inSession(item) { items[version, default: (0, 0)].inSession += 1 }
        }
        let records = try searchRecords(
          service, keyring: keyring, record: .integrityKey, loadSecrets: false, cancellable)
        defer { vault_item_list_free(records) }
        let integrityItems = Self.items(records)
        return (
          items.filter { $0.value.all == $0.value.inSession }.keys.sorted(),
          !integrityItems.isEmpty && integrityItems.allSatisfy(inSession)
        )
      }
    }
  }

  /// The newest item of `record`: several items of one record exist only for a moment (a replace
  /// stores the new item before it removes the older ones) or after a crash in that moment, and
  /// the `generation` attribute says which is newest. Any locked item makes the answer `.locked`.
  ///
  /// - Parameters:
  ///   - record: which record.
  ///   - keyring: the vault whose record it is.
  /// - Returns: the newest item's value in zeroizing storage, or nil when there is none.
  /// - Throws: `KeyStoreError.locked`, `.ambiguousRecord` (several equally new items),
  ///   `.corruptRecord` (a value larger than vault writes, or an integrity key that is not 32
  ///   bytes), `.timedOut`, or another Secret Service failure.
  public func loadRecord(_ record: KeyStoreRecord, keyring: KeyringID) throws -> SecureBytes? {
    // Another process replacing the record deletes the older item between this search and the
    // secret's transfer ("No such secret item"): search again, a few times, before giving up.
    var attempt = 0
    while true {
      do {
        return try loadRecordOnce(record, keyring: keyring)
      } catch KeyStoreError.service where attempt < 4 {
        attempt += 1
        usleep(20_000 * UInt32(attempt))
      }
    }
  }

  private func loadRecordOnce(_ record: KeyStoreRecord, keyring: KeyringID) throws -> SecureBytes? {
    try lock.withLock { _ in
      try withDeadline("load record") { cancellable in
        let service = try connect(cancellable)
        defer { vault_g_object_unref(UnsafeMutableRawPointer(service)) }
        let list = try searchRecords(service, keyring: keyring, record: record, loadSecrets: true, cancellable)
        defer { vault_item_list_free(list) }
        let items = Self.items(list)
        guard !items.isEmpty else { return nil }
        // A locked item is present but unreadable (and may be the newest): never report "absent".
        guard items.allSatisfy({ vault_secret_item_get_locked($0) == 0 }) else { throw KeyStoreError.locked }
        let newest = items.map { ($0, generation(of: $0)) }.sorted { $0.1 > $1.1 }
        if newest.count > 1, newest[0].1 == newest[1].1 {
          throw KeyStoreError.ambiguousRecord(
            record: record.rawValue, count: newest.filter { $0.1 == newest[0].1 }.count)
        }
        guard let value = vault_secret_item_get_secret(newest[0].0) else {
          throw KeyStoreError.service(detail: "item returned no secret")
        }
        defer { vault_secret_value_unref(value) }
        var length = 0
        let bytes = vault_secret_value_get(value, &length)
        guard length <= KeyStoreRecord.maximumByteCount, bytes != nil || length == 0 else {
          throw KeyStoreError.corruptRecord(record: record.rawValue)
        }
        // The integrity key is always a 256-bit key: other bytes (another program's) are no key
        // of vault's, and say so rather than a bare length error.
        if record == .integrityKey, length != SymmetricKey.byteCount {
          throw KeyStoreError.corruptRecord(record: record.rawValue)
        }
        return SecureBytes(copying: UnsafeRawBufferPointer(start: bytes, count: length))
      }
    }
  }

  /// Stores a new item for `record` with the next generation, then removes the older items. A
  /// reader sees the old value until the new item exists and the new one from then on (a reader
  /// whose item is removed under it searches again); an older
  /// item that could not be removed is ignored by `loadRecord` and removed by the next store.
  /// Writers of one record must be serialised (the vault writes its records under its manifest lock).
  ///
  /// - Parameters:
  ///   - record: which record.
  ///   - bytes: its new value, at most `KeyStoreRecord.maximumByteCount` bytes.
  ///   - keyring: the vault whose record it is.
  /// - Throws: `KeyStoreError.recordTooLarge` (nothing stored), `.locked`, `.timedOut`, or another
  ///   Secret Service failure.
  public func storeRecord(_ record: KeyStoreRecord, bytes: UnsafeRawBufferPointer, keyring: KeyringID) throws {
    guard bytes.count <= KeyStoreRecord.maximumByteCount else {
      throw KeyStoreError.recordTooLarge(
        record: record.rawValue, byteCount: bytes.count, limit: KeyStoreRecord.maximumByteCount)
    }
    try lock.withLock { _ in
      try withDeadline("store record") { cancellable in
        let service = try connect(cancellable)
        defer { vault_g_object_unref(UnsafeMutableRawPointer(service)) }
        try requireUnlockedDefaultCollection(service, cancellable)
        let existing = try searchRecords(service, keyring: keyring, record: record, loadSecrets: false, cancellable)
        let existingItems = Self.items(existing)
        defer { vault_item_list_free(existing) }
        guard existingItems.allSatisfy({ vault_secret_item_get_locked($0) == 0 }) else { throw KeyStoreError.locked }
        let (next, overflow) = (existingItems.map { generation(of: $0) }.max() ?? 0).addingReportingOverflow(1)
        guard !overflow else { throw KeyStoreError.corruptRecord(record: record.rawValue) }

        let schema = vault_record_schema_new()
        defer { vault_secret_schema_unref(schema) }
        let attributes = vault_record_attributes_new(keyring.hex, record.rawValue, home, String(next))
        defer { vault_g_hash_table_unref(attributes) }
        // An empty buffer may have no base address; libsecret needs a pointer either way.
        let value = withUnsafePointer(to: 0 as CChar) { empty in
          vault_secret_value_new(
            bytes.baseAddress?.assumingMemoryBound(to: CChar.self) ?? empty, bytes.count, "application/octet-stream")
        }
        defer { vault_secret_value_unref(value) }
        var error: UnsafeMutablePointer<VaultGError>?
        let label = "vault record \(record.rawValue) of \(keyring.hex)"
        let stored = vault_secret_store(
          service, schema, attributes, "default", label, value, cancellable, &error)
        guard stored != 0 else { throw translate(error, cancellable, operation: "store record") }

        // Best effort from here: the new item is stored and is the newest whatever happens next.
        guard
          let after = try? searchRecords(service, keyring: keyring, record: record, loadSecrets: false, cancellable)
        else { return }
        defer { vault_item_list_free(after) }
        for item in Self.items(after) where generation(of: item) < next {
          var deleteError: UnsafeMutablePointer<VaultGError>?
          vault_secret_item_delete(item, cancellable, &deleteError)
          if let deleteError { vault_g_error_free(deleteError) }
        }
      }
    }
  }

  /// The ids of vaults whose keys were stored for `home` (to refuse an `init` that would orphan
  /// them). Records alone do not count: a vault id with records but no key never sealed anything
  /// (an `init` that failed before storing its first key), and must not block the retry. Works while the collection is locked: a search returns locked items
  /// with their attributes. An item whose `vault-id` cannot be read counts as "unknown".
  ///
  /// - Parameter home: the absolute home path, compared with each item's `home` attribute.
  /// - Returns: the vault ids found, each once; empty when there are none.
  /// - Throws: `KeyStoreError` when the Secret Service cannot be asked (no session bus, no
  ///   provider, timed out, failed).
  public func keyringIDs(forHome home: String) throws -> [String] {
    Set(try keyItems(home: home).map(\.vaultID)).sorted()
  }

  /// The homes that vaults' key items were stored for, by vault id, across every home: how a
  /// vault whose home was moved (its items still name the old path) is found. Works while the
  /// collection is locked, as `keyringIDs(forHome:)` does.
  ///
  /// - Returns: each vault id (or "unknown") with the home attributes of its key items.
  /// - Throws: `KeyStoreError` when the Secret Service cannot be asked.
  public func homesByVault() throws -> [String: Set<String>] {
    try keyItems(home: nil).reduce(into: [:]) { homes, item in
      homes[item.vaultID, default: []].formUnion(item.home.map { [$0] } ?? [])
    }
  }

  /// The vault id and home attribute of every key item (records alone do not count: a vault id
  /// with records but no key never sealed anything), of `home` only unless it is nil.
  private func keyItems(home: String?) throws -> [(vaultID: String, home: String?)] {
    try lock.withLock { _ in
      try withDeadline("list vaults") { cancellable in
        let service = try connect(cancellable)
        defer { vault_g_object_unref(UnsafeMutableRawPointer(service)) }
        let schema = vault_key_schema_new()
        defer { vault_secret_schema_unref(schema) }
        let attributes = vault_attributes_new(nil, nil, home)
        defer { vault_g_hash_table_unref(attributes) }
        var error: UnsafeMutablePointer<VaultGError>?
        let list = vault_secret_search(service, schema, attributes, 0, cancellable, &error)
        if let error { throw translate(error, cancellable, operation: "list vaults") }
        defer { vault_item_list_free(list) }
        return Self.items(list).map { item in
          let id = vault_item_attribute(item, "vault-id")
          let itemHome = vault_item_attribute(item, "home")
          defer {
            vault_g_free(id)
            vault_g_free(itemHome)
          }
          return (id.map { String(cString: $0) } ?? "unknown", itemHome.map { String(cString: $0) })
        }
      }
    }
  }

  // MARK: - libsecret plumbing

  private func attributeValues(_ items: UnsafeMutablePointer<VaultGList>?, _ name: String) -> [String] {
    var values: [String] = []
    var node = items
    while let current = node {
      let item = OpaquePointer(current.pointee.data)
      if let value = vault_item_attribute(item, name) {
        values.append(String(cString: value))
        vault_g_free(value)
      }
      node = current.pointee.next
    }
    return values
  }

  private static func items(_ list: UnsafeMutablePointer<VaultGList>?) -> [OpaquePointer] {
    var items: [OpaquePointer] = []
    var node = list
    while let current = node {
      items.append(OpaquePointer(current.pointee.data))
      node = current.pointee.next
    }
    return items
  }

  /// A record item's `generation`; 0 when it has none (an item vault did not write).
  private func generation(of item: OpaquePointer) -> UInt64 {
    guard let value = vault_item_attribute(item, "generation") else { return 0 }
    defer { vault_g_free(value) }
    return UInt64(String(cString: value)) ?? 0
  }

  private func searchRecords(
    _ service: OpaquePointer, keyring: KeyringID, record: KeyStoreRecord, loadSecrets: Bool,
    _ cancellable: OpaquePointer
  ) throws -> UnsafeMutablePointer<VaultGList>? {
    let schema = vault_record_schema_new()
    defer { vault_secret_schema_unref(schema) }
    let attributes = vault_record_attributes_new(keyring.hex, record.rawValue, nil, nil)
    defer { vault_g_hash_table_unref(attributes) }
    var error: UnsafeMutablePointer<VaultGError>?
    let items = vault_secret_search(service, schema, attributes, loadSecrets ? 1 : 0, cancellable, &error)
    if let error { throw translate(error, cancellable, operation: "search records") }
    return items
  }

  private func search(
    _ service: OpaquePointer, keyring: KeyringID, version: UInt32?, loadSecrets: Bool,
    _ cancellable: OpaquePointer
  ) throws -> UnsafeMutablePointer<VaultGList>? {
    let schema = vault_key_schema_new()
    defer { vault_secret_schema_unref(schema) }
    let attributes = vault_attributes_new(keyring.hex, version.map { String($0) }, nil)
    defer { vault_g_hash_table_unref(attributes) }
    var error: UnsafeMutablePointer<VaultGError>?
    // SEARCH_ALL returns locked items too (without secrets), which is how "locked" is told from "absent".
    let items = vault_secret_search(service, schema, attributes, loadSecrets ? 1 : 0, cancellable, &error)
    if let error { throw translate(error, cancellable, operation: "search") }
    return items
  }

  /// Connects to the session bus, checks a provider exists (so libsecret does not wait on an
  /// activation that cannot happen), and returns the Secret Service proxy (caller unrefs).
  private func connect(_ cancellable: OpaquePointer) throws -> OpaquePointer {
    var error: UnsafeMutablePointer<VaultGError>?
    guard let bus = vault_g_bus_get_session(cancellable, &error) else {
      if vault_g_cancellable_is_cancelled(cancellable) != 0 {
        vault_g_error_free(error)
        throw KeyStoreError.timedOut(seconds: timeout, operation: "connect to the session bus")
      }
      let detail = error.map { String(cString: $0.pointee.message) } ?? "unknown"
      vault_g_error_free(error)
      throw KeyStoreError.noSessionBus(detail: Self.redactPaths(detail))
    }
    defer { vault_g_object_unref(UnsafeMutableRawPointer(bus)) }
    let present = vault_secret_provider_present(bus, Int32(timeout * 1000), cancellable, &error)
    if present < 0 { throw translate(error, cancellable, operation: "look for a provider") }
    if present == 0 { throw KeyStoreError.noProvider }
    guard let service = vault_secret_service_open(cancellable, &error) else {
      throw translate(error, cancellable, operation: "connect to the Secret Service")
    }
    // libsecret falls back to a "plain" session when the provider offers no encrypted one.
    let algorithms = vault_secret_service_get_session_algorithms(service).map { String(cString: $0) }
    lastTransfer.withLock { $0 = SecretTransfer(algorithms: algorithms) }
    return service
  }

  private func requireUnlockedDefaultCollection(
    _ service: OpaquePointer, _ cancellable: OpaquePointer
  ) throws {
    var error: UnsafeMutablePointer<VaultGError>?
    let collection = vault_secret_default_collection(service, cancellable, &error)
    if let error { throw translate(error, cancellable, operation: "find the default collection") }
    guard let collection else { throw KeyStoreError.noDefaultCollection }
    defer { vault_g_object_unref(UnsafeMutableRawPointer(collection)) }
    guard vault_secret_collection_get_locked(collection) == 0 else { throw KeyStoreError.locked }
    try refuseSessionCollection(cancellable)
  }

  /// Refuses a default collection that is the one the `session` alias names: gnome-keyring keeps
  /// it in memory only and empties it when the session ends (or the daemon restarts), so a key
  /// stored there would be lost, and every record sealed under it. A provider that cannot answer
  /// the question (no such alias, an error other than a timeout, or the same collection for an
  /// alias nobody defines) is not held to it.
  private func refuseSessionCollection(_ cancellable: OpaquePointer) throws {
    var error: UnsafeMutablePointer<VaultGError>?
    guard let bus = vault_g_bus_get_session(cancellable, &error) else {
      throw translate(error, cancellable, operation: "connect to the session bus")
    }
    defer { vault_g_object_unref(UnsafeMutableRawPointer(bus)) }
    let answer = vault_secret_default_is_session(bus, Int32(timeout * 1000), cancellable, &error)
    if answer < 0 {
      let failure = translate(error, cancellable, operation: "read the default alias")
      if case .timedOut = failure { throw failure }
      return
    }
    if answer == 1 { throw KeyStoreError.sessionCollection }
  }

  /// Whether GLib's global default main context has work ready to run: none of it is vault's
  /// (every call runs in a private context), so it stays false in a process without a GLib main
  /// loop (tests).
  package static var defaultMainContextHasPendingWork: Bool {
    (try? loadLibrary()) != nil && vault_g_default_context_pending() != 0
  }

  /// The soname `vault_secret_load` opens (CLibSecret's loader.c).
  static let library = "libsecret-1.so.0"

  /// Loads libsecret on the first use of any store (again after a failure: it may have been
  /// installed since), or throws `.libraryMissing` with the dynamic linker's reason.
  private static func loadLibrary() throws {
    guard vault_secret_load() == 0 else { return }
    let reason = withUnsafeTemporaryAllocation(of: CChar.self, capacity: 256) { buffer in
      vault_secret_load_error(buffer.baseAddress, buffer.count)
      return String(cString: buffer.baseAddress!)
    }
    throw KeyStoreError.libraryMissing(library: library, reason: reason.isEmpty ? "unknown" : reason)
  }

  /// Runs `body` with a cancellable that fires after `timeout` seconds, once libsecret is loaded.
  ///
  /// A call made within `timeout` seconds of one that was not answered fails at once, without
  /// asking: a hung daemon rarely answers a second later, and a command or an app's threads would
  /// otherwise wait the whole timeout once per call (a rotation that failed made up to five more).
  private func withDeadline<T>(
    _ operation: String, _ body: (OpaquePointer) throws -> T
  ) throws -> T {
    try Self.loadLibrary()
    if let unanswered = Self.lastUnanswered.withLock({ $0 }), DispatchTime.now() < unanswered.until {
      throw KeyStoreError.timedOut(
        seconds: unanswered.seconds,
        operation: "\(operation) not asked: \(unanswered.operation) went unanswered moments before")
    }
    // The proxies a call makes subscribe to D-Bus signals in the thread's default main context,
    // and freeing them queues their clean-up there; a process without a GLib main loop never runs
    // it, so each call leaked its proxies (3.3 KB a `Vault.open`, linearly, in a long-lived app).
    // A private context, run once the call's objects are freed, lets the clean-up happen.
    let context = vault_g_context_begin()
    defer { vault_g_context_end(context) }
    let cancellable = CancellableHandle()
    // A timer source, not `asyncAfter`: a cancelled source leaves the timer list at once and lets
    // go of its handler (and the GCancellable in it); a cancelled `asyncAfter` item stayed queued,
    // holding both, until its deadline, so each call left its timer behind for `timeout` seconds.
    let timer = DispatchSource.makeTimerSource(queue: .global())
    timer.setEventHandler { [cancellable] in cancellable.cancel() }
    timer.schedule(deadline: .now() + timeout)
    timer.activate()
    defer { timer.cancel() }
    do {
      let result: T
      do {
        result = try body(cancellable.pointer)
      } catch KeyStoreError.noProvider, KeyStoreError.service {
        // libsecret caches one Secret Service proxy, with its transfer session, per process. When
        // the keyring daemon restarts (or dies mid-call), that session dies with it; drop the cache
        // and try once more.
        guard !cancellable.isCancelled else { throw KeyStoreError.timedOut(seconds: timeout, operation: operation) }
        vault_secret_service_disconnect()
        result = try body(cancellable.pointer)
      }
      // A best-effort step past the call's result (an old record generation's removal) ran out of time.
      if cancellable.isCancelled { noteUnanswered(operation) }
      return result
    } catch let error as KeyStoreError {
      var error = error
      if cancellable.isCancelled, case .service = error {
        error = .timedOut(seconds: timeout, operation: operation)
      }
      if case .timedOut = error { noteUnanswered(operation) }
      throw error
    }
  }

  /// Until when calls fail unasked after the last call not answered in time, that call's timeout
  /// and its name; process-wide, as every store in a process talks to the same daemon over the
  /// same bus connection.
  private static let lastUnanswered = Mutex<(until: DispatchTime, seconds: Double, operation: String)?>(nil)

  private func noteUnanswered(_ operation: String) {
    let until = DispatchTime.now() + timeout
    Self.lastUnanswered.withLock { last in
      if last.map({ $0.until < until }) ?? true { last = (until, timeout, operation) }
    }
  }

  /// Turns a GError into a KeyStoreError and frees it.
  private func translate(
    _ error: UnsafeMutablePointer<VaultGError>?, _ cancellable: OpaquePointer, operation: String
  ) -> KeyStoreError {
    guard let error else { return .service(detail: "\(operation) failed without a reason") }
    defer { vault_g_error_free(error) }
    if vault_error_is_cancelled(error) != 0 || vault_g_cancellable_is_cancelled(cancellable) != 0
      || vault_error_is_timeout(error) != 0
    {
      return .timedOut(seconds: timeout, operation: operation)
    }
    if vault_error_is_service_unknown(error) != 0 { return .noProvider }
    // Reported as a failure of the service, which `withDeadline` retries once on a new connection:
    // a daemon restarted (by hand, by D-Bus activation, by systemd) answers the retry.
    if vault_error_is_no_reply(error) != 0 {
      return .service(
        detail: "\(operation): the keyring daemon left without answering (it exited or crashed); "
          + "check that it runs and retry")
    }
    return .service(detail: "\(operation): \(Self.redactPaths(String(cString: error.pointee.message)))")
  }

  /// GLib messages may quote socket paths or addresses; they are not secret, but keep errors short.
  static func redactPaths(_ message: String) -> String {
    message.count > 200 ? String(message.prefix(200)) + "…" : message
  }
}

/// An owned GCancellable that a timer on another thread may cancel.
private final class CancellableHandle: @unchecked Sendable {
  let pointer: OpaquePointer

  init() { pointer = vault_g_cancellable_new() }
  deinit { vault_g_object_unref(UnsafeMutableRawPointer(pointer)) }

  func cancel() { vault_g_cancellable_cancel(pointer) }
  var isCancelled: Bool { vault_g_cancellable_is_cancelled(pointer) != 0 }
}
