import Foundation
import Outbox
import Telemetry
import Vault
import VaultQueue

/// The app's own storage: each note sealed into a file of its own, under a context that names it.
struct NoteStore {
  let vault: Vault
  let directory: String

  // guide:seal-a-note
  func save(_ text: String, id: UUID) throws {
    let sealed: Data = try vault.seal(Data(text.utf8), context: "notes/\(id.uuidString.lowercased())")
    try sealed.write(to: URL(fileURLWithPath: "\(directory)/\(id.uuidString.lowercased()).note"), options: .atomic)
  }

  func read(id: UUID) throws -> String {
    let sealed = try Data(contentsOf: URL(fileURLWithPath: "\(directory)/\(id.uuidString.lowercased()).note"))
    let plaintext: Data = try vault.open(sealed, context: "notes/\(id.uuidString.lowercased())")
    return String(decoding: plaintext, as: UTF8.self)
  }
  // guide:end

  func ids() throws -> [UUID] {
    try FileManager.default.contentsOfDirectory(atPath: directory).filter { $0.hasSuffix(".note") }.sorted()
      .compactMap { UUID(uuidString: String($0.dropLast(5))) }
  }
}

/// What the app logs about its use: counts, never the text.
// guide:telemetry-payload
struct NoteAdded: Encodable {
  let words: Int
  let characters: Int
}
// guide:end

/// The app's delivery plumbing, made once at start.
struct Delivery {
  let outbox: Outbox
  let telemetry: Telemetry

  // guide:make-delivery
  init(vault: Vault, server: URL, collector: URL, tokenFile: String) throws {
    // The vault's default container (the one `vault init` made and `vault queue …` reads): the
    // outbox's notes and telemetry's events, sealed until delivered. Past its byte cap (20 MB) the
    // oldest records are dropped; only telemetry's may be, so events never push out a saved note
    // (a note that finds the container full of notes is refused with `capExceeded` instead).
    let container = try QueueContainer(
      path: vault.home + "/queue.sqlite", vault: vault,
      configuration: QueueConfiguration(capVictims: .only([Telemetry.queueName])))
    let transport = try HTTPBodyTransport(
      endpoint: server, headers: [(name: "Content-Type", value: "text/plain; charset=utf-8")])
    outbox = Outbox(container: container, queue: "notes", transport: transport)
    telemetry = Telemetry(
      container: container, tokens: TokenFile(path: tokenFile),
      sender: try HTTPBatchSender(endpoint: collector))
  }
  // guide:end
}
