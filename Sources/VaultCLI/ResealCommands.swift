// C boundary: `reseal` replaces envelope files in place through lstat(2), open(2) (also
// O_TMPFILE), fstat(2), read(2), mkstemp(3), linkat(2), fchown(2), fchmod(2), fsync(2) and rename(2).
import Foundation
import Vault
import VaultCrypto
import VaultKeys

/// `reseal` and `unpin`: moving `vault seal` envelopes to the active key version, then releasing
/// the pin that kept their old version from retirement.
extension VaultCommandLine {
  // MARK: - reseal

  /// `vault reseal --context CTX [--json] FILE…`: each file is opened under CTX and sealed under
  /// the active version, replacing it atomically in place (same form: binary or armoured; same
  /// permission bits and owner). A file that fails is reported by kind and left untouched; the
  /// others still proceed. Exit 1 when any failed.
  func reseal(_ arguments: Arguments) throws -> Int32 {
    let context = try context(arguments, "reseal")
    if arguments.positionals.contains("-") {
      throw UsageError(
        message: "reseal rewrites files in place; standard input ('-') is not a file", command: "reseal")
    }
    let json = arguments.flags.contains("--json")
    let vault = try openVault(arguments)
    var results: [ResealedFile] = []
    for path in arguments.positionals {
      let result = resealFile(path, context: context, vault: vault)
      results.append(result)
      guard !json else { continue }
      switch result.outcome {
      case .resealed:
        terminal.print(
          "resealed \(path): version \(Self.text(result.previousVersion)) -> \(Self.text(result.version))"
        )
      case .current:
        terminal.print("already current \(path) (version \(Self.text(result.version)))")
      case .failed:
        terminal.note(
          "Error: could not re-seal \(path) (left untouched): \(result.message ?? "failed")")
      }
    }
    let failed = results.filter { $0.outcome == .failed }.count
    if json {
      terminal.printBlock(
        try JSON.encode(
          ResealReport(
            activeVersion: vault.activeVersion, files: results,
            resealed: results.filter { $0.outcome == .resealed }.count,
            current: results.filter { $0.outcome == .current }.count, failed: failed)))
    } else if failed > 0 {
      terminal.note("vault: \(failed) of \(counted(results.count, "file")) could not be re-sealed")
    }
    return (failed > 0 ? ExitCode.failure : ExitCode.success).rawValue
  }

  /// Re-seals one file; every failure becomes the file's outcome, so the next file still runs.
  private func resealFile(_ path: String, context: [UInt8], vault: Vault) -> ResealedFile {
    var previous: UInt32?
    do {
      let file = try EnvelopeFile.read(path, limit: StandardStreams.inputLimit)
      guard !file.bytes.isEmpty else { throw FileError.inputEmpty(path: path) }
      let armored = Armor.isArmored(file.bytes)
      if armored, !MemoryHeadroom.available(file.bytes.count * 2) {
        throw StandardInputError.outOfMemory(bytes: file.bytes.count)
      }
      let envelope = armored ? try Armor.decode(file.bytes) : file.bytes
      previous = try Envelope.header(of: envelope).version
      guard envelope.count <= Self.maximumRecordSize + Envelope.overhead else {
        throw StandardInputError.tooLarge(limit: Self.maximumRecordSize)
      }
      // The plaintext, the new envelope, its check and its armour may all be held at once.
      guard MemoryHeadroom.available(envelope.count * (armored ? 5 : 3)) else {
        throw StandardInputError.outOfMemory(bytes: envelope.count)
      }
      let resealed = try vault.reseal(envelope, context: context)
      let version = try Envelope.header(of: resealed).version
      // `Vault.reseal` returns an envelope already under the active version unchanged. Its
      // directory is flushed all the same: a run whose flush failed after the rename is finished
      // by running it again.
      if version == previous {
        guard FileIO.syncDirectory(of: path) else { throw EnvelopeFileError.notFlushed(path: path, errno: errno) }
        return ResealedFile(path: path, previousVersion: previous, version: version, outcome: .current)
      }
      if armored, resealed.count > Armor.maximumEnvelopeSize {
        throw ArmorError.tooLarge(limit: Armor.maximumEnvelopeSize - Envelope.overhead)
      }
      try file.replace(with: armored ? Armor.encode(resealed) : resealed)
      return ResealedFile(path: path, previousVersion: previous, version: version, outcome: .resealed)
    } catch {
      // The file's own errors are not among `describe`'s reportable types; the rest go through it.
      let message = (error as? EnvelopeFileError)?.description ?? Self.describe(error).0
      return ResealedFile(
        path: path, previousVersion: previous, version: nil, outcome: .failed, error: Self.kind(of: error),
        message: message)
    }
  }

