import Foundation
import Vault

/// The process edges a command touches, so commands run in-process in tests.
public final class Terminal: @unchecked Sendable {
  public var environment: [String: String]
  /// Standard error is a terminal (progress lines are shown only then).
  public var isInteractive = false
  /// How long long work runs before it shows a progress line (tests set 0).
  var progressDelay: TimeInterval = 1
  /// Whether this process may draw on the terminal now: true unless it is a background job (the
  /// real terminal asks the kernel each time; a job sent to the background with `&` or `bg`
  /// would otherwise redraw over the shell's prompt and what the user is typing).
  var isForeground: () -> Bool = { true }
  /// The terminal's width in columns, when standard error is one and says (a progress line longer
  /// than the width would wrap, and the carriage return would then redraw only its last row).
  var columns: () -> Int? = { nil }
  /// `TERM=dumb`: no escape sequences, so a progress line is not erased in place.
  var isDumb: Bool { environment["TERM"] == "dumb" }
  /// Standard output is a terminal (`seal` refuses to write binary there).
  public var outputIsTerminal = false
  /// The first failure writing standard output, if the output reports them (the real one does).
  var outputFailure: () -> StandardOutputError? = { nil }
  /// The terminal is the process's own: check its resource limits before a command runs.
  var checksProcessResources = false
  /// Reads standard input, at most the given number of bytes.
  let readInput: (Int) throws -> [UInt8]
  let writeOutput: ([UInt8]) -> Void
  let writeError: (String) -> Void

  public init(
    environment: [String: String], readInput: @escaping (Int) throws -> [UInt8],
    writeOutput: @escaping ([UInt8]) -> Void, writeError: @escaping (String) -> Void
  ) {
    self.environment = environment
    self.readInput = readInput
    self.writeOutput = writeOutput
    self.writeError = writeError
  }

  /// The real standard streams and environment, through read(2) and write(2) (see
  /// `StandardStreams`). Call `ProcessHardening.apply()` first, so closed streams are known.
  public static func standard() -> Terminal {
    let streams = StandardStreams(closed: ProcessHardening.closedStandardStreams)
    let terminal = Terminal(
      environment: ProcessInfo.processInfo.environment, readInput: { try streams.readInput(limit: $0) },
      writeOutput: { bytes in streams.writeOutput(bytes) }, writeError: { text in streams.writeError(text) })
    terminal.isInteractive = isatty(STDERR_FILENO) != 0
    terminal.isForeground = { tcgetpgrp(STDERR_FILENO) == getpgrp() }
    terminal.columns = {
      var size = winsize()
      guard ioctl(STDERR_FILENO, UInt(TIOCGWINSZ), &size) == 0, size.ws_col > 0 else { return nil }
      return Int(size.ws_col)
    }
    terminal.outputIsTerminal = isatty(STDOUT_FILENO) != 0
    terminal.outputFailure = { streams.outputFailure }
    terminal.checksProcessResources = true
    if isatty(STDIN_FILENO) != 0 {
      terminal.askLine = { question in
        streams.writeError(question)
        return Swift.readLine(strippingNewline: true)
      }
    }
    return terminal
  }

  /// What a command that changed something did, said on standard error when its output could not
  /// be written (`VaultCommandLine.finish`): "the record was stored as ID; running the command
  /// again would store it again …". Set only where a rerun would do it again.
  var done: String?

  /// Asks a question on the controlling terminal and returns the answer line; nil when the
  /// process has no terminal (so scripts never block on a prompt).
  var askLine: ((String) -> String?)?

  func ask(_ question: String) -> String? { askLine?(Printable.keepingLines(question)) }

  /// Writes one line of text to standard output. Every control or invisible character in it is
  /// escaped (`Printable.escaped`), newlines and tabs too: no name a message holds (a path, a queue, a field read
  /// from a file) reaches the terminal as an escape sequence or starts a line of its own. Text of
  /// several lines goes through `printBlock`; bytes meant as they are (`open`'s plaintext) through
  /// `writeOutput`.
  func print(_ text: String) { writeOutput(Array((Printable.escaped(text) + "\n").utf8)) }
  /// Writes text of several lines that vault composed (a help page, a script, JSON) to standard
  /// output: control characters but newline and tab are escaped (`Printable.keepingLines`).
  func printBlock(_ text: String) { writeOutput(Array((Printable.keepingLines(text) + "\n").utf8)) }
  /// Writes one line of text to standard error, escaped as `print` does.
  func note(_ text: String) { writeError(Printable.escaped(text) + "\n") }
  /// Writes "Error: " and `message` as one line on standard error: every control character in it is
  /// escaped, newlines too (no error's text has a line of its own; a path in it might).
  func error(_ message: String) { note("Error: " + message) }
  /// Writes text to standard error as it is but for its control characters other than newline and
  /// tab (`Printable.keepingLines`): for a question's lead-in, or the line that ends a question
  /// left by Ctrl-D, whose lines end where the text says.
  func say(_ text: String) { writeError(Printable.keepingLines(text)) }
}

/// Exit codes of the command-line contract.
public enum ExitCode: Int32, Sendable {
  case success = 0
  case failure = 1
  case couldNotRun = 2
  case usage = 64
}

/// "1 record", "2 records": a count with its noun, singular for one.
///
/// - Parameters:
///   - count: how many.
///   - noun: the singular.
///   - plural: the plural, when it is not `noun` + "s".
func counted(_ count: Int, _ noun: String, plural: String? = nil) -> String {
  "\(count) " + (count == 1 ? noun : plural ?? noun + "s")
}
