#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import AsyncHTTPClient
import HTTPTypes
import NIOConcurrencyHelpers
import NIOCore
import QuicTransport

/// An HTTP client that uses HTTP/3 where it is known or assumed to work and falls back to
/// HTTP/2 or HTTP/1.1 over TCP otherwise, in the way URLSession does (RFC 7838, RFC 9460).
///
/// HTTP/3 is raced before any request is committed to it: the QUIC handshake must complete
/// before `happyEyeballsDelay` runs out or TCP starts too, and a request is only ever sent
/// once. An alternative whose handshake fails is marked broken for `brokenAlternativeDuration`
/// and skipped meanwhile (RFC 7838 §2.4).
public final class HTTPSession: Sendable {
    /// The configuration the session was created with.
    public let configuration: Configuration
    private let http3Clients = NIOLockedValueBox([String: HTTP3Client]())
    /// The HTTP/3 connections this session's clients made that are still in memory.
    package let liveHTTP3Connections = QUICLiveConnections()
    private let tcpTransports = NIOLockedValueBox([String: HTTPTCPTransport]())
    private let brokenUntil = NIOLockedValueBox([String: ContinuousClock.Instant]())
    /// The one thread all of this session's HTTP/3 connections run on, whatever their server.
    private let http3Loop = QUICClientLoops.next()
    private let http3LoopExecutor: EventLoopTaskExecutor

    /// The thread this session's HTTP/3 connections run on, as a task executor (SE-0417), as
    /// `HTTP3Client.taskExecutor` is for one client.
    ///
    /// A task that runs requests with this as its preference (`group.addTask(executorPreference:)`)
    /// is woken by its response on the thread that read it, with no hop to the global pool and
    /// back. Such a task must not block, since the connections wait while it runs. h3get runs
    /// each URL this way, much as curl runs all its transfers on one thread.
    public var taskExecutor: any TaskExecutor { http3LoopExecutor }

    /// Creates a session; it connects only when a request needs it.
    public init(configuration: Configuration = Configuration()) {
        self.configuration = configuration
        self.http3LoopExecutor = EventLoopTaskExecutor(eventLoop: http3Loop)
    }

    /// Where an HTTP/3 attempt goes: the server to connect to, and why.
    struct HTTP3Target: Sendable {
        let connectHost: String
        let connectPort: UInt16
        let discovery: HTTP3Discovery
        var key: String { "\(connectHost):\(connectPort)" }
    }

    /// Sends `request` over the version the policy picks and returns once the head is in.
    public func execute(_ request: HTTPRequest, body: [UInt8]? = nil, priority: HTTPPriority? = nil) async throws -> HTTPSessionResponse {
        guard request.scheme == "https", let authority = request.authority, let (host, port) = HTTP3Client.split(authority: authority) else {
            throw HTTP3ClientError.invalidRequest("the request needs an https:// scheme and a host")
        }
        var request = request
        if let priority, request.headerFields[.priority] == nil { request.headerFields[.priority] = priority.fieldValue }
        let origin = AltServiceCache.Origin(scheme: "https", host: host, port: port)
        var notes: [String] = []
        let direct = HTTP3Target(
            connectHost: configuration.connectTo?.host ?? host, connectPort: configuration.connectTo?.port ?? port,
            discovery: configuration.policy == .http3Only ? .required : .assumed
        )

        // The Alt-Svc cache is consulted whatever the policy, as curl does with --alt-svc.
        let cached = cachedAlternative(for: origin, notes: &notes)
        let target: HTTP3Target?
        switch configuration.policy {
        case .http3Only:
            let response = try await viaHTTP3(request, body: body, target: cached ?? direct, host: host, port: port, notes: notes)
            return learn(from: response, origin: origin)
        case .assumesHTTP3Capable:
            target = cached ?? direct
        case .discovery:
            if let cached {
                target = cached
            } else {
                target = await lookUpHTTPSRecord(for: origin, notes: &notes)
            }
        }
        guard let target else {
            let response = try await viaTCP(request, body: body, host: host, port: port, discovery: nil, reason: nil, notes: notes)
            return learn(from: response, origin: origin)
        }
        let response = try await race(request, body: body, target: target, host: host, port: port, notes: notes)
        return learn(from: response, origin: origin)
    }

