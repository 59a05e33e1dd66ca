import Foundation
import Vault

/// A parsed and checked command line: global `--home`, the subcommand and its action, the options,
/// flags and positional arguments. Every value has passed its declaration's check.
package struct Arguments {
  var home: String?
  var command: String?
  /// The action of a command that has them (`put` in `vault queue put`).
  var action: String?
  var options: [String: String] = [:]
  /// The same option values as the bytes given on the command line (which need not be UTF-8;
  /// `options` holds them with invalid sequences repaired to U+FFFD). `--context` is read from here.
  var rawOptions: [String: [UInt8]] = [:]
  /// Options that may be given more than once, in order.
  var lists: [String: [String]] = [:]
  var flags: Set<String> = []
  /// Positional arguments, after the action.
  var positionals: [String] = []
  var wantsHelp = false
  var wantsVersion = false

  /// An option's value as a decimal number (already checked against its declared range).
  func number(_ name: String) -> Double? { options[name].flatMap(Double.init) }

  /// An option's value as a whole number (already checked against its declared range).
  func wholeNumber(_ name: String) -> Int? { options[name].flatMap { Int($0) } }

  /// An option's value as a UUID (already checked).
  func uuid(_ name: String) -> UUID? { options[name].flatMap(UUID.init(uuidString:)) }
}

/// A usage error: printed with the command's usage line and a hint, exit 64.
package struct UsageError: Error {
  let message: String
  /// The subcommand whose usage to show (nil: the overview's).
  let command: String?
  /// The action within it, when known.
  var action: String? = nil
}

