/// An example application a test started for real and must stop, whether the test's checks
/// throw or not.
public protocol RunningApplication: Sendable {
    /// Stops the application and waits until it has.
    func stop() async
}

extension RunningApplication {
    /// Runs `body`, then stops the application, also when `body` throws: Swift has no `defer`
    /// that can await. The result is what `body` returned, for checks made after the stop.
    public func stopping<Result: Sendable>(after body: () async throws -> Result) async throws -> Result {
        let result: Result
        do {
            result = try await body()
        } catch {
            await stop()
            throw error
        }
        await stop()
        return result
    }
}
