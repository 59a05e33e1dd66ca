// C boundary: the page mappings that hold secrets (mmap, madvise, mlock). Only SecureBytes uses it.
import Glibc

/// Memory for key material: page-aligned anonymous mappings that are left out of core dumps
/// (`MADV_DONTDUMP`) and locked in RAM (`mlock`, so never written to swap) when the process's
/// RLIMIT_MEMLOCK (or CAP_IPC_LOCK) allows, as libsodium's `sodium_malloc` does, without its
/// guard pages and canaries.
///
/// Keys are 32 bytes, so small buffers share pages: a page is cut into slots of one size class
/// (16 to 256 bytes) and 128 keys cost one locked page, not 128. Larger buffers get a mapping of
/// their own. When locking is refused (the limit is used up, or 0) the memory is used unlocked:
/// a key load never fails for want of `mlock`. When even a mapping is refused (an address-space
/// limit), the buffer comes from the ordinary heap, unmarked, for the same reason.
///
/// Thread-safe. Slots are cleansed (`OPENSSL_cleanse`) before they are reused or unmapped.
enum SecureMemory {
  /// One buffer handed out: where it is and how to give it back.
  struct Allocation {
    let base: UnsafeMutableRawPointer
    fileprivate let kind: Kind
  }

  fileprivate enum Kind {
    /// A slot of `slotSize` bytes in a shared page.
    case slot(slotSize: Int)
    /// A mapping of its own, `length` bytes (whole pages).
    case mapping(length: Int)
    /// Heap memory: no mapping could be made.
    case heap(capacity: Int)
  }

  static let pageSize = Int(sysconf(Int32(_SC_PAGESIZE)))
  static let largestSlot = 256
  private static let smallestSlot = 16

  /// Pages of one slot size: which slots are free, and which pages have any.
  private struct Pool {
    /// Page base address → the offsets of its free slots (a stack: the last freed is reused first).
    var free: [UInt: [Int]] = [:]
    /// Pages with at least one free slot, the most recently freed-into last.
    var partial: [UInt] = []
  }

  private static let pools = LockedValue<[Int: Pool]>([:])

  /// Zeroed memory for `count` bytes, aligned to 16 bytes.
  static func allocate(_ count: Int) -> Allocation {
    if count <= largestSlot {
      var slotSize = smallestSlot
      while slotSize < count { slotSize *= 2 }
      if let base = takeSlot(slotSize) { return Allocation(base: base, kind: .slot(slotSize: slotSize)) }
    } else {
      let length = (count + pageSize - 1) / pageSize * pageSize
      if let base = mapPages(length) { return Allocation(base: base, kind: .mapping(length: length)) }
    }
    // No mapping could be made (RLIMIT_AS, say): correctness first, the heap without the marks.
    let capacity = max(count, 1)
    let base = UnsafeMutableRawPointer.allocate(byteCount: capacity, alignment: 16)
    base.initializeMemory(as: UInt8.self, repeating: 0, count: capacity)
    return Allocation(base: base, kind: .heap(capacity: capacity))
  }

  /// Cleanses and gives back memory from `allocate`.
  static func release(_ allocation: Allocation) {
    switch allocation.kind {
    case .slot(let slotSize):
      cleanse(UnsafeMutableRawBufferPointer(start: allocation.base, count: slotSize))
      giveBackSlot(allocation.base, slotSize)
    case .mapping(let length):
      cleanse(UnsafeMutableRawBufferPointer(start: allocation.base, count: length))
      unmapPages(allocation.base, length)
    case .heap(let capacity):
      cleanse(UnsafeMutableRawBufferPointer(start: allocation.base, count: capacity))
      allocation.base.deallocate()
    }
  }

  // MARK: - Pages

  /// A zeroed, page-aligned mapping marked DONTDUMP and, if the limit allows, locked.
  private static func mapPages(_ length: Int) -> UnsafeMutableRawPointer? {
    guard let base = mmap(nil, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0),
      base != MAP_FAILED
    else { return nil }
    // Kernels since 3.4 know MADV_DONTDUMP; an older one leaves the pages dumpable, which
    // ProcessHardening's non-dumpable flag still covers.
    _ = madvise(base, length, MADV_DONTDUMP)
    // EAGAIN/ENOMEM/EPERM: RLIMIT_MEMLOCK is used up or 0 and there is no CAP_IPC_LOCK. The pages
    // then work unlocked (they may reach swap); refusing a key for it would lose more than it saves.
    _ = mlock(base, length)
    return base
  }

  private static func unmapPages(_ base: UnsafeMutableRawPointer, _ length: Int) {
    _ = munlock(base, length)
    _ = munmap(base, length)
  }

  // MARK: - Slots

  private static func takeSlot(_ slotSize: Int) -> UnsafeMutableRawPointer? {
    pools.withLock { pools in
      var pool = pools[slotSize] ?? Pool()
      defer { pools[slotSize] = pool }
      if let page = pool.partial.last, let offset = pool.free[page]?.popLast() {
        if pool.free[page]?.isEmpty == true { pool.partial.removeLast() }
        return UnsafeMutableRawPointer(bitPattern: page)! + offset
      }
      guard let base = mapPages(pageSize) else { return nil }
      let page = UInt(bitPattern: base)
      // Reversed, so slots are handed out from the start of the page.
      pool.free[page] = Array(stride(from: pageSize - slotSize, to: 0, by: -slotSize))
      pool.partial.append(page)
      return base
    }
  }

  private static func giveBackSlot(_ slot: UnsafeMutableRawPointer, _ slotSize: Int) {
    let address = UInt(bitPattern: slot)
    let page = address & ~UInt(pageSize - 1)
    pools.withLock { pools in
      guard var pool = pools[slotSize], var free = pool.free[page] else { return }
      defer { pools[slotSize] = pool }
      free.append(Int(address - page))
      pool.partial.removeAll { $0 == page }
      if free.count == pageSize / slotSize, !pool.partial.isEmpty {
        // Wholly free and another page has room: unmap it (munlock gives back its share of the limit).
        pool.free[page] = nil
        unmapPages(UnsafeMutableRawPointer(bitPattern: page)!, pageSize)
        return
      }
      pool.free[page] = free
      pool.partial.append(page)
    }
  }
}
