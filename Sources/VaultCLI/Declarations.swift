import Foundation

/// The declarative command layer: each subcommand is a type that declares its parameters (with
/// their help) once, and parsing, usage errors, help pages, completions and the man page are all
/// generated from those declarations (`CommandParser`, `HelpRenderer`, `Completions`, `ManPage`).

/// A `vault` subcommand: what it accepts, and what it does with a parsed command line.
protocol Subcommand: Sendable {
  /// The command's name, help and parameters.
  static var declaration: CommandDeclaration { get }
  /// Runs the command on checked arguments and returns the exit code.
  static func run(_ cli: VaultCommandLine, _ arguments: Arguments) throws -> Int32
}

/// What a value must be. The parser checks it (a usage error that says what was expected, exit
/// 64) before any command runs; help names it and completions offer what fits.
enum ValueKind: Sendable {
  /// Any non-empty UTF-8 text.
  case text
  /// A name (a queue, an event type, a session): non-empty, without control characters, which
  /// could forge lines or send escapes to the terminal that lists it.
  case name
  /// Bytes, taken as given (need not be UTF-8), non-empty: the `--context`.
  case context
  /// A path to a file (completed as files).
  case file
  /// A path to a directory (completed as directories).
  case directory
  /// One of these words.
  case choice([String])
  /// A whole number within the range; `unit` names what it counts ("MiB").
  case wholeNumber(ClosedRange<Int>, unit: String?)
  /// A finite decimal number within the range, in `unit` ("seconds", "days").
  case number(ClosedRange<Double>, unit: String)
  /// A UUID; `what` says what it identifies ("a record id").
  case uuid(what: String)
  /// An http:// or https:// URL with a host (the value is never echoed: it may hold a token).
  case url
  /// The name of a subcommand (completed as subcommands).
  case subcommand
  /// An action of the subcommand named by the argument before it (`vault help queue put`).
  case action
}

/// One option, flag or positional argument.
struct Parameter: Sendable {
  enum Kind: Sendable {
    /// `--json`: present or not.
    case flag
    /// `--context CTX`: one value, given at most once.
    case option
    /// `--canary TEXT`: given any number of times, in order.
    case repeatable
    /// `IN`: a positional argument.
    case argument(Arity)
  }

  /// How many values a positional argument takes.
  enum Arity: Sendable {
    case optional, required, zeroOrMore, oneOrMore
  }

  /// `--context`, `-o`, or a positional argument's placeholder (`IN`).
  let name: String
  let kind: Kind
  /// What the value is called in usage and help (`CTX`); nil for a flag.
  let placeholder: String?
  let value: ValueKind
  /// One or more sentences; wrapped when printed.
  let help: String
  /// A required option (`--context` for seal); arguments carry their own arity.
  var required = false

  static func flag(_ name: String, help: String) -> Parameter {
    Parameter(name: name, kind: .flag, placeholder: nil, value: .text, help: help)
  }

  static func option(
    _ name: String, _ placeholder: String, _ value: ValueKind = .text, required: Bool = false, help: String
  ) -> Parameter {
    Parameter(name: name, kind: .option, placeholder: placeholder, value: value, help: help, required: required)
  }

  static func repeatable(_ name: String, _ placeholder: String, _ value: ValueKind = .text, help: String) -> Parameter {
    Parameter(name: name, kind: .repeatable, placeholder: placeholder, value: value, help: help)
  }

  static func argument(_ placeholder: String, _ arity: Arity, _ value: ValueKind = .text, help: String) -> Parameter {
    Parameter(name: placeholder, kind: .argument(arity), placeholder: placeholder, value: value, help: help)
  }

  var isArgument: Bool {
    if case .argument = kind { return true }
    return false
  }

  var arity: Arity? {
    if case .argument(let arity) = kind { return arity }
    return nil
  }

  /// How the parameter reads in a usage line, without brackets: `--context CTX`, `--json`, `IN`,
  /// `PATH...`.
  var usageText: String {
    switch kind {
    case .flag: name
    case .option, .repeatable: "\(name) \(placeholder ?? "VALUE")"
    case .argument(let arity):
      switch arity {
      case .optional, .required: name
      case .zeroOrMore, .oneOrMore: "\(name)..."
      }
    }
  }
}

/// A rule between parameters, checked after parsing and shown in the usage line.
enum Constraint: Sendable {
  /// The first only goes with the second: `--yes` with `--compromised` (nested in usage:
  /// `[--compromised [--yes]]`).
  case requires(String, String)
  /// Not both; `because` says why. Two optional parameters that exclude each other share one
  /// bracket in usage: `[--compromised … | --if-due …]`.
  case excludes(String, String, because: String?)
  /// Exactly one of these (option names or an argument's placeholder): `(--all | --state STATE | ID...)`.
  case exactlyOne([String])
}

/// A subcommand, or an action of one (`queue put`).
struct CommandDeclaration: Sendable {
  let name: String
  /// One line: the OVERVIEW, and the entry in the parent's list.
  let abstract: String
  /// Paragraphs (separated by blank lines), wrapped when printed.
  var discussion = ""
  var parameters: [Parameter] = []
  var constraints: [Constraint] = []
  /// Actions (`queue put`, `queue list`): the command then needs one of them.
  var actions: [CommandDeclaration] = []
  /// Help for options shared by several actions, shown on the parent's page instead of the first
  /// action's (`--json` prints something different for each).
  var sharedHelp: [String: String] = [:]
  /// What the command reads from standard input, shown in usage as `< payload`.
  var standardInput: String?
  /// Whether the command works on a vault home (usage shows `[--home DIR]`).
  var usesHome = true
  /// An EXIT CODES section, when the command's codes say more than the usual 0 / 1 / 2 / 64.
  var exitCodes: String?

  /// The parameter called `name` (an option's name or an argument's placeholder).
  func parameter(_ name: String) -> Parameter? { parameters.first { $0.name == name } }

  var options: [Parameter] { parameters.filter { !$0.isArgument } }
  var arguments: [Parameter] { parameters.filter(\.isArgument) }
}
