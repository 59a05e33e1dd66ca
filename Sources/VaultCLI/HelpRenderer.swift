/// Help pages and usage lines, generated from the declarations (OVERVIEW / USAGE / ARGUMENTS /
/// ACTIONS / OPTIONS), pinned by the golden files in Tests/VaultCLITests/Golden.
struct HelpRenderer {
  let root: RootDeclaration

  /// Lines are wrapped to this width.
  static let width = 100
  /// Where the help text of an option starts.
  static let column = 26

  // MARK: - Usage lines

  /// `vault [--home DIR] seal --context CTX [-o OUT] [--armor] [IN]`, unwrapped.
  func usage(_ command: CommandDeclaration, action: CommandDeclaration? = nil) -> String {
    prefix(command)
      + ([action?.name ?? ""].filter { !$0.isEmpty } + Self.tokens(action ?? command)).map { " " + $0 }
      .joined()
  }

  /// Every usage line of a command: one per action for a command that has them.
  func usages(_ command: CommandDeclaration) -> [String] {
    command.actions.isEmpty ? [usage(command)] : command.actions.map { usage(command, action: $0) }
  }

  /// The usage line shown under a usage error: the action's when known; for a command with actions
  /// and none named, `queue put|stats|list|resend [options]`.
  func errorUsage(_ command: CommandDeclaration, action: CommandDeclaration?) -> String {
    if command.actions.isEmpty || action != nil { return usage(command, action: action) }
    return prefix(command) + " " + command.actions.map(\.name).joined(separator: "|") + " [options]"
  }

  private func prefix(_ command: CommandDeclaration) -> String {
    "vault" + (command.usesHome ? " [--home DIR]" : "") + " " + command.name
  }

  /// The usage tokens of a declaration, each kept whole when lines wrap. An option that requires
  /// another is nested in its bracket, two optional ones that exclude each other share one, and
  /// an exactly-one choice is a parenthesized alternation.
  static func tokens(_ declaration: CommandDeclaration) -> [String] {
    var dependents: [String: [String]] = [:]
    var partners: [String: String] = [:]
    var choices: [[String]] = []
    for constraint in declaration.constraints {
      switch constraint {
      case .requires(let first, let second): dependents[second, default: []].append(first)
      case .excludes(let first, let second, _): partners[first] = second
      case .exactlyOne(let names): choices.append(names)
      }
    }
    let nested = Set(dependents.values.joined())
    func bare(_ parameter: Parameter) -> String {
      var text = parameter.usageText
      for name in dependents[parameter.name] ?? [] {
        if let dependent = declaration.parameter(name) { text += " [\(bare(dependent))]" }
      }
      return text
    }
    func token(_ parameter: Parameter) -> String {
      switch parameter.kind {
      case .flag: return "[\(bare(parameter))]"
      case .option: return parameter.required ? bare(parameter) : "[\(bare(parameter))]"
      case .repeatable: return "[\(bare(parameter))]..."
      case .argument(let arity):
        switch arity {
        case .required, .oneOrMore: return bare(parameter)
        case .optional, .zeroOrMore: return "[\(bare(parameter))]"
        }
      }
    }
    var done: Set<String> = []
    var tokens: [String] = []
    for parameter in declaration.parameters where !done.contains(parameter.name) && !nested.contains(parameter.name) {
      if let choice = choices.first(where: { $0.contains(parameter.name) }) {
        tokens.append(
          "(" + choice.compactMap { declaration.parameter($0).map(bare) }.joined(separator: " | ") + ")")
        done.formUnion(choice)
      } else if let partner = partners[parameter.name].flatMap(declaration.parameter), !parameter.required {
        tokens.append("[\(bare(parameter)) | \(bare(partner))]")
        done.insert(partner.name)
      } else {
        tokens.append(token(parameter))
      }
      done.insert(parameter.name)
    }
    if let input = declaration.standardInput { tokens.append("< \(input)") }
    return tokens
  }

  /// A usage line wrapped under `lead` (`USAGE: `), continuation lines aligned after `vault `.
  func wrappedUsage(_ line: String, lead: String) -> String {
    let indent = String(repeating: " ", count: lead.count + "vault ".count)
    var lines: [String] = []
    var current = lead
    // Split on spaces outside brackets and parentheses, so no group is cut.
    var depth = 0
    var word = ""
    var words: [String] = []
    for character in line {
      if character == "[" || character == "(" { depth += 1 }
      if character == "]" || character == ")" { depth -= 1 }
      if character == " ", depth == 0 {
        words.append(word)
        word = ""
      } else {
        word.append(character)
      }
    }
    words.append(word)
    for word in words {
      if current.count + 1 + word.count > Self.width, current.count > indent.count {
        lines.append(current)
        current = indent + word
      } else {
        current += (current == lead ? "" : " ") + word
      }
    }
    lines.append(current)
    return lines.joined(separator: "\n")
  }

