import Foundation
import VaultCrypto

extension Scanner {
  /// A vault keyfile (format 1 or 2 with a valid checksum) or a bare 32-byte high-entropy file.
  func keyMaterial(fd: Int32, size: Int, path: String) -> Finding? {
    if size == 32 {
      let bytes = RegionMap.read(fd, at: 0, count: 32)
      if Set(bytes).count >= 24 {
        return Finding(
          file: path, offset: 0, region: "file", detector: "key-material", encoding: "raw-32-bytes",
          excerpt: "32 random-looking bytes (possible raw key, redacted)")
      }
    }
    guard size >= 48, size <= 1 << 20 else { return nil }
    let bytes = RegionMap.read(fd, at: 0, count: size)
    // Keyfile formats 1 and 2 both end in the SHA-256 of everything before it.
    guard bytes.count == size, Array(bytes[0..<3]) == Array("VKF".utf8), bytes[3] == 1 || bytes[3] == 2 else {
      return nil
    }
    let body = Array(bytes[0..<(size - 32)])
    guard let digest = try? SHA256.hash(body), digest == Array(bytes[(size - 32)...]) else { return nil }
    return Finding(
      file: path, offset: 0, region: "file", detector: "key-material", encoding: "vault-keyfile",
      excerpt: "a vault keyfile (redacted); keys belong outside the data directory")
  }
}