/// Parses a command line against the declared subcommands.
package struct CommandParser {
  let commands: [CommandDeclaration]

  /// The global options, declared like any other (shown on the root help page).
  static let globalOptions: [Parameter] = [
    .option(
      "--home", "DIR", .directory,
      help:
        "The vault's home directory (default: $VAULT_HOME, else $XDG_DATA_HOME/vault, else ~/.local/share/vault)."),
    .flag("--version", help: "Show the version."),
    .flag("-h, --help", help: "Show help information."),
  ]

  /// Parses arguments given as the raw bytes of each one, as the kernel passed them.
  package func parse(raw: [[UInt8]]) throws(UsageError) -> Arguments {
    let argv = raw.map { String(decoding: $0, as: UTF8.self) }
    var result = Arguments()
    var command: CommandDeclaration?
    var action: CommandDeclaration?
    // Options seen before the action was named, checked against it once it is.
    var early: [String] = []
    var index = 0
    var onlyPositionals = false

    func fail(_ message: String) -> UsageError {
      UsageError(message: message, command: result.command, action: result.action)
    }
    /// The value of option `name`: inline (`--name=value`) or the next argument, checked.
    func value(of parameter: Parameter, inline: String?) throws(UsageError) -> (String, [UInt8]) {
      let text: String
      let bytes: [UInt8]
      if let inline {
        // The name and "=" are ASCII, so they are the same bytes in the raw argument.
        bytes = Array(raw[index].dropFirst(parameter.name.utf8.count + 1))
        text = inline
      } else {
        index += 1
        guard index < argv.count else { throw fail("missing value for '\(parameter.name)'") }
        bytes = raw[index]
        text = argv[index]
      }
      try Self.check(text, bytes: bytes, for: parameter, command: result.command, action: result.action)
      return (text, bytes)
    }
    func record(_ parameter: Parameter, inline: String?) throws(UsageError) {
      switch parameter.kind {
      case .flag:
        guard inline == nil else { throw fail("'\(parameter.name)' takes no value") }
        result.flags.insert(parameter.name)
      case .repeatable:
        result.lists[parameter.name, default: []].append(try value(of: parameter, inline: inline).0)
      case .option:
        // Keeping the last of two values would silently drop the first (`--context a --context b`).
        guard result.options[parameter.name] == nil else { throw fail("'\(parameter.name)' given more than once") }
        let (text, bytes) = try value(of: parameter, inline: inline)
        result.options[parameter.name] = text
        result.rawOptions[parameter.name] = bytes
      case .argument: break
      }
    }

    while index < argv.count {
      let argument = argv[index]
      defer { index += 1 }
      if onlyPositionals || argument == "-" || !argument.hasPrefix("-") {
        if command == nil {
          guard let found = commands.first(where: { $0.name == argument }) else {
            throw UsageError(
              message: "unknown subcommand '\(Suggestion.shown(argument))'"
                + Suggestion.hint(argument, among: commands.map(\.name)), command: nil)
          }
          command = found
          result.command = found.name
        } else if let group = command, !group.actions.isEmpty, action == nil {
          guard let found = group.actions.first(where: { $0.name == argument }) else {
            let names = group.actions.map(\.name)
            let hint = Suggestion.hint(argument, among: names)
            throw fail(
              "unknown \(group.name) action '\(Suggestion.shown(argument))'"
                + (hint.isEmpty ? " (the actions are \(Self.list(names)))" : hint))
          }
          action = found
          result.action = found.name
          for name in early where found.parameter(name) == nil {
            throw fail("'\(name)' does not apply to '\(group.name) \(found.name)'")
          }
        } else {
          result.positionals.append(argument)
        }
        continue
      }
      if argument == "--" {
        onlyPositionals = true
        continue
      }
      var name = argument
      var inline: String?
      if argument.hasPrefix("--"), let equals = argument.firstIndex(of: "=") {
        name = String(argument[..<equals])
        inline = String(argument[argument.index(after: equals)...])
      }
      switch name {
      case "-h", "--help":
        result.wantsHelp = true
        continue
      case "--version" where command == nil:
        result.wantsVersion = true
        continue
      case "--home":
        guard result.home == nil else { throw UsageError(message: "'--home' given more than once", command: nil) }
        let home = try value(of: Self.globalOptions[0], inline: inline).0
        result.home = home
        continue
      default: break
      }
      guard let command else {
        throw UsageError(
          message: "unknown option '\(Suggestion.shown(name))'"
            + Suggestion.hint(name, among: ["--home", "--version", "--help"]),
          command: nil)
      }
      let current = action ?? command
      if let parameter = current.parameter(name), !parameter.isArgument {
        try record(parameter, inline: inline)
        continue
      }
      if action == nil, !command.actions.isEmpty,
        let parameter = command.actions.lazy.compactMap({ $0.parameter(name) }).first(where: { !$0.isArgument })
      {
        // Before the action: accepted if some action takes it, checked once the action is known.
        try record(parameter, inline: inline)
        early.append(name)
        continue
      }
      if let action, let group = Optional(command), group.actions.contains(where: { $0.parameter(name) != nil }) {
        throw fail("'\(name)' does not apply to '\(group.name) \(action.name)'")
      }
      let known = current.options.map(\.name) + command.actions.flatMap { $0.options.map(\.name) } + ["--help"]
      throw fail("unknown option '\(Suggestion.shown(name))'" + Suggestion.hint(name, among: known))
    }

    guard let command, !result.wantsHelp else { return result }
    if !command.actions.isEmpty, action == nil {
      throw fail("missing \(command.name) action (\(Self.list(command.actions.map(\.name), or: true)))")
    }
    try Self.checkArguments(&result, against: action ?? command)
    return result
  }

  /// Positional arity, required options and constraints.
  private static func checkArguments(_ result: inout Arguments, against declaration: CommandDeclaration)
    throws(UsageError)
  {
    func fail(_ message: String) -> UsageError {
      UsageError(message: message, command: result.command, action: result.action)
    }
    var remaining = result.positionals[...]
    for parameter in declaration.arguments {
      switch parameter.arity ?? .optional {
      case .required:
        guard let value = remaining.popFirst() else { throw fail("missing \(parameter.name)") }
        try check(value, bytes: Array(value.utf8), for: parameter, command: result.command, action: result.action)
      case .optional:
        if let value = remaining.popFirst(), value != "-" {
          try check(value, bytes: Array(value.utf8), for: parameter, command: result.command, action: result.action)
        }
      case .oneOrMore, .zeroOrMore:
        if parameter.arity == .oneOrMore, remaining.isEmpty, !isExactlyOneAlternative(parameter.name, declaration) {
          throw fail("missing \(parameter.name) (at least one)")
        }
        for value in remaining {
          try check(value, bytes: Array(value.utf8), for: parameter, command: result.command, action: result.action)
        }
        remaining = []
      }
    }
    if let extra = remaining.first { throw fail("unexpected argument '\(Suggestion.shown(extra))'") }
    for parameter in declaration.options where parameter.required && result.options[parameter.name] == nil {
      throw fail("missing '\(parameter.usageText)'")
    }
    func given(_ name: String) -> Bool {
      if let parameter = declaration.parameter(name), parameter.isArgument { return !result.positionals.isEmpty }
      return result.options[name] != nil || result.flags.contains(name) || result.lists[name] != nil
    }
    for constraint in declaration.constraints {
      switch constraint {
      case .requires(let first, let second):
        if given(first), !given(second) { throw fail("\(first) goes with \(second)") }
      case .excludes(let first, let second, let because):
        if given(first), given(second) {
          throw fail("\(first) cannot go with \(second)" + (because.map { " (\($0))" } ?? ""))
        }
      case .exactlyOne(let names):
        let present = names.filter(given)
        guard present.count == 1 else {
          let shown = names.map { declaration.parameter($0)?.usageText ?? $0 }
          throw fail(
            present.isEmpty
              ? "give one of \(list(shown, or: true))"
              : "give only one of \(list(names, or: true)), not \(present.joined(separator: " and "))")
        }
      }
    }
  }

  /// Whether an argument is one of an `exactlyOne` choice (then it may be absent).
  private static func isExactlyOneAlternative(_ name: String, _ declaration: CommandDeclaration) -> Bool {
    declaration.constraints.contains {
      if case .exactlyOne(let names) = $0 { return names.contains(name) }
      return false
    }
  }

  /// Checks one value against its declared kind.
  static func check(_ text: String, bytes: [UInt8], for parameter: Parameter, command: String?, action: String?)
    throws(UsageError)
  {
    let name = parameter.name
    func fail(_ message: String) -> UsageError { UsageError(message: message, command: command, action: action) }
    if case .context = parameter.value {
      guard !bytes.isEmpty else { throw fail("\(name) must not be empty: it binds the record to its place") }
      return
    }
    // Only a context is taken as bytes. Any other value that is not UTF-8 would reach vault
    // repaired (invalid bytes become U+FFFD), so two different names (queues, paths) would
    // become one: refuse it instead.
    guard Array(text.utf8) == bytes else { throw fail("the value of '\(name)' is not valid UTF-8") }
    guard !text.isEmpty else {
      if name == "--home" { throw fail(CommandLineEnvironment.emptyHomeMessage) }
      throw fail("\(name) must not be empty")
    }
    let got = "(got '\(Suggestion.shown(text))')"
    switch parameter.value {
    case .text, .file, .directory, .context: return
    case .name:
      guard !text.unicodeScalars.contains(where: Printable.isControl) else {
        throw fail("\(name) must not hold control characters (newlines, tabs, escapes)")
      }
    case .choice(let words):
      guard words.contains(text) else {
        throw fail("\(name) must be \(list(words, or: true)) \(got)" + Suggestion.hint(text, among: words))
      }
    case .wholeNumber(let range, let unit):
      guard let number = Int(text), range.contains(number) else {
        let what = unit.map { "a number of \($0)" } ?? "a whole number"
        throw fail(
          range.upperBound == Int.max
            ? "\(name) must be \(what), \(range.lowerBound) or more \(got)"
            : "\(name) must be \(what) from \(range.lowerBound) to \(range.upperBound) \(got)")
      }
    case .number(let range, let unit):
      // Finite and bounded: timers convert seconds to nanoseconds, where inf or 1e300 trap. Plain
      // decimals only: Double() also reads "0x10", "1e3" and "nan", which no operator means.
      guard CommandLineEnvironment.isPlainDecimal(text), let number = Double(text), number.isFinite,
        range.contains(number)
      else {
        throw fail(
          "\(name) must be a number of \(unit) from \(decimal(range.lowerBound)) to \(decimal(range.upperBound)) \(got)"
        )
      }
    case .uuid(let what):
      guard UUID(uuidString: text) != nil else {
        throw fail("\(name) must be \(what) (a UUID; got '\(Suggestion.shown(text))')")
      }
    case .url:
      // Foundation takes "http://h/x y" (and control characters) and sends it percent-encoded:
      // a mistyped or pasted endpoint is refused instead (outside operator review).
      guard !text.unicodeScalars.contains(where: { $0.value <= 0x20 || Printable.isControl($0) }) else {
        throw fail("\(name) must be a URL without spaces or control characters (write a space as %20)")
      }
      guard let url = URL(string: text), let scheme = url.scheme?.lowercased(), ["http", "https"].contains(scheme),
        url.host?.isEmpty == false
      else {
        // Not echoed: a mistyped endpoint may still carry a token in its query or user part.
        throw fail("\(name) must be an https:// (or loopback http://) URL with a host")
      }
    case .subcommand, .action: return
    }
  }

  /// "a, b or c".
  static func list(_ words: [String], or: Bool = false) -> String {
    guard words.count > 1 else { return words.first ?? "" }
    return words.dropLast().joined(separator: ", ") + (or ? " or " : " and ") + words.last!
  }

  /// "0.1", "86400".
  static func decimal(_ value: Double) -> String {
    value == value.rounded() ? String(Int(value)) : String(value)
  }
}