  // MARK: - Pages

  /// `vault --help`.
  func rootPage() -> String {
    var page = Self.paragraphs("OVERVIEW: " + root.abstract) + "\n\n"
    page += "USAGE: vault [--home DIR] <subcommand> [options]\n\n"
    page += "OPTIONS:\n" + CommandParser.globalOptions.map(row).joined() + "\n"
    page += "SUBCOMMANDS:\n"
    for command in root.commands { page += Self.row(command.name, command.abstract) }
    page += "\nENVIRONMENT:\n"
    for (name, text) in root.environment { page += Self.row(name, text, column: 32) }
    page += "\nEXIT CODES:\n" + Self.wrap(root.exitCodes, width: Self.width, indent: 2) + "\n"
    page += "\n  See 'vault help <subcommand>' for detailed help."
    return page
  }

  /// `vault help COMMAND [ACTION]` and `vault COMMAND [ACTION] --help`.
  func page(_ command: CommandDeclaration, action: CommandDeclaration? = nil) -> String {
    let subject = action ?? command
    var page = Self.paragraphs("OVERVIEW: " + subject.abstract) + "\n"
    if !subject.discussion.isEmpty { page += "\n" + Self.paragraphs(subject.discussion) + "\n" }
    let lines = action.map { [usage(command, action: $0)] } ?? usages(command)
    page += "\n"
    for (index, line) in lines.enumerated() {
      page += wrappedUsage(line, lead: index == 0 ? "USAGE: " : "       ") + "\n"
    }
    let arguments = subject.arguments
    if !arguments.isEmpty {
      page += "\nARGUMENTS:\n" + arguments.map(row).joined()
    }
    if action == nil, !command.actions.isEmpty {
      page += "\nACTIONS:\n" + command.actions.map { Self.row($0.name, $0.abstract) }.joined()
    }
    page += "\nOPTIONS:\n"
    if action == nil, !command.actions.isEmpty {
      var seen: Set<String> = []
      for option in command.actions.flatMap(\.options) where seen.insert(option.name).inserted {
        page += Self.row(Self.label(option), command.sharedHelp[option.name] ?? option.help)
      }
    } else {
      page += subject.options.map(row).joined()
    }
    page += Self.row("-h, --help", "Show help information.")
    if let exitCodes = subject.exitCodes {
      page += "\nEXIT CODES:\n" + Self.wrap(exitCodes, width: Self.width, indent: 2) + "\n"
    }
    if action == nil, !command.actions.isEmpty {
      page += "\n  See 'vault help \(command.name) <action>' for an action's details.\n"
    }
    return String(page.dropLast())
  }

  // MARK: - Text

  private func row(_ parameter: Parameter) -> String { Self.row(Self.label(parameter), parameter.help) }

  /// What names an option in a help row: `--context CTX`, `--json`, `IN`.
  static func label(_ parameter: Parameter) -> String {
    parameter.isArgument ? parameter.name : parameter.usageText
  }

  /// `  label                   text…`, the text wrapped at `column`.
  static func row(_ label: String, _ text: String, column: Int = column) -> String {
    let lead = "  " + label
    let body = wrap(text, width: width - column, indent: 0).split(separator: "\n", omittingEmptySubsequences: false)
    let pad = String(repeating: " ", count: column)
    var out: String
    var rest = body[...]
    if lead.count <= column - 2 {
      out = lead + String(repeating: " ", count: column - lead.count) + (rest.popFirst() ?? "") + "\n"
    } else {
      out = lead + "\n"
    }
    for line in rest { out += pad + line + "\n" }
    return out
  }

  /// Paragraphs separated by blank lines, each wrapped to the page width.
  static func paragraphs(_ text: String) -> String {
    text.components(separatedBy: "\n\n").map { wrap($0, width: width - 8, indent: 0) }.joined(separator: "\n\n")
  }

  /// Words filled into lines of at most `width` characters (a longer word stands alone),
  /// each line indented by `indent` spaces.
  static func wrap(_ text: String, width: Int, indent: Int) -> String {
    let pad = String(repeating: " ", count: indent)
    var lines: [String] = []
    var current = ""
    for word in text.split(whereSeparator: { $0 == " " || $0 == "\n" }) {
      if current.isEmpty {
        current = String(word)
      } else if current.count + 1 + word.count > width - indent {
        lines.append(pad + current)
        current = String(word)
      } else {
        current += " " + word
      }
    }
    if !current.isEmpty { lines.append(pad + current) }
    return lines.joined(separator: "\n")
  }
}

/// The whole command line: the overview and every subcommand, in the order help lists them.
struct RootDeclaration: Sendable {
  let abstract: String
  let commands: [CommandDeclaration]
  let environment: [(String, String)]
  let exitCodes: String

  func command(_ name: String) -> CommandDeclaration? { commands.first { $0.name == name } }
}
