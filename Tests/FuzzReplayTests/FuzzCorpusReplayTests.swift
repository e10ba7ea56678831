import Foundation
import QuicFuzzing
import QuicTestSupport
import Testing

/// The fuzz targets' seeds and every input that once broke one, replayed through the ordinary
/// `quic-fuzz` build: a fixed bug stays fixed, and a target that no longer runs its seeds fails
/// here before anyone fuzzes with it.
@Suite("Fuzz corpora replay", .timeLimit(TestEnvironment.minutes(3)))
struct FuzzCorpusReplayTests {
    static let fuzzFolder = TestEnvironment.repositoryRoot.appendingPathComponent("Fuzz")

    @Test(arguments: FuzzTarget.allCases)
    func seedsAndRegressionsReplayCleanly(_ target: FuzzTarget) async throws {
        let corpus = Self.fuzzFolder.appendingPathComponent("corpus/\(target.rawValue)")
        let regressions = Self.fuzzFolder.appendingPathComponent("regressions/\(target.rawValue)")
        let inputs = FuzzSeeds.files(in: [corpus, regressions])
        #expect(!FuzzSeeds.files(in: [corpus]).isEmpty, "no seeds in Fuzz/corpus/\(target.rawValue): `quic-fuzz --seeds Fuzz/corpus` writes them")
        let replay = try ChildProcess(try TestEnvironment.executable("quic-fuzz"), [target.rawValue, corpus.path, regressions.path])
        let status = try await replay.waitForExit(seconds: 120)
        #expect(status == 0, "\(target.rawValue): \(replay.standardError)")
        #expect(replay.standardOutput.contains("\(target.rawValue): \(inputs.count) inputs, no failure"), "\(replay.standardOutput)")
    }

    /// The seed writer runs a real handshake; if it stops producing a target's seeds (a ticket,
    /// say), the corpus could not be remade.
    @Test func theSeedWriterMakesSeedsForEveryTargetThatReplay() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("fuzz-seeds-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let writer = try ChildProcess(try TestEnvironment.executable("quic-fuzz"), ["--seeds", directory.path])
        #expect(try await writer.waitForExit(seconds: 60) == 0, "\(writer.standardError)")
        for target in FuzzTarget.allCases {
            let folder = directory.appendingPathComponent(target.rawValue)
            #expect(!FuzzSeeds.files(in: [folder]).isEmpty, "no seeds written for \(target.rawValue)")
            let replay = try ChildProcess(try TestEnvironment.executable("quic-fuzz"), [target.rawValue, folder.path])
            #expect(try await replay.waitForExit(seconds: 60) == 0, "\(target.rawValue): \(replay.standardError)")
        }
    }
}
