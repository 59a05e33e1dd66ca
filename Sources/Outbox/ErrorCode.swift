import Foundation
import VaultCrypto

/// How a loop names an error in events and logs: its `code` (a `CodedError`), else its type and
/// case name, never its description, which may carry a path or a server's words.
package func errorCode(of error: any Error) -> String {
  if let coded = error as? any CodedError { return coded.code }
  let type = String(describing: Swift.type(of: error))
  if let label = Mirror(reflecting: error).children.first?.label { return "\(type).\(label)" }
  return type
}
