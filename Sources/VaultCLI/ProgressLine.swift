import Foundation

/// A progress line on standard error for long work (`rotate`, `scan`): drawn only on a terminal
/// (not `TERM=dumb`), only while the process is in the foreground, never with `--json`, only once
/// the work has run for `terminal.progressDelay` (a second), then redrawn at most four times a
/// second, and cleared at the end so it never mixes with results.
final class ProgressLine: @unchecked Sendable {
  private let terminal: Terminal
  private let enabled: Bool
  private let started = Date()
  private let lock = NSLock()
  private var last = Date.distantPast
  private var drawn = false

  /// - Parameters:
  ///   - terminal: where the line goes (its standard error).
  ///   - json: the command prints JSON: no progress at all.
  init(_ terminal: Terminal, json: Bool) {
    self.terminal = terminal
    // TERM=dumb cannot erase a line in place: each redraw would be another line.
    enabled = terminal.isInteractive && !json && !terminal.isDumb
  }

  /// Redraws the line with `text` when it is time to. A new `step` (backup's "deriving the key")
  /// is drawn at once, past the first second: a counter may skip values, a step may not, or the
  /// line would name a step already over while the next one runs.
  func update(_ text: @autoclosure () -> String, step: Bool = false) {
    guard enabled else { return }
    let now = Date()
    lock.withLock {
      guard now.timeIntervalSince(started) >= terminal.progressDelay, step || now.timeIntervalSince(last) >= 0.25,
        terminal.isForeground()
      else {
        return
      }
      last = now
      drawn = true
      // Carriage return, the text, then erase to the end of the line (a shorter text leaves no tail).
      terminal.writeError("\r" + text() + "\u{1B}[K")
    }
  }

  /// Clears the line, if one was drawn.
  func finish() {
    lock.withLock {
      if drawn, terminal.isForeground() { terminal.writeError("\r\u{1B}[K") }
      drawn = false
    }
  }
}
