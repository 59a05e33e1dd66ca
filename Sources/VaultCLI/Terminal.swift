import Foundation

/// The process edges a command touches, so commands run in-process in tests.
public final class Terminal: @unchecked Sendable {
  public var environment: [String: String]
  /// Standard error is a terminal (progress lines are shown only then).
  public var isInteractive = false
  let readInput: () throws -> [UInt8]
  let writeOutput: ([UInt8]) -> Void
  let writeError: (String) -> Void

  public init(
    environment: [String: String], readInput: @escaping () throws -> [UInt8],
    writeOutput: @escaping ([UInt8]) -> Void, writeError: @escaping (String) -> Void
  ) {
    self.environment = environment
    self.readInput = readInput
    self.writeOutput = writeOutput
    self.writeError = writeError
  }

  /// The real standard streams and environment.
  public static func standard() -> Terminal {
    let terminal = Terminal(
      environment: ProcessInfo.processInfo.environment,
      readInput: { [UInt8](FileHandle.standardInput.readDataToEndOfFile()) },
      writeOutput: { bytes in FileHandle.standardOutput.write(Data(bytes)) },
      writeError: { text in FileHandle.standardError.write(Data(text.utf8)) })
    terminal.isInteractive = isatty(STDERR_FILENO) != 0
    if isatty(STDIN_FILENO) != 0 {
      terminal.askLine = { question in
        FileHandle.standardError.write(Data(question.utf8))
        return Swift.readLine(strippingNewline: true)
      }
    }
    return terminal
  }

  /// Asks a question on the controlling terminal and returns the answer line; nil when the
  /// process has no terminal (so scripts never block on a prompt).
  var askLine: ((String) -> String?)?

  func ask(_ question: String) -> String? { askLine?(question) }

  func print(_ text: String) { writeOutput(Array((text + "\n").utf8)) }
  func note(_ text: String) { writeError(text + "\n") }
}

/// Exit codes of the command-line contract.
public enum ExitCode: Int32, Sendable {
  case success = 0
  case failure = 1
  case couldNotRun = 2
  case usage = 64
}