  /// A stable, matchable name for why a file failed: the error's own code where it has one.
  static func kind(of error: any Error) -> String {
    switch error {
    case let coded as any CodedError: coded.code
    case let failure as EnvelopeFileError: failure.code
    case FileError.inputEmpty: "file.empty"
    case is FileError: "file.unreadable"
    case ArmorError.tooLarge: "armor.too-large"
    case is ArmorError: "armor.malformed"
    case StandardInputError.tooLarge: "input.too-large"
    case StandardInputError.outOfMemory: "input.out-of-memory"
    default: "unexpected"
    }
  }

  private static func text(_ version: UInt32?) -> String { version.map(String.init) ?? "?" }

  // MARK: - unpin

  /// `vault unpin VERSION [--yes] [--json]`: releases the pin `vault seal` put on VERSION, after
  /// a confirmation (on a terminal, or `--yes` without one).
  func unpin(_ arguments: Arguments) throws -> Int32 {
    // A whole number from 1, checked by the parser.
    let version = UInt32(arguments.positionals[0]) ?? 0
    let vault = try openVault(arguments)
    let manifest = vault.manifest
    // Ask only before a release the library would make; a refusal is reported without a question.
    if !arguments.flags.contains("--yes"), manifest.externalSealVersions.contains(version),
      version != manifest.activeVersion
    {
      terminal.say(
        "vault unpin \(version): envelopes sealed with 'vault seal' under version \(version) that were not "
          + "re-sealed ('vault reseal') become unreadable for good once the next 'vault rotate' retires it.\n")
      guard let answer = terminal.ask("Release the pin on version \(version)? (y/N) ") else {
        // nil: no terminal at all, or the end of input (Ctrl-D) on one, which is no answer, not a yes.
        // After Ctrl-D the cursor is still on the question's line: end it first.
        terminal.say(
          terminal.askLine == nil
            ? "Error: no terminal to confirm; rerun with --yes to release the pin (nothing was changed)\n"
            : "\nvault: no answer; nothing was changed\n")
        return ExitCode.failure.rawValue
      }
      guard ["y", "yes"].contains(answer.trimmingCharacters(in: .whitespaces).lowercased()) else {
        terminal.note("vault: nothing was changed")
        return ExitCode.failure.rawValue
      }
    }
    try vault.releaseSealPin(version: version)
    let after = vault.manifest
    if arguments.flags.contains("--json") {
      terminal.printBlock(
        try JSON.encode(
          UnpinResult(
            version: version, activeVersion: after.activeVersion,
            externalSealVersions: after.externalSealVersions.sorted(), containers: after.containers.count)))
      return ExitCode.success.rawValue
    }
    terminal.print(
      "version \(version) is no longer kept for 'vault seal' envelopes; the next 'vault rotate' retires it "
        + "unless a container still holds records under it")
    if after.containers.isEmpty {
      terminal.print("(no container is registered: a rotation retires nothing until one is)")
    }
    return ExitCode.success.rawValue
  }
}

/// One file's line in `reseal --json`: every key present, absent values null.
struct ResealedFile: Encodable {
  enum Outcome: String, Encodable {
    case resealed, current, failed
  }

