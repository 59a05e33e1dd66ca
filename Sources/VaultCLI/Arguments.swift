import Vault

/// A parsed command line: global `--home`, the subcommand, its options and flags.
struct Arguments {
  var home: String?
  var command: String?
  var options: [String: String] = [:]
  /// The same option values as the bytes given on the command line (which need not be UTF-8;
  /// `options` holds them with invalid sequences repaired to U+FFFD). `--context` is read from here.
  var rawOptions: [String: [UInt8]] = [:]
  /// Options that may be given more than once, in order.
  var lists: [String: [String]] = [:]
  var flags: Set<String> = []
  var positionals: [String] = []
  var wantsHelp = false
  var wantsVersion = false
}

/// A usage error: printed with the command's usage line and a hint, exit 64.
struct UsageError: Error {
  let message: String
  let command: String?
}

/// What a subcommand accepts.
struct CommandSpec {
  let name: String
  let options: Set<String>
  let flags: Set<String>
  let takesPositionals: Bool
  var repeatable: Set<String> = []
}

enum ArgumentParser {
  static func parse(_ argv: [String], specs: [String: CommandSpec]) throws(UsageError) -> Arguments {
    try parse(raw: argv.map { Array($0.utf8) }, specs: specs)
  }

  /// Parses arguments given as the raw bytes of each one, as the kernel passed them.
  static func parse(raw: [[UInt8]], specs: [String: CommandSpec]) throws(UsageError) -> Arguments {
    let argv = raw.map { String(decoding: $0, as: UTF8.self) }
    var result = Arguments()
    var index = 0
    var rawValue: [UInt8] = []
    func value(for name: String, inline: String?) throws(UsageError) -> String {
      let text: String
      if let inline {
        // The name and "=" are ASCII, so they are the same bytes in the raw argument.
        rawValue = Array(raw[index].dropFirst(name.utf8.count + 1))
        text = inline
      } else {
        index += 1
        guard index < argv.count else {
          throw UsageError(message: "missing value for '\(name)'", command: result.command)
        }
        rawValue = raw[index]
        text = argv[index]
      }
      // Only --context is taken as bytes. Any other value that is not UTF-8 would reach vault
      // repaired (invalid bytes become U+FFFD), so two different names (queues, paths) would
      // become one: refuse it instead.
      guard name == "--context" || Array(text.utf8) == rawValue else {
        throw UsageError(message: "the value of '\(name)' is not valid UTF-8", command: result.command)
      }
      return text
    }
    while index < argv.count {
      let argument = argv[index]
      var name = argument
      var inline: String?
      if argument.hasPrefix("--"), let equals = argument.firstIndex(of: "=") {
        name = String(argument[..<equals])
        inline = String(argument[argument.index(after: equals)...])
      }
      switch name {
      case "-h", "--help": result.wantsHelp = true
      case "--version" where result.command == nil: result.wantsVersion = true
      case "--home":
        guard result.home == nil else { throw UsageError(message: "'--home' given more than once", command: nil) }
        let home = try value(for: name, inline: inline)
        guard !home.isEmpty else { throw UsageError(message: CommandLineEnvironment.emptyHomeMessage, command: nil) }
        result.home = home
      default:
        if result.command == nil {
          guard !name.hasPrefix("-") else { throw UsageError(message: "unknown option '\(name)'", command: nil) }
          guard specs[name] != nil else { throw UsageError(message: "unknown subcommand '\(name)'", command: nil) }
          result.command = name
        } else if let spec = specs[result.command!], name.hasPrefix("-"), name != "-" {
          if spec.repeatable.contains(name) {
            result.lists[name, default: []].append(try value(for: name, inline: inline))
          } else if spec.options.contains(name) {
            // Keeping the last of two values would silently drop the first (`--context a --context b`).
            guard result.options[name] == nil else {
              throw UsageError(message: "'\(name)' given more than once", command: result.command)
            }
            result.options[name] = try value(for: name, inline: inline)
            result.rawOptions[name] = rawValue
          } else if spec.flags.contains(name), inline == nil {
            result.flags.insert(name)
          } else {
            throw UsageError(message: "unknown option '\(name)'", command: result.command)
          }
        } else if specs[result.command!]?.takesPositionals == true {
          result.positionals.append(argument)
        } else {
          throw UsageError(message: "unexpected argument '\(argument)'", command: result.command)
        }
      }
      index += 1
    }
    return result
  }
}