    /// Waits for the key updates `Configuration.initiatesKeyUpdate` started on HTTP/3
    /// connections to complete, and returns how many there were (`HTTP3Client.keyUpdatesCompleted()`):
    /// 0 when every request went over TCP. Throws the first that failed.
    public func keyUpdatesCompleted() async throws -> Int {
        let clients = http3Clients.withLockedValue { Array($0.values) }
        var completed = 0
        for client in clients { completed += try await client.keyUpdatesCompleted() }
        return completed
    }

    /// Closes every connection.
    public func shutdown() async {
        let clients = http3Clients.withLockedValue { clients in defer { clients.removeAll() }; return Array(clients.values) }
        for client in clients { await client.close() }
        let transports = tcpTransports.withLockedValue { all in defer { all.removeAll() }; return Array(all.values) }
        for transport in transports { await transport.shutdown() }
    }

    // MARK: Discovery

    /// The first live HTTP/3 alternative the Alt-Svc cache has for `origin` (RFC 7838 §2.2).
    private func cachedAlternative(for origin: AltServiceCache.Origin, notes: inout [String]) -> HTTP3Target? {
        guard let cache = configuration.altServiceCache else { return nil }
        for warning in cache.warnings where !notes.contains(warning) { notes.append(warning) }
        for alternative in cache.alternatives(for: origin) {
            // An alternative on the origin's own host keeps any --resolve/--connect-to address.
            let host = alternative.host ?? configuration.connectTo?.host ?? origin.host
            let target = HTTP3Target(connectHost: host, connectPort: alternative.port, discovery: .altSvcCache)
            if isBroken(target) {
                notes.append("Alt-Svc alternative \(alternative) is marked broken; skipped")
                continue
            }
            notes.append("Alt-Svc cache: \(origin) has \(alternative)")
            return target
        }
        return nil
    }

    /// An HTTP/3 alternative from a DNS HTTPS record (RFC 9460 §7.1); nil for TCP.
    private func lookUpHTTPSRecord(for origin: AltServiceCache.Origin, notes: inout [String]) async -> HTTP3Target? {
        guard configuration.looksUpHTTPSRecords, !Self.isLiteralOrLocal(origin.host) || configuration.httpsRecordResolver != nil else {
            return nil
        }
        do {
            let resolver = try configuration.httpsRecordResolver ?? HTTPSRecordResolver.system()
            let records = try await resolver.lookup(host: origin.host, port: origin.port)
            guard let record = records.first(where: { $0.alpn.contains(HTTP3.alpn) }) else {
                notes.append("HTTPS record for \(origin.host): " + (records.isEmpty ? "none" : "no h3 in alpn"))
                return nil
            }
            let named = record.target == "." || record.target.isEmpty ? origin.host : record.target
            let host = configuration.connectTo?.host ?? record.ipv4Hints.first ?? record.ipv6Hints.first ?? named
            let target = HTTP3Target(connectHost: host, connectPort: record.port ?? origin.port, discovery: .httpsRecord)
            if isBroken(target) {
                notes.append("HTTPS record alternative \(target.key) is marked broken; skipped")
                return nil
            }
            notes.append("HTTPS record for \(origin.host): alpn \(record.alpn.joined(separator: ",")), connecting to \(target.key)")
            return target
        } catch {
            notes.append("HTTPS record look-up failed: \(error)")
            return nil
        }
    }

    private static func isLiteralOrLocal(_ host: String) -> Bool {
        host == "localhost" || host.hasSuffix(".localhost") || host.contains(":")
            || host.split(separator: ".").allSatisfy { UInt8($0) != nil }
    }

