// notes: the example app of docs/INTEGRATING.md.
//
//   notes HOME add TEXT                                           save a note, queue it for the server
//   notes HOME sync SERVER_URL COLLECTOR_URL TOKEN_FILE           deliver what is queued
//   notes HOME list                                               the saved notes
//   notes HOME audit CANARY...                                    scan HOME for the canaries, in-process
//   notes DIR selftest                                            the guide's test set-up, run in DIR
//
// HOME is a vault made by `vault init` (the notes live beside it, in HOME/notes).
import Foundation
import Outbox
import Telemetry
import Vault
import VaultQueue
import VaultScan

ProcessHardening.apply()           // no core dumps, no register dumps on a crash, fds 0–2 held open
try ProcessResources.ensure()      // optional: a clear error now rather than a trap or hang later

let arguments = Array(CommandLine.arguments.dropFirst())
guard arguments.count >= 2 else {
  FileHandle.standardError.write(
    Data("usage: notes HOME add TEXT | sync SERVER COLLECTOR TOKEN_FILE | list | audit CANARY... | DIR selftest\n".utf8))
  exit(64)
}
if arguments[1] == "selftest" {
  let pass = try await TestSupport.selfTest(in: arguments[0])
  print("selftest: retrying \(pass.retrying), parked \(pass.parked), rejected \(pass.rejected)")
  exit(0)
}
let vault = try Vault.open(home: arguments[0])
let store = NoteStore(vault: vault, directory: vault.home + "/notes")
// guide:notes-directory
// The app's own files: private to the user, like everything vault writes (sealed or not).
try FileManager.default.createDirectory(
  atPath: store.directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
// guide:end

switch (arguments[1], arguments.count) {
case ("add", 3):
  // Delivery is configured at start in a real app; here the URLs only have to be valid.
  let delivery = try Delivery(
    vault: vault, server: URL(string: "http://127.0.0.1:1/notes")!,
    collector: URL(string: "http://127.0.0.1:1/v1/telemetry/batch")!, tokenFile: "/dev/null")
  let text = arguments[2]
  // guide:add-note
  let receipt = try delivery.outbox.send(Data(text.utf8))  // sealed and on disk: safe to clear the editor
  try store.save(text, id: receipt.id)
  try delivery.telemetry.log(
    type: "note_added", encoding: NoteAdded(words: text.split(separator: " ").count, characters: text.count))
  // guide:end
  print("saved \(receipt.id.uuidString.lowercased())")
case ("sync", 5):
  guard let server = URL(string: arguments[2]), let collector = URL(string: arguments[3]) else { exit(64) }
  let delivery = try Delivery(vault: vault, server: server, collector: collector, tokenFile: arguments[4])
  // guide:sync
  let events = delivery.outbox.events()
  let pass = try await delivery.outbox.deliverDue()
  delivery.outbox.stop()  // ends the event stream
  for await event in events {
    if case .parked(let ids, let kind) = event { print("parked \(ids.count) (\(kind)): resend them after fixing") }
  }
  let report = try delivery.telemetry.flush()
  // guide:end
  print("notes delivered \(pass.delivered), retrying \(pass.retrying), parked \(pass.parked), rejected \(pass.rejected)")
  print("events delivered \(report.delivered) in \(report.batches) batches")
case ("list", 2):
  for id in try store.ids() { print("\(id.uuidString.lowercased())  \(try store.read(id: id))") }
case ("audit", 3...):
  // The app's own containers stay open while it audits its home, as in a long-running app.
  let delivery = try Delivery(
    vault: vault, server: URL(string: "http://127.0.0.1:1/notes")!,
    collector: URL(string: "http://127.0.0.1:1/v1/telemetry/batch")!, tokenFile: "/dev/null")
  let canaries = Array(arguments[2...])
  // guide:audit
  let report = try Scanner(canaries: canaries, verifyingWith: vault).scan([vault.home])
  guard report.clean && report.complete else {
    print("audit: \(report.findings.count) findings, \(report.incomplete.count) not read in full")
    exit(1)
  }
  // guide:end
  print("audit: \(report.filesScanned) files, \(report.verify?.opened ?? 0) records opened: clean and complete")
  _ = try delivery.outbox.send(Data("sent after the audit".utf8))  // the container is still usable
default:
  exit(64)
}
