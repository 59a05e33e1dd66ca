import Glibc

/// The name of an entry `readdir` returned, as bytes (no NUL).
///
/// A `dirent` is only as long as its name needs: the last one in the buffer `readdir` fills may end
/// well before `d_name`'s 256 bytes would, so copying `entry.pointee.d_name` (a tuple) reads past
/// it (AddressSanitizer: heap-buffer-overflow in the backup's work-directory sweep). This reads the
/// name in place, up to its NUL.
package func directoryEntryName(_ entry: UnsafeMutablePointer<dirent>) -> [UInt8] {
  let name = UnsafeRawPointer(entry) + MemoryLayout<dirent>.offset(of: \dirent.d_name)!
  let bytes = name.assumingMemoryBound(to: CChar.self)
  return Array(UnsafeRawBufferPointer(start: name, count: strlen(bytes)))
}
