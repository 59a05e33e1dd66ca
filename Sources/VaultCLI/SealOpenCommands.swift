import Vault
import VaultCrypto

/// `seal` and `open`: standard input or a file in, standard output or a file (`-o`) out, like age.
extension VaultCommandLine {
  /// Where a command reads and writes: nil is a standard stream.
  struct Files {
    var input: String?
    var output: String?
  }

  /// IN (`-` or absent: standard input) and `-o OUT` (absent: standard output), checked before
  /// anything is read: OUT must not be IN (usage, exit 64) and must not exist (exit 2).
  func files(_ arguments: Arguments, _ command: String) throws -> Files {
    let input = arguments.positionals.first.flatMap { $0 == "-" ? nil : $0 }
    let output = arguments.options["-o"]
    if let output {
      // IN's `-` is standard input, so `-o -` reads as standard output; it would make a file named
      // "-" and skip the refusal to write binary to a terminal.
      if output == "-" {
        throw UsageError(message: "-o - is not standard output here; leave out -o to write there", command: command)
      }
      if let existing = FileIO.identity(output) {
        let source = input.map { FileIO.identity($0) } ?? FileIO.standardInputIdentity()
        if existing == source {
          throw UsageError(message: "-o names the input file; write to another file", command: command)
        }
        throw FileError.outputExists(path: output)
      }
    }
    return Files(input: input, output: output)
  }

  /// All of IN (a regular file) or standard input. A file larger than `limit` is refused before
  /// any of it is read; standard input is read up to `StandardStreams.inputLimit`.
  func read(_ files: Files, limit: Int = StandardStreams.inputLimit) throws -> [UInt8] {
    guard let path = files.input else { return try readInput() }
    let (bytes, _) = try FileIO.readRegularFile(path, limit: limit)
    return bytes
  }

  /// `bytes` to OUT (atomically, 0600, never over an existing file) or standard output.
  func write(_ bytes: [UInt8], _ files: Files) throws {
    guard let path = files.output else { return terminal.writeOutput(bytes) }
    try FileIO.writeAtomically(bytes, to: path)
  }

  func seal(_ arguments: Arguments) throws {
    let context = try context(arguments, "seal")
    let armor = arguments.flags.contains("--armor")
    let files = try files(arguments, "seal")
    if files.output == nil, !armor, terminal.outputIsTerminal {
      throw UsageError(
        message: "refusing to write a binary envelope to a terminal; use -o FILE, or --armor for text",
        command: "seal")
    }
    let vault = try openVault(arguments)
    let plaintext = try read(files, limit: Self.maximumRecordSize)
    guard plaintext.count <= Self.maximumRecordSize else {
      throw StandardInputError.tooLarge(limit: Self.maximumRecordSize)
    }
    if armor, plaintext.count + Envelope.overhead > Armor.maximumEnvelopeSize {
      throw ArmorError.tooLarge(limit: Armor.maximumEnvelopeSize - Envelope.overhead)
    }
    // The envelope is as large again (its armour a third larger): make sure it can be allocated.
    let needed = plaintext.count + Envelope.overhead
    guard MemoryHeadroom.available(armor ? needed * 3 : needed) else {
      throw StandardInputError.outOfMemory(bytes: plaintext.count)
    }
    // Envelopes written outside containers cannot be counted by rotation: keep this version from retirement.
    let envelope = try vault.seal(plaintext, context: context)
    try write(armor ? Armor.encode(envelope) : envelope, files)
  }

  func open(_ arguments: Arguments) throws {
    let context = try context(arguments, "open")
    let files = try files(arguments, "open")
    let vault = try openVault(arguments)
    var envelope = try read(files)
    guard !envelope.isEmpty else {
      if let path = files.input { throw FileError.inputEmpty(path: path) }
      throw InputError.empty
    }
    if Armor.isArmored(envelope) {
      guard MemoryHeadroom.available(envelope.count * 2) else {
        throw StandardInputError.outOfMemory(bytes: envelope.count)
      }
      envelope = try Armor.decode(envelope)
    }
    guard envelope.count <= Self.maximumRecordSize + Envelope.overhead else {
      throw StandardInputError.tooLarge(limit: Self.maximumRecordSize)
    }
    guard MemoryHeadroom.available(envelope.count) else { throw StandardInputError.outOfMemory(bytes: envelope.count) }
    try write(try vault.open(envelope, context: context), files)
  }
}

/// `vault seal`.
enum SealCommand: Subcommand {
  static let declaration = CommandDeclaration(
    name: "seal", abstract: "Seal a file or standard input into an envelope.",
    discussion: """
      The context is authenticated with the record: the same context must be given to open it. A record holds \
      at most 1 GiB; larger input is refused (exit 2): a file before it is read, standard input once \
      it has passed 1 GiB and 89 bytes. IN must be a regular file (a FIFO, \
      device or directory is refused, exit 2). OUT is written whole or not at all (a temporary file beside it, \
      flushed, then linked), mode 0600, and is never replaced: an existing OUT is refused (exit 2), and so is \
      OUT naming IN (exit 64). A binary envelope is not written to a terminal: give -o OUT or --armor.
      """,
    parameters: [
      .option(
        "--context", "CTX", .context, required: true, help: "What the record belongs to (non-empty, not secret)."),
      .option("-o", "OUT", .file, help: "Write the envelope to the new file OUT (default: standard output)."),
      .flag(
        "--armor",
        help: "Write the envelope as text: base64 between BEGIN and END lines (a record of at most 756 MiB)."),
      .argument("IN", .optional, .file, help: "The plaintext to seal (default, or -: standard input)."),
    ])

  static func run(_ cli: VaultCommandLine, _ arguments: Arguments) throws -> Int32 {
    try cli.seal(arguments)
    return ExitCode.success.rawValue
  }
}

/// `vault open`.
enum OpenCommand: Subcommand {
  static let declaration = CommandDeclaration(
    name: "open", abstract: "Open an envelope from a file or standard input.",
    discussion: """
      Fails with a distinct error when the input is not an envelope, is truncated, belongs to another vault, \
      names an unknown or retired key version, or does not authenticate (wrong context or modified bytes). \
      Nothing is written on failure. An envelope holds at most 1 GiB of plaintext; larger input is refused \
      (exit 2). Armoured input (from seal --armor) is detected and decoded strictly: damaged armour is an error \
      (exit 1). IN and OUT are treated as by seal.
      """,
    parameters: [
      .option("--context", "CTX", .context, required: true, help: "The context the envelope was sealed with."),
      .option("-o", "OUT", .file, help: "Write the plaintext to the new file OUT (default: standard output)."),
      .argument("IN", .optional, .file, help: "The envelope, binary or armoured (default, or -: standard input)."),
    ])

  static func run(_ cli: VaultCommandLine, _ arguments: Arguments) throws -> Int32 {
    try cli.open(arguments)
    return ExitCode.success.rawValue
  }
}