  var path: String
  var previousVersion: UInt32?
  var version: UInt32?
  var outcome: Outcome
  /// The failure's kind (`envelope.authentication-failed`, `file.not-regular`, …).
  var error: String?
  /// The failure for a person; it names a kind and the path, never contents.
  var message: String?

  enum CodingKeys: String, CodingKey {
    case path, version, outcome, error, message
    case previousVersion = "previous_version"
  }

  func encode(to encoder: any Encoder) throws {
    var container = encoder.container(keyedBy: CodingKeys.self)
    try container.encode(path, forKey: .path)
    try container.encode(previousVersion, forKey: .previousVersion)
    try container.encode(version, forKey: .version)
    try container.encode(outcome, forKey: .outcome)
    try container.encode(error, forKey: .error)
    try container.encode(message, forKey: .message)
  }
}

/// What `reseal --json` prints.
struct ResealReport: Encodable {
  var activeVersion: UInt32
  var files: [ResealedFile]
  var resealed: Int
  var current: Int
  var failed: Int

  enum CodingKeys: String, CodingKey {
    case files, resealed, current, failed
    case activeVersion = "active_version"
  }
}

/// What `unpin --json` prints.
struct UnpinResult: Encodable {
  var version: UInt32
  var activeVersion: UInt32
  var externalSealVersions: [UInt32]
  var containers: Int

  enum CodingKeys: String, CodingKey {
    case version, containers
    case activeVersion = "active_version"
    case externalSealVersions = "external_seal_versions"
  }
}

/// An envelope file being re-sealed: its bytes and what it was when read, so it is replaced only
/// if it is still that file.
struct EnvelopeFile {
  let path: String
  let bytes: [UInt8]
  let info: stat

