import Foundation

/// Tells a delivery loop when the network changed in a way that may let delivery through. The
/// rtnetlink monitor is `RouteChangeSource` (module Telemetry, which owns the netlink C target);
/// `ManualNetworkChanges` is the in-memory twin.
public protocol NetworkChangeSource: Sendable {
  /// Starts watching: `onChange` is called (on any thread) after each such change until the
  /// returned watch is stopped.
  ///
  /// - Parameter onChange: what to call after each change; it must return quickly.
  /// - Returns: the running watch; stop it to stop the calls.
  /// - Throws: when watching cannot start (the loop does not start either).
  func watch(_ onChange: @escaping @Sendable () -> Void) throws -> any NetworkWatch
}

/// A running watch of a `NetworkChangeSource`.
public protocol NetworkWatch: AnyObject, Sendable {
  /// Stops watching; once it returns, `onChange` is not called again.
  func stop()
}

/// Network changes an app (or a test) announces itself with `announceChange()`.
public final class ManualNetworkChanges: NetworkChangeSource, @unchecked Sendable {
  private let lock = NSLock()
  private var watchers: [ObjectIdentifier: @Sendable () -> Void] = [:]

  /// Makes a source with no watches; changes happen only when `announceChange()` is called.
  public init() {}

  /// Starts a watch: `onChange` is called on every later `announceChange()` until it is stopped.
  ///
  /// - Parameter onChange: what to call on each announced change.
  /// - Returns: the running watch.
  /// - Throws: never; the signature is the protocol's.
  public func watch(_ onChange: @escaping @Sendable () -> Void) throws -> any NetworkWatch {
    let watch = Watch(source: self)
    lock.withLock { watchers[ObjectIdentifier(watch)] = onChange }
    return watch
  }

  /// Calls every running watch's `onChange`, on the calling thread.
  public func announceChange() {
    let callbacks = lock.withLock { Array(watchers.values) }
    for callback in callbacks { callback() }
  }

  /// How many watches are running (a loop that stopped no longer watches).
  public var watchCount: Int { lock.withLock { watchers.count } }

  private func remove(_ watch: Watch) { _ = lock.withLock { watchers.removeValue(forKey: ObjectIdentifier(watch)) } }

  fileprivate final class Watch: NetworkWatch, @unchecked Sendable {
    weak var source: ManualNetworkChanges?
    init(source: ManualNetworkChanges) { self.source = source }
    func stop() { source?.remove(self) }
  }
}
