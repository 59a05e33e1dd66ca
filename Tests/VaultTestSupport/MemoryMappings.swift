import Foundation

/// How the kernel has marked the mapping that holds an address, from /proc/self/smaps.
public struct MappingFlags: Equatable, Sendable {
  /// `dd` in VmFlags: excluded from core dumps (MADV_DONTDUMP).
  public var dontDump: Bool
  /// `lo` in VmFlags and a non-zero `Locked:` size: pinned in RAM (mlock), never swapped.
  public var locked: Bool
}

public enum MemoryMappings {
  /// The flags of the mapping containing `address` in this process, or nil if none does.
  public static func flags(of address: UnsafeRawPointer) -> MappingFlags? {
    guard let text = readProcFile("/proc/self/smaps") else { return nil }
    let target = UInt(bitPattern: address)
    var inside = false
    var lockedKB = 0
    for line in text.split(separator: "\n") {
      let fields = line.split(separator: " ", omittingEmptySubsequences: true)
      if let range = fields.first, range.contains("-"), !range.hasSuffix(":") {
        let bounds = range.split(separator: "-").compactMap { UInt($0, radix: 16) }
        inside = bounds.count == 2 && bounds[0] <= target && target < bounds[1]
        continue
      }
      guard inside else { continue }
      if fields.first == "Locked:", fields.count > 1 { lockedKB = Int(fields[1]) ?? 0 }
      if fields.first == "VmFlags:" {
        let flags = Set(fields.dropFirst())
        return MappingFlags(dontDump: flags.contains("dd"), locked: flags.contains("lo") && lockedKB > 0)
      }
    }
    return nil
  }
}

/// A /proc file read to its end. (Foundation trusts st_size, which is 0 there, and stops after
/// one page.)
public func readProcFile(_ path: String) -> String? {
  let fd = open(path, O_RDONLY | O_CLOEXEC)
  guard fd >= 0 else { return nil }
  defer { close(fd) }
  var bytes: [UInt8] = []
  var chunk = [UInt8](repeating: 0, count: 65536)
  while true {
    let count = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
    if count < 0, errno == EINTR { continue }
    guard count > 0 else { break }
    bytes += chunk[0..<count]
  }
  return String(decoding: bytes, as: UTF8.self)
}
