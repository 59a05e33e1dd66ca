// A worker for tools/crash-campaign: it enqueues, delivers or rotates against one vault and
// container until it is killed, writing what it has *confirmed* to an fsynced log first-hand:
//
//   T <id>   about to enqueue <id>          C <id>   enqueue of <id> returned (durable)
//   D <id>   <id> was claimed, opened and its payload checked ("delivered")
//   A <id>   ack of <id> returned            X <id>   a claimed payload did not match its id
//   R <n>    rotation to version n finished
//
//   vault-crash-worker HOME LOG enqueue|deliver|rotate|drain
import Foundation
import Vault
import VaultQueue

let arguments = CommandLine.arguments
guard arguments.count == 4 else {
  FileHandle.standardError.write(Data("usage: vault-crash-worker HOME LOG enqueue|deliver|rotate|drain\n".utf8))
  exit(64)
}
let home = arguments[1]
let log = open(arguments[2], O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0o600)
guard log >= 0 else { exit(2) }

func note(_ tag: String, _ value: String) {
  let line = "\(tag) \(value)\n"
  _ = line.withCString { write(log, $0, strlen($0)) }
  fsync(log)
}

func payload(for id: String) -> [UInt8] { Array("crash-payload \(id) ".utf8) + Array(repeating: 0x2E, count: 200) }

do {
  let vault = try Vault.open(home: home)
  let configuration = QueueConfiguration(attemptCeiling: 1_000_000)
  let container = try QueueContainer(path: vault.home + "/queue.sqlite", vault: vault, configuration: configuration)

  func deliverOnce(lease: TimeInterval) throws -> Int {
    let claimed = try container.claim(queue: "crash", maxCount: 8, lease: lease)
    for record in claimed {
      let id = record.id.uuidString.lowercased()
      note(record.payloadBytes == payload(for: id) ? "D" : "X", id)
    }
    try container.ack(claimed.map(\.id))
    for record in claimed { note("A", record.id.uuidString.lowercased()) }
    return claimed.count
  }

  switch arguments[3] {
  case "enqueue":
    while true {
      let id = UUID().uuidString.lowercased()
      note("T", id)
      try container.enqueue(payload(for: id), queue: "crash", id: UUID(uuidString: id)!)
      note("C", id)
    }
  case "deliver":
    while true { if try deliverOnce(lease: 1) == 0 { usleep(5_000) } }
  case "rotate":
    while true {
      let report = try vault.rotate(containers: QueueContainerProvider())
      note("R", String(report.newVersion))
    }
  case "drain":
    // Finish any interrupted rotation, then deliver until nothing is left (waiting out leases
    // that killed deliverers left behind).
    let report = try vault.rotate(containers: QueueContainerProvider())
    note("R", String(report.newVersion))
    let deadline = Date() + 30
    while Date() < deadline {
      if try deliverOnce(lease: 30) == 0 {
        if try container.stats().byQueue["crash"] ?? 0 == 0 { break }
        usleep(100_000)
      }
    }
  default:
    exit(64)
  }
} catch {
  FileHandle.standardError.write(Data("vault-crash-worker: \(error)\n".utf8))
  exit(1)
}
