import Foundation

/// An error with a stable, machine-readable `code` (`endpoint.insecure-http`,
/// `telemetry.token-unavailable`): match on it, never on the text, which may be reworded.
/// `errorDescription` is the text the command-line tools print; it never quotes a payload or a
/// secret, and gives no command-line advice (the tools add their own).
public protocol CodedError: LocalizedError, Sendable {
  var code: String { get }
}

/// How a loop names an error in events and logs: its `code`, else its type and case name (never
/// its description, which may carry a path or a server's words).
package func errorCode(of error: any Error) -> String {
  if let coded = error as? any CodedError { return coded.code }
  let type = String(describing: Swift.type(of: error))
  if let label = Mirror(reflecting: error).children.first?.label { return "\(type).\(label)" }
  return type
}
