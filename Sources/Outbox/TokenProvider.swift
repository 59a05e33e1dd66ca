import Foundation

/// Gives the bearer token for uploads. The app implements it; `refresh: true` is asked once after
/// the server answers 401. Tokens are sent only in the `Authorization` header, never logged, never
/// put into an error or an event.
public protocol BearerTokenProvider: Sendable {
  /// The token to send now; called before each request (a telemetry pass asks once per pass).
  ///
  /// - Parameter refresh: true after the server answered 401 to the last token: fetch a fresh one.
  /// - Returns: the token, without `Bearer `; an empty token sends no `Authorization` header.
  /// - Throws: any error when no token is available; delivery then waits (the outbox records
  ///   `token-unavailable`, never counted toward parking; a telemetry pass ends and gives its
  ///   events back).
  func token(refresh: Bool) throws -> String
}
