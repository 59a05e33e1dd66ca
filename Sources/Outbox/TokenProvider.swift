import Foundation

/// Gives the bearer token for uploads. The app implements it; `refresh: true` is asked once after
/// the server answers 401. Tokens are sent only in the `Authorization` header, never logged, never
/// put into an error or an event.
public protocol BearerTokenProvider: Sendable {
  func token(refresh: Bool) throws -> String
}
