import Foundation

/// The sanitizer this test run's code is built with, as `tools/sanitize.sh` says in
/// VAULT_SANITIZER (`address` or `thread`); nil in a normal run (`tools/test.sh` never sets it).
///
/// Only for the few tests that cannot pass under a sanitizer by design of the test (a sanitizer
/// needs terabytes of address space for its shadow memory, makes `mlock` a no-op, replaces the
/// crash output): each skips with its reason, and only under the sanitizer that breaks it, e.g.
/// `try XCTSkipIf(Sanitizer.current == .thread, "…why…")`.
public enum Sanitizer: String, Sendable {
  case address
  case thread

  /// The sanitizer of this run, or nil when there is none (an unknown value counts as none, so a
  /// typo never skips a test).
  public static var current: Sanitizer? {
    ProcessInfo.processInfo.environment["VAULT_SANITIZER"].flatMap(Sanitizer.init(rawValue:))
  }
}
