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
    guard arguments.positionals.count <= 1 else {
      throw UsageError(message: "unexpected argument '\(arguments.positionals[1])'", command: command)
    }
    let input = arguments.positionals.first.flatMap { $0 == "-" ? nil : $0 }
    let output = arguments.options["-o"]
    if let output {
      guard !output.isEmpty else { throw UsageError(message: "-o must not be empty", command: command) }
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

  /// All of IN (a regular file) or standard input.
  func read(_ files: Files) throws -> [UInt8] {
    guard let path = files.input else { return try readInput() }
    let (bytes, _) = try FileIO.readRegularFile(path, limit: StandardStreams.inputLimit)
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
    let plaintext = try read(files)
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