    private func isBroken(_ target: HTTP3Target) -> Bool {
        brokenUntil.withLockedValue { broken in
            guard let until = broken[target.key] else { return false }
            if until > .now { return true }
            broken[target.key] = nil
            return false
        }
    }

    private func markBroken(_ target: HTTP3Target) {
        let until = ContinuousClock.now + configuration.brokenAlternativeDuration
        brokenUntil.withLockedValue { $0[target.key] = until }
    }

    /// Records the response's `Alt-Svc` (RFC 7838 §3) and saves the cache file.
    ///
    /// A server that advertises does so on every response, so a client fetching many URLs
    /// from it gets the same value again and again: the same value over the same version
    /// within a second of the last is taken as learnt (the entries' expiry then lags by at
    /// most that second), rather than parsed, cached and saved to the file once more, which
    /// cost more than the rest of a small response, and a file write with `--alt-svc`.
    private func learn(from response: HTTPSessionResponse, origin: AltServiceCache.Origin) -> HTTPSessionResponse {
        guard let cache = configuration.altServiceCache, let value = response.altSvcValue else { return response }
        let source = switch response.version {
        case .http1_1: "http/1.1"
        case .http2: "h2"
        case .http3: "h3"
        }
        if cache.isRepeat(of: value, from: origin, sourceALPN: source) { return response }
        var learnt = response
        do {
            let parsed = try AltServiceFieldValue(parsing: value)
            cache.update(origin: origin, sourceALPN: source, with: parsed)
            switch parsed {
            case .clear: learnt.notes.append("Alt-Svc: clear; forgot the alternatives of \(origin)")
            case .alternatives(let services): learnt.notes.append("Alt-Svc learnt: \(services.map(\.description).joined(separator: ", "))")
            }
            do { try cache.save() } catch { learnt.notes.append("cannot save the Alt-Svc cache to \(cache.path ?? "?"): \(error)") }
        } catch {
            learnt.notes.append("Alt-Svc ignored: \(error)")
        }
        return learnt
    }

    /// The `Alt-Svc` field's value, its lines joined by commas as `HTTPFields` joins them. A
    /// plain scan: `HTTPFields`' subscript builds an index of every name first, on each
    /// response, which mostly has no such field.
    static func altSvcValue(of fields: HTTPFields) -> String? {
        var value: String?
        for field in fields where field.name == .altSvc {
            value = value.map { $0 + ", " + field.value } ?? field.value
        }
        return value
    }

    // MARK: Transports

    private func http3Client(for target: HTTP3Target) -> HTTP3Client {
        http3Clients.withLockedValue { clients in
            if let existing = clients[target.key] { return existing }
            var configuration = self.configuration.http3
            configuration.connectTo = (target.connectHost, target.connectPort)
            let client = HTTP3Client(configuration: configuration, liveConnections: self.liveHTTP3Connections, eventLoop: http3Loop)
            clients[target.key] = client
            return client
        }
    }

    private func viaHTTP3(
        _ request: HTTPRequest, body: [UInt8]?, target: HTTP3Target, host: String, port: UInt16,
        fallbackReason: String? = nil, notes: [String]
    ) async throws -> HTTPSessionResponse {
        let response = try await http3Client(for: target).execute(request, body: body)
        return HTTPSessionResponse(
            headSource: .http3(response.source), body: .init(source: .http3(response.body)), version: .http3, discovery: target.discovery,
            fallbackReason: fallbackReason, notes: notes, http3: response.connection, reprioritize: response.updatePriority,
            collectStatistics: response.statistics
        )
    }