/// "Did you mean": the closest known word to a mistyped one.
enum Suggestion {
  /// " (did you mean 'rotate'?)", or "" when nothing is close.
  static func hint(_ typed: String, among candidates: [String]) -> String {
    closest(to: typed, among: candidates).map { " (did you mean '\($0)'?)" } ?? ""
  }

  /// The candidate within a third of the typed length in edits (at least one), or the only one
  /// the typed text begins.
  static func closest(to typed: String, among candidates: [String]) -> String? {
    let typed = typed.lowercased()
    guard !typed.isEmpty, typed.count <= 64 else { return nil }
    let prefixed = candidates.filter { $0.hasPrefix(typed) && $0 != typed }
    if typed.count >= 2, prefixed.count == 1 { return prefixed[0] }
    let limit = max(1, typed.count / 3)
    let ranked = candidates.map { ($0, distance(typed, $0.lowercased())) }.filter { $0.1 <= limit }
    return ranked.min { $0.1 < $1.1 }?.0
  }

  /// Edits (insert, delete, replace, swap of neighbours) between two words.
  static func distance(_ a: String, _ b: String) -> Int {
    let a = Array(a.unicodeScalars)
    let b = Array(b.unicodeScalars)
    guard !a.isEmpty else { return b.count }
    guard !b.isEmpty else { return a.count }
    var table = Array(repeating: Array(repeating: 0, count: b.count + 1), count: a.count + 1)
    for i in 0...a.count { table[i][0] = i }
    for j in 0...b.count { table[0][j] = j }
    for i in 1...a.count {
      for j in 1...b.count {
        let cost = a[i - 1] == b[j - 1] ? 0 : 1
        table[i][j] = min(table[i - 1][j] + 1, table[i][j - 1] + 1, table[i - 1][j - 1] + cost)
        if i > 1, j > 1, a[i - 1] == b[j - 2], a[i - 2] == b[j - 1] {
          table[i][j] = min(table[i][j], table[i - 2][j - 2] + 1)
        }
      }
    }
    return table[a.count][b.count]
  }

  /// A mistyped word as echoed in an error: at most 40 characters (the error's printing escapes
  /// control characters, as it does for every message).
  static func shown(_ text: String) -> String {
    let shown = String(String.UnicodeScalarView(text.unicodeScalars.prefix(40)))
    return text.unicodeScalars.count > 40 ? shown + "…" : shown
  }
}
