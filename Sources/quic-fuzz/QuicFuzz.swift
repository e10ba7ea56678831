import Foundation
import QuicFuzzing

#if QUIC_FUZZ
// Built by scripts/fuzz with -sanitize=fuzzer,address -parse-as-library -DQUIC_FUZZ: libFuzzer's
// main runs, and QUIC_FUZZ_TARGET names the target this process fuzzes.
private let target: FuzzTarget = {
    guard let name = ProcessInfo.processInfo.environment["QUIC_FUZZ_TARGET"], let target = FuzzTarget(rawValue: name) else {
        FileHandle.standardError.write(Data("quic-fuzz: set QUIC_FUZZ_TARGET to one of \(FuzzTarget.allCases.map(\.rawValue).joined(separator: ", "))\n".utf8))
        exit(64)
    }
    return target
}()

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    target.run(size == 0 ? [] : Array(UnsafeBufferPointer(start: data, count: size)))
    return 0
}

/// libFuzzer's driver, which its own `main` would call.
@_silgen_name("LLVMFuzzerRunDriver")
private func runFuzzerDriver(
    _ argc: UnsafeMutablePointer<CInt>,
    _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>>,
    _ callback: @convention(c) (UnsafePointer<UInt8>?, Int) -> CInt
) -> CInt

/// SwiftPM links an executable's `main` to `<product>_main`; here that is libFuzzer's driver.
@_cdecl("quic_fuzz_main")
public func fuzzMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> CInt {
    var count = argc
    var arguments = argv
    return runFuzzerDriver(&count, &arguments, fuzzOneInput)
}
#else
/// The ordinary build replays inputs and writes the seed corpora:
///
///     quic-fuzz TARGET FILE_OR_DIRECTORY...   runs each file through TARGET
///     quic-fuzz --seeds DIRECTORY             writes DIRECTORY/TARGET/* for every target
@main
struct QuicFuzz {
    static func main() {
        let arguments = Array(CommandLine.arguments.dropFirst())
        if arguments.count == 2, arguments[0] == "--seeds" {
            do {
                let written = try FuzzSeeds.write(into: URL(fileURLWithPath: arguments[1]))
                print("quic-fuzz: wrote \(written) seeds under \(arguments[1])")
            } catch {
                fail("\(error)", status: 1)
            }
        } else if arguments.count >= 2, let target = FuzzTarget(rawValue: arguments[0]) {
            var count = 0
            for file in FuzzSeeds.files(in: arguments.dropFirst().map { URL(fileURLWithPath: $0) }) {
                guard let data = FileManager.default.contents(atPath: file.path) else { fail("cannot read \(file.path)", status: 1) }
                target.run(Array(data))
                count += 1
            }
            print("quic-fuzz: \(target.rawValue): \(count) inputs, no failure")
        } else {
            let targets = FuzzTarget.allCases.map(\.rawValue).joined(separator: ", ")
            fail("usage: quic-fuzz TARGET FILE_OR_DIRECTORY... | quic-fuzz --seeds DIRECTORY\ntargets: \(targets)", status: 64)
        }
    }

    static func fail(_ message: String, status: Int32) -> Never {
        FileHandle.standardError.write(Data("quic-fuzz: \(message)\n".utf8))
        exit(status)
    }
}
#endif
