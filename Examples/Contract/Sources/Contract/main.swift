// Issue 12's contract, unchanged: it must compile and run in a package that depends on vault by path.
import Foundation
import Outbox
import Telemetry
import Vault
import VaultQueue
import VaultScan

let home = CommandLine.arguments[1]            // made by `vault init --store keyfile`
let vault = try Vault.open(home: home)
let note: Data = try vault.seal(Data("meet at six".utf8), context: "notes/42")
_ = try vault.rotate()
_ = try vault.rotate()
let back: Data = try vault.open(note, context: "notes/42")
precondition(back == Data("meet at six".utf8))
print("ok")
