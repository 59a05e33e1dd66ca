import Foundation

/// SIGTERM, SIGINT and SIGHUP as a request to stop a deliverer cleanly (systemd stops a service
/// with SIGTERM; a terminal sends SIGINT and SIGHUP).
///
/// After `handle(_:)`, these signals no longer end the process. The first one calls
/// `HTTPCancellation.cancelAll()` (every HTTP exchange returns within a fraction of a second, and
/// delivery passes give back what they claimed and did not settle), then `onStop` with the signal
/// number, on a dispatch queue: never in a signal handler, so `onStop` may do anything (stop a
/// loop, wait for the pass, exit). Later signals are ignored; the stop is already under way.
public enum StopSignals {
  /// The signals taken over: SIGTERM, SIGINT and SIGHUP, in that order.
  public static let numbers: [Int32] = [SIGTERM, SIGINT, SIGHUP]
  private static let state = StopState()

  /// Takes over SIGTERM, SIGINT and SIGHUP for the rest of the process; call it once, before the
  /// work that should be given back on a stop starts.
  ///
  /// - Parameter onStop: called once, with the first signal's number, on a dispatch queue after
  ///   `HTTPCancellation.cancelAll()`.
  public static func handle(_ onStop: @escaping @Sendable (Int32) -> Void) {
    let queue = DispatchQueue(label: "vault.stop-signals")
    let sources = numbers.map { number -> any DispatchSourceSignal in
      // Ignored until libdispatch installs its own handler (when the source is registered), so a
      // signal in between cannot kill the process with the default action.
      signal(number, SIG_IGN)
      let source = DispatchSource.makeSignalSource(signal: number, queue: queue)
      source.setEventHandler {
        guard state.first(number) else { return }
        HTTPCancellation.cancelAll()
        onStop(number)
      }
      source.resume()
      return source
    }
    state.keep(sources)
  }

  /// The signal that asked this process to stop, if one did.
  public static var received: Int32? { state.signal }
}

private final class StopState: @unchecked Sendable {
  private let lock = NSLock()
  private var sources: [any DispatchSourceSignal] = []
  private var number: Int32?

  /// Records `signal` and returns true if it is the first; false for every later one.
  func first(_ signal: Int32) -> Bool {
    lock.withLock {
      guard number == nil else { return false }
      number = signal
      return true
    }
  }

  func keep(_ more: [any DispatchSourceSignal]) { lock.withLock { sources += more } }
  var signal: Int32? { lock.withLock { number } }
}
