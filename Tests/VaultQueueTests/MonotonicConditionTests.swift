import Foundation
import XCTest

@testable import VaultQueue

/// The group commit's condition: a timed wait ends at its monotonic deadline, and a signal wakes
/// the waiter before it.
final class MonotonicConditionTests: XCTestCase {
  func testATimedWaitEndsAtItsDeadlineAndASignalWakesItBefore() {
    let condition = MonotonicCondition()
    condition.lock()
    let started = DispatchTime.now()
    let deadline = MonotonicCondition.deadline(after: 0.05)
    while condition.wait(until: deadline) {}  // spurious wake-ups go round again
    XCTAssertGreaterThanOrEqual(DispatchTime.now().uptimeNanoseconds - started.uptimeNanoseconds, 50_000_000)
    condition.unlock()

    let woken = MonotonicCondition()
    final class Flag: @unchecked Sendable { var set = false }
    let flag = Flag()
    woken.lock()
    Thread {
      woken.lock()
      flag.set = true
      woken.signal()
      woken.unlock()
    }.start()
    let far = MonotonicCondition.deadline(after: 60)
    while !flag.set {
      XCTAssertTrue(woken.wait(until: far), "woken by the signal, not by the deadline")
    }
    woken.unlock()
  }
}
