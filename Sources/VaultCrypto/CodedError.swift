import Foundation

/// An error thrown by vault's library: its description names a kind of failure and the place, never
/// a record's content or key material, and `code` says the same for a program.
///
/// `localizedDescription` is the description (what `vault` prints for it, without the command
/// line's own advice), so `error.localizedDescription` reads as a sentence instead of "The
/// operation could not be completed". Errors are `Sendable`, so they can cross to the task or
/// thread that reports them.
public protocol CodedError: LocalizedError, CustomStringConvertible, Sendable {
  /// A stable, machine-readable code, `domain.kind` (for example `envelope.authentication-failed`,
  /// `key-store.locked`): it names the case, not its details, and does not change between releases.
  var code: String { get }
}

extension CodedError {
  /// The description, so `localizedDescription` is the error's own sentence.
  public var errorDescription: String? { description }
}