  /// Reads the regular file at `path` (not a symlink, FIFO, socket, device or directory; one link)
  /// without following a symlink and without waiting for a FIFO's writer.
  /// - Throws: `EnvelopeFileError`, or `StandardInputError` when it is too large to hold.
  static func read(_ path: String, limit: Int) throws -> EnvelopeFile {
    var before = stat()
    guard lstat(path, &before) == 0 else { throw EnvelopeFileError.unreadable(path: path, errno: errno) }
    try requireRegular(before, path: path)
    let fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
    guard fd >= 0 else { throw EnvelopeFileError.unreadable(path: path, errno: errno) }
    defer { close(fd) }
    var info = stat()
    guard fstat(fd, &info) == 0 else { throw EnvelopeFileError.unreadable(path: path, errno: errno) }
    try requireRegular(info, path: path)
    guard info.st_dev == before.st_dev, info.st_ino == before.st_ino else {
      throw EnvelopeFileError.changed(path: path)
    }
    let size = Int(info.st_size)
    guard size <= limit else { throw StandardInputError.tooLarge(limit: VaultCommandLine.maximumRecordSize) }
    guard MemoryHeadroom.available(size + 1) else { throw StandardInputError.outOfMemory(bytes: size) }
    var bytes = [UInt8](repeating: 0, count: size)
    var offset = 0
    while offset < size {
      let got = bytes.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress! + offset, size - offset) }
      if got < 0, errno == EINTR { continue }
      guard got >= 0 else { throw EnvelopeFileError.unreadable(path: path, errno: errno) }
      guard got > 0 else { throw EnvelopeFileError.changed(path: path) }
      offset += got
    }
    return EnvelopeFile(path: path, bytes: bytes, info: info)
  }

  private static func requireRegular(_ info: stat, path: String) throws {
    switch info.st_mode & S_IFMT {
    case S_IFREG: break
    case S_IFLNK: throw EnvelopeFileError.notRegular(path: path, kind: "a symbolic link")
    case S_IFDIR: throw EnvelopeFileError.notRegular(path: path, kind: "a directory")
    case S_IFIFO: throw EnvelopeFileError.notRegular(path: path, kind: "a FIFO")
    case S_IFSOCK: throw EnvelopeFileError.notRegular(path: path, kind: "a socket")
    case S_IFCHR, S_IFBLK: throw EnvelopeFileError.notRegular(path: path, kind: "a device")
    default: throw EnvelopeFileError.notRegular(path: path, kind: "not a regular file")
    }
    // Renaming over one name would leave the other names holding the old envelope.
    guard info.st_nlink <= 1 else { throw EnvelopeFileError.hardLinked(path: path, links: Int(info.st_nlink)) }
  }

  /// Replaces the file with `bytes`, atomically: a temporary file in the same directory with the
  /// original's permission bits and owner, written and flushed, then renamed over the file (only
  /// if it is still the file that was read: same inode, size and modification time), and the
  /// directory flushed. The path holds either the old bytes or all of the new ones.
  ///
  /// The temporary file has no name (O_TMPFILE) while it is written and flushed; it is linked as
  /// `.NAME.vault-XXXXXX` just before the rename, so a process killed anywhere but between those
  /// two calls leaves nothing beside the file. Where the file system has no O_TMPFILE it is a named
  /// file from the start.
  /// - Throws: `EnvelopeFileError.writeFailed` or `.changed`; the file is untouched then.
  ///   `.notFlushed` when the file was replaced but its directory could not be flushed.
  func replace(with bytes: [UInt8]) throws {
    let fd: Int32
    var temporary: String?
    if let anonymous = FileIO.anonymousFile(beside: path) {
      fd = anonymous
    } else {
      guard let (named, name) = FileIO.temporaryFile(beside: path) else {
        throw EnvelopeFileError.writeFailed(path: path, errno: errno)
      }
      (fd, temporary) = (named, name)
    }
    var renamed = false
    var isOpen = true
    defer {
      if isOpen { close(fd) }
      if !renamed, let temporary { unlink(temporary) }
    }
    func check(_ ok: Bool) throws {
      guard ok else { throw EnvelopeFileError.writeFailed(path: path, errno: errno) }
    }
    var made = stat()
    try check(fstat(fd, &made) == 0)
    if made.st_uid != info.st_uid || made.st_gid != info.st_gid {
      try check(fchown(fd, info.st_uid, info.st_gid) == 0)
    }
    // The permission bits only: set-id and sticky bits have no business on an envelope.
    try check(fchmod(fd, info.st_mode & 0o777) == 0)
    try check(FileIO.writeAll(fd, bytes))
    try check(fsync(fd) == 0)
    let named: String
    if let temporary {
      named = temporary
    } else {
      guard let name = FileIO.name(anonymous: fd, beside: path) else {
        throw EnvelopeFileError.writeFailed(path: path, errno: errno)
      }
      (named, temporary) = (name, name)
    }
    isOpen = false
    try check(close(fd) == 0)
    // The last look before the rename, right before it: the link and the close above would
    // otherwise widen the window in which another writer's new file is silently replaced.
    var now = stat()
    guard lstat(path, &now) == 0, now.st_dev == info.st_dev, now.st_ino == info.st_ino,
      now.st_size == info.st_size, now.st_mtim.tv_sec == info.st_mtim.tv_sec,
      now.st_mtim.tv_nsec == info.st_mtim.tv_nsec
    else {
      throw EnvelopeFileError.changed(path: path)
    }
    try check(rename(named, path) == 0)
    renamed = true
    // Without the flush a crash may bring the old envelope back after its version was retired.
    guard FileIO.syncDirectory(of: path) else { throw EnvelopeFileError.notFlushed(path: path, errno: errno) }
  }
}

/// Why one file could not be re-sealed in place (it is left untouched).
enum EnvelopeFileError: Error, Equatable, CustomStringConvertible {
  case notRegular(path: String, kind: String)
  case hardLinked(path: String, links: Int)
  case unreadable(path: String, errno: Int32)
  case changed(path: String)
  case writeFailed(path: String, errno: Int32)
  /// Replaced (or already current), but its directory could not be flushed.
  case notFlushed(path: String, errno: Int32)

  var code: String {
    switch self {
    case .notRegular: "file.not-regular"
    case .hardLinked: "file.hard-linked"
    case .unreadable: "file.unreadable"
    case .changed: "file.changed"
    case .writeFailed: "file.write-failed"
    case .notFlushed: "file.not-flushed"
    }
  }

