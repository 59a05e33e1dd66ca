import Foundation
import Vault
import VaultQueue

/// `vault queue list`, streamed: each row is written as SQLite reads it (in 64 KiB writes), so
/// memory stays flat on a queue of any size, and `--limit N` / `--after ID` page through it.
extension VaultCommandLine {
  /// Writes the rows as they are read. `--json` is still one valid JSON array, the same bytes the
  /// whole-array encoding gave (pretty-printed, sorted keys), built one element at a time.
  func list(
    _ container: QueueContainer, queue: String?, state: RecordState?, page: (limit: Int?, after: UUID?), json: Bool
  ) throws {
    var output = ChunkedOutput(terminal: terminal)
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
    var first = true
    do {
      try container.forEachRecord(queue: queue, state: state, after: page.after, limit: page.limit) { record in
        if json {
          // Each element indented one level, as inside the array.
          let element = Printable.json(String(decoding: try encoder.encode(record), as: UTF8.self))
            .replacingOccurrences(of: "\n", with: "\n  ")
          try output.append((first ? "[\n  " : ",\n  ") + element)
        } else {
          try output.append(
            "\(record.id.uuidString.lowercased())  \(Printable.escaped(record.queue))  \(record.state.rawValue)  attempts "
              + "\(record.attempts)  v\(record.keyVersion)  \(record.bytes) B  \(Printable.escaped(record.errorKind ?? "-"))  "
              + QueueContainer.timestamp(record.createdAt) + "\n")
        }
        first = false
      }
      if json { try output.append(first ? "[\n\n]\n" : "\n]\n") }
      output.flush()
    } catch is ChunkedOutput.Stopped {
      // Standard output failed (a closed pipe, a full disk): `finish` reports it; read no further.
    }
  }
}

/// Gathers output into 64 KiB writes (a write per row cost a system call per record).
struct ChunkedOutput {
  /// Standard output failed: stop reading rows nobody will see.
  struct Stopped: Error {}

  let terminal: Terminal
  private var buffer: [UInt8] = []
  private static let size = 64 << 10

  init(terminal: Terminal) {
    self.terminal = terminal
    buffer.reserveCapacity(Self.size + 4096)
  }

  mutating func append(_ text: String) throws(Stopped) {
    buffer.append(contentsOf: text.utf8)
    guard buffer.count >= Self.size else { return }
    flush()
    if terminal.outputFailure() != nil { throw Stopped() }
  }

  mutating func flush() {
    guard !buffer.isEmpty else { return }
    terminal.writeOutput(buffer)
    buffer.removeAll(keepingCapacity: true)
  }
}
