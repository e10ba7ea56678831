/// Polls `condition` until it holds or `seconds` have passed; returns whether it held.
///
/// For outcomes that must come but whose moment depends on the machine's load (a draining
/// period ending, a process writing its log): the bound is generous, and the caller asserts the
/// result, so a slow machine only waits longer while a real failure still fails. The bound is
/// stretched under a sanitizer (`TestEnvironment.timeScale`).
package func eventually(within seconds: Double = 20, _ condition: () async throws -> Bool) async rethrows -> Bool {
    let deadline = ContinuousClock.now + .milliseconds(Int(TestEnvironment.scaled(seconds) * 1000))
    while ContinuousClock.now < deadline {
        if try await condition() { return true }
        try? await Task.sleep(for: .milliseconds(20))
    }
    return try await condition()
}