  var description: String {
    switch self {
    case .notRegular(let path, let kind): "\(path) is \(kind), not a regular file; give the envelope file itself"
    case .hardLinked(let path, let links):
      "\(path) has \(links) hard links; replacing one name would leave the others under the old key "
        + "(re-seal a copy, then replace the links yourself)"
    case .unreadable(let path, let code): "could not read \(path): \(String(cString: strerror(code)))"
    case .changed(let path): "\(path) changed while it was re-sealed; run reseal on it again"
    case .writeFailed(let path, let code):
      "could not replace \(path): \(String(cString: strerror(code)))"
    case .notFlushed(let path, let code):
      "\(path) holds the re-sealed envelope, but its directory could not be flushed (\(String(cString: strerror(code)))): "
        + "a crash could bring the old one back; fix that, then run reseal on it again before releasing the old "
        + "version's pin"
    }
  }
}

/// `vault reseal`.
enum ResealCommand: Subcommand {
  static let declaration = CommandDeclaration(
    name: "reseal", abstract: "Re-seal 'vault seal' envelope files under the active key version.",
    discussion: """
      Rotation cannot count envelopes kept outside containers, so a version that sealed one is kept \
      decrypt-only until its pin is released. This opens each FILE (binary or armoured) under CTX, seals it \
      again under the active version (a fresh nonce, the same context), checks that the new envelope opens, and \
      replaces FILE atomically in place: a temporary file beside it with FILE's permission bits and owner, \
      flushed, renamed over FILE, and the directory flushed. An armoured file stays armoured. A file already \
      under the active version is left as it is ('already current'). A file that fails (not a regular file: a \
      symlink, FIFO, device or directory; several hard links; not an envelope; wrong context; a retired key) is \
      reported by kind and left untouched; the other files still proceed. Then 'vault unpin VERSION' lets the \
      next rotation retire the old version.
      """,
    parameters: [
      .option("--context", "CTX", .context, required: true, help: "The context the envelopes were sealed with (kept)."),
      .flag(
        "--json",
        help: """
          Print JSON: active_version, files (path, previous_version, version, outcome: resealed, current or \
          failed, error: the failure's kind, message; null when absent), resealed, current, failed.
          """),
      .argument("FILE", .oneOrMore, .file, help: "An envelope file made by 'vault seal' (one or more)."),
    ],
    exitCodes: "0 every file re-sealed or already current, 1 some file failed, 2 no vault, 64 usage.")

  static func run(_ cli: VaultCommandLine, _ arguments: Arguments) throws -> Int32 { try cli.reseal(arguments) }
}

/// `vault unpin`.
enum UnpinCommand: Subcommand {
  static let declaration = CommandDeclaration(
    name: "unpin", abstract: "Release a key version kept only for 'vault seal' envelopes.",
    discussion: """
      'vault seal' pins the version it seals under, so rotation keeps it decrypt-only (status shows why). Once \
      every such envelope was re-sealed ('vault reseal') or is no longer wanted, this releases the pin: the next \
      'vault rotate' retires the version (deleting its key) unless a container still holds records under it. \
      Envelopes left under it then can never be opened, so it asks first; without a terminal it needs --yes. It \
      changes only the manifest and deletes no key itself. Refused, changing nothing, for the active version, an \
      unknown or retired version, and a version nothing pins.
      """,
    parameters: [
      .argument(
        "VERSION", .required, .wholeNumber(1...Int(UInt32.max), unit: nil),
        help: "The decrypt-only key version to release."),
      .flag("--yes", help: "Release without asking (required when standard input is not a terminal)."),
      .flag(
        "--json",
        help: """
          Print JSON: version, active_version, external_seal_versions (the pins left), containers (how many are \
          registered).
          """),
    ])

  static func run(_ cli: VaultCommandLine, _ arguments: Arguments) throws -> Int32 { try cli.unpin(arguments) }
}
