import Foundation
import VaultKeys

@testable import Vault

/// An in-memory container that records the order of the protocol's calls.
final class RecordingContainer: SealedContainer, @unchecked Sendable {
  let name: String
  let containerID: String
  var records: [(context: [UInt8], envelope: [UInt8])] = []
  var calls: [String] = []
  var minimumSealVersion: UInt32 = 0
  /// What `checkpointNow` answers (false: a reader holds the log).
  var checkpointSucceeds = true

  init(name: String, id: String = UUID().uuidString) {
    self.name = name.hasPrefix("/") ? name : "/memory/" + name
    containerID = id
  }

  func raiseMinimumSealVersion(to version: UInt32) throws {
    calls.append("raise \(version)")
    minimumSealVersion = version
  }

  func reseal(with vault: Vault, to version: UInt32) throws -> ResealResult {
    calls.append("reseal \(version)")
    var result = ResealResult(resealed: 0)
    for index in records.indices where try Envelope.header(of: records[index].envelope).version < version {
      do {
        let plaintext = try vault.open(records[index].envelope, context: records[index].context)
        records[index].envelope = try vault.sealRecord(plaintext, context: records[index].context)
        result.resealed += 1
      } catch is EnvelopeError {
        result.unopenable[try Envelope.header(of: records[index].envelope).version, default: 0] += 1
      }
    }
    return result
  }

  func recordCounts() throws -> RecordCounts {
    calls.append("count")
    var counts: [UInt32: Int] = [:]
    for record in records { counts[try Envelope.header(of: record.envelope).version, default: 0] += 1 }
    return RecordCounts(byVersion: counts)
  }

  func checkpointNow() throws -> Bool {
    calls.append("checkpoint")
    return checkpointSucceeds
  }

  func unopenableRecords(with vault: Vault) throws -> Int {
    try records.filter { !(try opens($0, vault)) }.count
  }

  func removeUnopenableRecords(with vault: Vault, keep: Bool) throws -> Int {
    let bad = try records.filter { !(try opens($0, vault)) }.count
    if !keep { records = try records.filter { try opens($0, vault) } }
    return bad
  }

  private func opens(_ record: (context: [UInt8], envelope: [UInt8]), _ vault: Vault) throws -> Bool {
    do {
      _ = try vault.open(record.envelope, context: record.context)
      return true
    } catch is EnvelopeError {
      return false
    }
  }

  func compact() throws { calls.append("compact") }
}

/// Hands out in-memory containers by path; a path can be told to probe as something else.
final class InMemoryContainers: ContainerProvider, @unchecked Sendable {
  var containers: [String: any SealedContainer] = [:]
  var probes: [String: ContainerProbe] = [:]
  var opened: [String] = []
  let keyring: String

  init(_ vault: Vault, _ containers: [any SealedContainer] = []) throws {
    keyring = vault.keyringID.hex
    for container in containers {
      self.containers[container.name] = container
      try vault.registerContainer(container.name, id: container.containerID)
    }
  }

  func probe(path: String) throws -> ContainerProbe {
    if let probe = probes[path] { return probe }
    guard let container = containers[path] else { return .missing }
    return .container(keyringID: keyring, containerID: container.containerID)
  }

  func open(path: String, vault: Vault) throws -> any SealedContainer {
    opened.append(path)
    guard let container = containers[path] else { throw RotationError.containerMissing(path: path) }
    return container
  }
}

extension Vault {
  /// Rotates with `containers` registered and handed out from memory.
  @discardableResult
  func rotate(_ containers: [any SealedContainer] = [], options: RotationOptions = RotationOptions()) throws
    -> RotationReport
  {
    try rotate(containers: try InMemoryContainers(self, containers), options: options)
  }
}

extension Vault {
  /// Seals as a container does (package API): nothing is pinned, so rotation may retire the
  /// version once no container counts the record. The fakes above hold their records this way.
  func sealRecord(_ plaintext: [UInt8], context: [UInt8]) throws -> [UInt8] {
    try seal(plaintext, context: EnvelopeContext.app(context))
  }
}
