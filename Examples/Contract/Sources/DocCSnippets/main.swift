// The ```swift blocks of the DocC catalogs (Sources/*/*.docc/*.md), each cut from here unchanged
// (tools/check-doc-snippets.py checks that they are), so every one compiles against the public
// API as an outside package sees it. Built by tools/check-consumer.sh, never run: the snippets
// reach for servers that do not exist. The names they take as given come first.
import Foundation

let home = CommandLine.arguments.count > 1 ? CommandLine.arguments[1] : NSTemporaryDirectory()
let body = "a note"
let id = "1"
let text = "a message"
let tokenPath = home + "/telemetry-token"

// Vault.md
import Vault

ProcessHardening.apply()
let vault = try Vault.open(home: home)
let envelope: Data = try vault.seal(Data(body.utf8), context: "notes/\(id)")
let plaintext: Data = try vault.open(envelope, context: "notes/\(id)")

// VaultQueue.md
import Vault
import VaultQueue

let queue = try QueueContainer(path: vault.home + "/queue.sqlite", vault: vault)
try queue.enqueue(Array(body.utf8), queue: "outbox")
let rotation = try vault.rotate(containers: QueueContainerProvider())

// Outbox.md
import Outbox

let transport = try HTTPJSONTransport(endpoint: URL(string: "https://relay.example/v1/messages")!)
let outbox = Outbox(container: queue, transport: transport)
try outbox.start()
let receipt = try outbox.send(Array(text.utf8))

// Telemetry.md
import Telemetry

let sender = try HTTPBatchSender(endpoint: URL(string: "https://collector.example/v1/telemetry/batch")!)
let telemetry = Telemetry(container: queue, tokens: TokenFile(path: tokenPath), sender: sender)
try telemetry.log(type: "app.start", payload: ["version": .string("1.0")])
try telemetry.start()

// VaultScan.md
import VaultScan

let report = try Scanner(canaries: ["a memo's text"], verifyingWith: vault).scan([home])
if !report.clean || !report.complete { /* report it */ }
