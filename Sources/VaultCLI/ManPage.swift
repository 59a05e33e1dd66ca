/// `vault help --man`: the manual page in roff (man(7) macros), generated from the declarations.
struct ManPage {
  let root: RootDeclaration

  func render() -> String {
    let help = HelpRenderer(root: root)
    var page = [
      ".TH VAULT 1 \"\" \"vault \(VersionCommand.number)\" \"User Commands\"",
      ".nh",
      ".ad l",
      ".SH NAME",
      "vault \\- " + Self.escape(root.abstract),
      ".SH SYNOPSIS",
    ]
    for command in root.commands {
      for line in help.usages(command) { page += [".br", Self.escape(line)] }
    }
    page += [".SH OPTIONS"]
    for option in CommandParser.globalOptions { page += Self.item(HelpRenderer.label(option), option.help) }
    page += [".SH COMMANDS"]
    for command in root.commands {
      page += [".SS " + Self.escape("vault " + command.name)]
      page += Self.paragraphs(command.abstract + (command.discussion.isEmpty ? "" : "\n\n" + command.discussion))
      let subjects = command.actions.isEmpty ? [(nil, command)] : command.actions.map { (Optional($0), $0) }
      for (action, subject) in subjects {
        if let action {
          page += [".TP", ".B " + Self.escape("vault \(command.name) \(action.name)")]
          page += Self.paragraphs(action.abstract + (action.discussion.isEmpty ? "" : "\n\n" + action.discussion))
        }
        page += [".PP", "Usage: " + Self.escape(help.usage(command, action: action))]
        for parameter in subject.parameters {
          page += Self.item(HelpRenderer.label(parameter), parameter.help)
        }
        if let exitCodes = subject.exitCodes { page += [".PP", "Exit codes: " + Self.escape(exitCodes)] }
      }
    }
    page += [".SH ENVIRONMENT"]
    for (name, text) in root.environment { page += Self.item(name, text) }
    page += [".SH EXIT STATUS", Self.escape(root.exitCodes)]
    page += [".SH FILES", "The vault home holds manifest.json and queue.sqlite; see SECURITY.md for the formats."]
    return page.joined(separator: "\n")
  }

  /// A tagged paragraph: the tag in bold, then its text.
  private static func item(_ tag: String, _ text: String) -> [String] {
    [".TP", ".B " + escape(tag), escape(text)]
  }

  private static func paragraphs(_ text: String) -> [String] {
    text.components(separatedBy: "\n\n").flatMap { [".PP", escape($0.replacingOccurrences(of: "\n", with: " "))] }
  }

  /// Text safe in a roff line: backslashes doubled, hyphens made minus signs where options are
  /// written, and a leading period or apostrophe (a request) guarded.
  static func escape(_ text: String) -> String {
    var out = text.replacingOccurrences(of: "\\", with: "\\e").replacingOccurrences(of: "-", with: "\\-")
    if out.hasPrefix(".") || out.hasPrefix("'") { out = "\\&" + out }
    return out
  }
}