    private func viaTCP(
        _ request: HTTPRequest, body: [UInt8]?, host: String, port: UInt16, discovery: HTTP3Discovery?, reason: String?,
        notes: [String]
    ) async throws -> HTTPSessionResponse {
        let transport = try tcpTransports.withLockedValue { transports in
            if let existing = transports[host] { return existing }
            let created = try HTTPTCPTransport(
                verification: configuration.certificateVerification, host: host, connectTo: configuration.connectTo
            )
            transports[host] = created
            return created
        }
        let response = try await transport.execute(request, body: body, host: host, port: port)
        return HTTPSessionResponse(
            headSource: .built(response.head), body: .init(source: .tcp(response.body)), version: response.version, discovery: discovery,
            fallbackReason: reason, notes: notes, http3: nil, reprioritize: nil, collectStatistics: nil
        )
    }

    /// What ended one leg of the race.
    private enum Outcome: Sendable {
        case http3Ready
        case http3Failed(HTTP3ClientError)
        case tcpAnswered(HTTPSessionResponse)
        case tcpFailed(HTTPSessionError)
    }

    /// Happy Eyeballs between the HTTP/3 handshake and a TCP request (RFC 8305 §5 in spirit):
    /// TCP starts after `happyEyeballsDelay`, or at once when HTTP/3 fails. The request is
    /// sent over HTTP/3 only if its handshake finished before TCP started.
    private func race(
        _ request: HTTPRequest, body: [UInt8]?, target: HTTP3Target, host: String, port: UInt16, notes: [String]
    ) async throws -> HTTPSessionResponse {
        let client = http3Client(for: target)
        let (outcomes, sink) = AsyncStream<Outcome>.makeStream()
        let tcpStarted = NIOLockedValueBox(false)
        let startTCP: @Sendable (String) -> Task<Void, Never> = { reason in
            Task {
                do {
                    let response = try await self.viaTCP(
                        request, body: body, host: host, port: port, discovery: target.discovery, reason: reason, notes: notes
                    )
                    sink.yield(.tcpAnswered(response))
                } catch {
                    sink.yield(.tcpFailed(error as? HTTPSessionError ?? .tcp("\(error)")))
                }
            }
        }
        let delay = configuration.happyEyeballsDelay
        let timer = Task {
            try? await Task.sleep(for: delay)
            guard !Task.isCancelled, tcpStarted.withLockedValue({ started in defer { started = true }; return !started }) else { return }
            _ = startTCP("the HTTP/3 handshake with \(target.key) did not finish within \(delay)")
        }
        Task {
            do {
                _ = try await client.connect(host: host, port: port)
                sink.yield(.http3Ready)
            } catch {
                sink.yield(.http3Failed(error as? HTTP3ClientError ?? .connectionFailed("\(error)")))
            }
        }
        defer { timer.cancel() }
        var http3Failure: HTTP3ClientError?
        var http3IsReady = false
        var tcpFailure: HTTPSessionError?
        let claimTCP = { tcpStarted.withLockedValue { started in defer { started = true }; return !started } }
        for await outcome in outcomes {
            switch outcome {
            case .http3Ready:
                http3IsReady = true
                // Once a TCP request is out, it is the one that answers, unless it failed.
                if tcpFailure != nil || claimTCP() {
                    return try await viaHTTP3(request, body: body, target: target, host: host, port: port, notes: notes)
                }
            case .http3Failed(let reason):
                markBroken(target)
                http3Failure = reason
                if let tcpFailure { throw HTTPSessionError.bothFailed(http3: reason, tcp: tcpFailure) }
                if claimTCP() { _ = startTCP("HTTP/3 to \(target.key) failed: \(reason)") }
            case .tcpAnswered(let response):
                return response
            case .tcpFailed(let error):
                if http3IsReady {
                    return try await viaHTTP3(request, body: body, target: target, host: host, port: port, notes: notes)
                }
                if let http3Failure { throw HTTPSessionError.bothFailed(http3: http3Failure, tcp: error) }
                tcpFailure = error
            }
        }
        throw HTTPSessionError.tcp("the race ended without an answer")
    }
}
