import Foundation
import Vault
import VaultBackup
import VaultKeys
import VaultQueue

/// One registered container as `vault container list` shows it; its JSON form is part of the
/// command-line contract.
struct ContainerListing: Encodable {
  /// Whether the file at the registered path is the container that was registered.
  enum State: String, Encodable {
    /// The registered container (same vault, same container id).
    case ok
    /// No file at the path.
    case missing
    /// A file that is not the registered container: another container id, another vault's
    /// container, an empty file or no container at all.
    case replaced
    /// A file that cannot be looked at without waiting or changing something: its -wal or -shm
    /// is a FIFO, a link or a directory, or it cannot be read.
    case unreadable
  }

  let path: String
  /// The container id recorded at registration (nil for one registered before ids).
  let id: String?
  let state: State
  /// Records per key version from the envelopes' headers; nil unless the state is `ok`.
  let records: [String: Int]?
  /// What a replaced path holds instead, why an unreadable one cannot be read, or the restores
  /// that did not finish merging into an ok one; text form only.
  let found: String?

  enum Key: String, CodingKey { case path, id, state, records }

  func encode(to encoder: any Encoder) throws {
    var container = encoder.container(keyedBy: Key.self)
    try container.encode(path, forKey: .path)
    // Absent is null, never omitted.
    try container.encode(id, forKey: .id)
    try container.encode(state, forKey: .state)
    try container.encode(records, forKey: .records)
  }
}

extension VaultCommandLine {
  /// `vault container list|forget|accept`.
  func container(_ arguments: Arguments) throws {
    switch arguments.action {
    case "list":
      try listContainers(json: arguments.flags.contains("--json"), arguments)
    case "accept":
      try acceptContainer(arguments.positionals[0], arguments)
    default:
      try forgetContainer(arguments.positionals[0], arguments)
    }
  }

  /// Takes a container a restore into this home did not finish as it is: its marks are removed,
  /// and backups take it again.
  private func acceptContainer(_ path: String, _ arguments: Arguments) throws {
    let vault = try openVault(arguments)
    let path = absolutePath(path)
    guard vault.manifest.container(at: path) != nil else { throw RotationError.containerNotRegistered(path: path) }
    // Not while a merge runs: the marks it removed would be that merge's own.
    let lock = try MergeLock(home: vault.home)
    defer { lock.release() }
    let accepted = try QueueContainer(path: path, vault: vault, mode: .existing).acceptUnfinishedMerges()
    guard !accepted.isEmpty else {
      terminal.print("No restore into \(path) was left unfinished; nothing was changed")
      return
    }
    for mark in accepted {
      terminal.print(
        "Accepted \(path) as it is: the records of \(mark.bundle) that the stopped restore had not added are not in it "
          + "(keep that bundle if you still have it: a later `vault restore` of it adds them)")
    }
    terminal.print("`vault backup` takes the container again")
  }

  /// Reads only the manifest and each file's envelope headers: no key, like `status`.
  private func listContainers(json: Bool, _ arguments: Arguments) throws {
    let (manifest, _) = try Vault.inspect(home: homePath(arguments), resolver: keyStores)
    let keyring = manifest.keyringID!
    var listings: [ContainerListing] = []
    for registered in manifest.containers {
      let path = registered.path
      var state = ContainerListing.State.replaced
      var records: [String: Int]?
      var found: String?
      let probed: ContainerProbe
      do {
        probed = try QueueContainer.probe(path: path)
      } catch let error as QueueError {
        // One container that cannot be looked at (a FIFO for its -wal) does not hide the others.
        listings.append(
          ContainerListing(path: path, id: registered.id, state: .unreadable, records: nil, found: error.description))
        continue
      }
      switch probed {
      case .missing: state = .missing
      case .empty: found = "an empty file"
      case .notAContainer(let reason): found = "not a container: \(reason)"
      case .container:
        // Another container in its place: `replaced`, holding it.
        if let other = probed.otherContainer(than: registered.id, of: keyring.hex) {
          found = other
          break
        }
        do {
          let counts = try QueueContainer.recordCounts(path: path, keyring: keyring)?.byVersion ?? [:]
          records = Dictionary(uniqueKeysWithValues: counts.map { (String($0.key), $0.value) })
          state = .ok
          // Text form only: the state stays `ok` (it is the registered container).
          let bundles = (try? QueueContainer.unfinishedMerges(path: path)) ?? []
          if !bundles.isEmpty { found = "a restore of \(bundles.joined(separator: " and ")) did not finish" }
        } catch let error as QueueError {
          // Its pages do not read (damaged past its header): listed, not hiding the others.
          state = .unreadable
          found = error.description
        }
      }
      listings.append(ContainerListing(path: path, id: registered.id, state: state, records: records, found: found))
    }
    if json {
      terminal.printBlock(try JSON.encode(listings))
      return
    }
    if listings.isEmpty { terminal.print("No containers are registered") }
    for listing in listings {
      var line = "\(listing.path)  id \(listing.id ?? "none")  \(listing.state.rawValue)"
      if let found = listing.found { line += listing.state == .replaced ? " (holds \(found))" : " (\(found))" }
      if let records = listing.records {
        let versions = records.sorted { UInt32($0.key) ?? 0 < UInt32($1.key) ?? 0 }
        line +=
          "  records: "
          + (versions.isEmpty ? "none" : versions.map { "v\($0.key) \($0.value)" }.joined(separator: ", "))
      }
      terminal.print(line)
    }
  }

