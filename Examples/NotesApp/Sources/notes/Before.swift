import Foundation

#if canImport(FoundationNetworking)
  import FoundationNetworking
#endif

/// How the app sent a note before it used the outbox (kept, unused, so the guide's "before" compiles).
// guide:before
func sendDirectly(_ text: String, to server: URL) async throws {
  var request = URLRequest(url: server)
  request.httpMethod = "POST"
  request.setValue("text/plain; charset=utf-8", forHTTPHeaderField: "Content-Type")
  request.httpBody = Data(text.utf8)
  let (_, response) = try await URLSession.shared.data(for: request)
  // Offline, a 503, a crash before this line: the note never arrives, and nobody knows.
  guard (response as? HTTPURLResponse)?.statusCode == 200 else { throw URLError(.badServerResponse) }
}
// guide:end
