import Foundation
import Vault

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
  /// The latest text given before the first second, drawn when the second is up if the work is
  /// still running then (a command whose steps all begin early, backup's, showed nothing at all).
  private var pending: String?
  /// A stop signal ended the work (`clearForSignal`): nothing is drawn again.
  private var stopped = false

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
      guard !stopped else { return }
      let early = now.timeIntervalSince(started) < terminal.progressDelay
      if early {
        if pending == nil { drawWhenTheDelayIsUp() }
        pending = text()
        return
      }
      guard step || now.timeIntervalSince(last) >= 0.25 else { return }
      draw(text(), at: now)
    }
  }

  /// Clears the line, if one was drawn, and drops a text waiting for the first second (a later
  /// update draws again: rotation asks a question mid-way and goes on).
  func finish() {
    lock.withLock {
      if drawn, terminal.isForeground() { terminal.writeError("\r\u{1B}[K") }
      drawn = false
      pending = nil
    }
  }

  /// Whether the line is shown at all (a terminal, not dumb, no `--json`).
  var isEnabled: Bool { enabled }

  /// Clears the line for a process about to end by a stop signal (Ctrl-C, SIGTERM, SIGHUP), and
  /// draws nothing after: called from `StopSignals`' dispatch queue, never in a signal handler,
  /// so it may take the lock. An interrupted `vault scan` left its line, and the shell's prompt
  /// followed it on the same row.
  func clearForSignal() {
    lock.withLock {
      stopped = true
      if drawn, terminal.isForeground() { terminal.writeError("\r\u{1B}[K") }
      drawn = false
      pending = nil
    }
  }

  /// Draws `text` now (with `lock` held), in the foreground only.
  private func draw(_ text: String, at now: Date) {
    guard terminal.isForeground() else { return }
    last = now
    drawn = true
    pending = nil
    // Carriage return, the text, then erase to the end of the line (a shorter text leaves no tail).
    terminal.writeError("\r" + Self.fitted(Printable.escaped(text), columns: terminal.columns()) + "\u{1B}[K")
  }

  /// `text` cut to one column less than the terminal's width, ending in "…" when cut: a line that
  /// reached the last column would wrap (or leave the cursor past it), and the next carriage
  /// return would redraw only the last row, leaving the others on the screen. Width is counted in
  /// terminal columns (`TerminalWidth`), not characters: a CJK file name takes two per character.
  /// The text is cut between characters (grapheme clusters), never inside an escape `\u{…}`
  /// that `Printable.escaped` wrote.
  static func fitted(_ text: String, columns: Int?) -> String {
    guard let columns else { return text }
    let units = displayUnits(text)
    guard units.reduce(0, { $0 + $1.width }) >= columns else { return text }
    guard columns > 2 else { return "" }
    var kept = ""
    var width = 0
    for unit in units {
      // The "…" takes the last column left.
      guard width + unit.width <= columns - 2 else { break }
      kept += unit.text
      width += unit.width
    }
    return kept + "…"
  }

  /// `text` as the pieces a cut may fall between, each with its width in columns: a character,
  /// or a whole `\u{hh}` escape (ASCII, one column a byte).
  private static func displayUnits(_ text: String) -> [(text: String, width: Int)] {
    var units: [(text: String, width: Int)] = []
    var index = text.startIndex
    while index < text.endIndex {
      let rest = text[index...]
      if rest.hasPrefix("\\u{"), let close = rest.firstIndex(of: "}") {
        let escape = String(rest[...close])
        units.append((escape, escape.count))
        index = text.index(after: close)
        continue
      }
      let character = text[index]
      units.append((String(character), TerminalWidth.columns(of: character)))
      index = text.index(after: index)
    }
    return units
  }

  /// Draws the pending text once the delay is up, unless a later update or `finish` came first.
  private func drawWhenTheDelayIsUp() {
    let due = started.addingTimeInterval(terminal.progressDelay)
    DispatchQueue.global().asyncAfter(deadline: .now() + max(due.timeIntervalSinceNow, 0)) { [self] in
      lock.withLock {
        if let text = pending, !stopped { draw(text, at: Date()) }
      }
    }
  }
}