  private func forgetContainer(_ path: String, _ arguments: Arguments) throws {
    let vault = try openVault(arguments)
    let forgotten = try vault.forgetContainer(at: path)
    terminal.print(
      "Forgot container \(forgotten.path) (id \(forgotten.id ?? "none")): its records are gone for good "
        + "and no rotation will look for it")
    let versions = { (list: [UInt32]) in list.map(String.init).joined(separator: ", ") }
    if forgotten.remainingContainers == 0 {
      terminal.print(
        "No container is registered now, so a rotation retires no version (`vault queue put` creates and "
          + "registers one)")
    } else if !forgotten.retirableVersions.isEmpty {
      terminal.print(
        "The next `vault rotate` retires version(s) \(versions(forgotten.retirableVersions)) if the "
          + "\(forgotten.remainingContainers) remaining container(s) hold no records under them")
    } else {
      terminal.print("No decrypt-only version was waiting on it: nothing more to retire")
    }
    if !forgotten.pinnedBySeal.isEmpty {
      terminal.print(
        "Version(s) \(versions(forgotten.pinnedBySeal)) stay kept: envelopes made with `vault seal` need them "
          + "(`vault reseal` them, then `vault unpin VERSION`)")
    }
  }
}

/// `vault container list|forget|accept`.
enum ContainerCommand: Subcommand {
  static let declaration = CommandDeclaration(
    name: "container", abstract: "List the registered containers, forget one that is gone, or accept one as it is.",
    discussion: """
      Rotation re-seals every registered container and refuses to run while one is missing or replaced.
      """,
    actions: [
      CommandDeclaration(
        name: "list", abstract: "Show each registered container and whether it is the one registered.",
        discussion: """
          Each container's path, container id, records per key version and state: ok, missing (no file), \
          replaced (the file holds another container id, another vault's container, or no container) or \
          unreadable (its -wal or -shm is not a regular file, or it cannot be read; nothing is opened). Reads \
          only the manifest and each file's envelope headers (no key, so it works while the keyring is locked).
          """,
        parameters: [
          .flag(
            "--json",
            help: "Print a JSON array: path, id, state and records (key version -> count, or null unless ok).")
        ]),
      CommandDeclaration(
        name: "forget", abstract: "Remove the registration of a container that is gone for good.",
        discussion: """
          Refused, changing nothing, while any file is at PATH. Its records are gone for good; a version only it \
          held is retired by the next rotation (while another container is registered and no 'vault seal' \
          envelope needs it).
          """,
        // Not completed as a file: a path where a file exists is always refused.
        parameters: [.argument("PATH", .required, .text, help: "The registered path of the missing container.")]),
      CommandDeclaration(
        name: "accept", abstract: "Take a container a stopped restore did not finish filling as it is.",
        discussion: """
          A restore (merge) of a bundle into this home that was stopped (a full disk, a kill) leaves the \
          containers it was filling marked, and 'vault backup' refuses them, so that no --keep prunes the bundle \
          holding what they lack. Running that restore again finishes it; when the bundle is gone, this removes \
          the marks: the records the restore had not added are not in the container, and backups take it again. \
          Refused (exit 2) while a restore into this home runs: the marks are that restore's own until it ends.
          """,
        parameters: [.argument("PATH", .required, .file, help: "The registered path of the container.")]),
    ])

  static func run(_ cli: VaultCommandLine, _ arguments: Arguments) throws -> Int32 {
    try cli.container(arguments)
    return ExitCode.success.rawValue
  }
}
