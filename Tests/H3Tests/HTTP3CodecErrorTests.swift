@testable import H3
import QuicTransport
import Testing

/// nghttp3's protocol checks surface as the RFC 9114 §8.1 codes the connection closes with.
@Suite("HTTP3Codec error mapping")
struct HTTP3CodecErrorTests {
    /// Feeds `bytes` as the peer's stream `streamID` and returns the application error code thrown.
    static func errorCode(role: HTTP3Codec.Role = .client, streamID: Int64, bytes: [UInt8], fin: Bool = false) throws -> UInt64? {
        let codec = try HTTP3Codec(role: role)
        do {
            _ = try bytes.withUnsafeBytes { try codec.receive(streamID: streamID, bytes: $0, fin: fin) }
            return nil
        } catch let error as QUICApplicationCodecError {
            return error.code
        }
    }

    @Test func aControlStreamMustStartWithSettings() throws {
        // Server control stream (ID 3): type 0x00, then a DATA frame instead of SETTINGS.
        let code = try Self.errorCode(streamID: 3, bytes: [0x00, 0x00, 0x01, 0x61])
        #expect(code == HTTP3ErrorCode.missingSettings.rawValue)
    }

    @Test func aSecondSettingsFrameIsUnexpected() throws {
        let code = try Self.errorCode(streamID: 3, bytes: [0x00, 0x04, 0x00, 0x04, 0x00])
        #expect(code == HTTP3ErrorCode.frameUnexpected.rawValue)
    }

    @Test func closingTheControlStreamIsAnError() throws {
        let code = try Self.errorCode(streamID: 3, bytes: [0x00, 0x04, 0x00], fin: true)
        #expect(code == HTTP3ErrorCode.closedCriticalStream.rawValue)
    }

    @Test func dataBeforeHeadersOnARequestIsUnexpected() throws {
        // The server reads a request stream (client bidirectional ID 0) that starts with DATA.
        let code = try Self.errorCode(role: .server, streamID: 0, bytes: [0x00, 0x02, 0x68, 0x69])
        #expect(code == HTTP3ErrorCode.frameUnexpected.rawValue)
    }

    @Test func wellFormedSettingsAreAccepted() throws {
        #expect(try Self.errorCode(streamID: 3, bytes: [0x00, 0x04, 0x02, 0x01, 0x00]) == nil)
    }
}

@Suite("HTTP3 qlog events")
struct HTTP3QLogTests {
    @Test func frameShapesMatchWhatQvisReads() throws {
        let headers = HTTP3QLog.headers(streamID: 4, length: 30, fields: [(":path", "/a\"b"), ("x", "tab\there")])
        #expect(headers == #"{"stream_id":4,"length":30,"frame":{"frame_type":"headers","headers":[{"name":":path","value":"/a\"b"},{"name":"x","value":"tab\there"}]}}"#)
        let data = HTTP3QLog.frame(streamID: 0, HTTP3FrameScanner.Frame(type: 0x00, length: 1200, payload: []))
        #expect(data == #"{"stream_id":0,"length":1200,"frame":{"frame_type":"data","length":1200}}"#)
        let settings = HTTP3QLog.frame(streamID: 2, HTTP3FrameScanner.Frame(type: 0x04, length: 4, payload: [0x01, 0x10, 0x07, 0x05]))
        #expect(settings.contains(#"{"name":"settings_qpack_max_table_capacity","value":16}"#))
        #expect(settings.contains(#"{"name":"settings_qpack_blocked_streams","value":5}"#))
        let goaway = HTTP3QLog.frame(streamID: 3, HTTP3FrameScanner.Frame(type: 0x07, length: 1, payload: [0x08]))
        #expect(goaway.contains(#""frame_type":"goaway","id":8"#))
        // PRIORITY_UPDATE (0xF0700): element ID 4, field value "u=1".
        let update = HTTP3QLog.frame(streamID: 2, HTTP3FrameScanner.Frame(type: 0xF0700, length: 4, payload: [0x04] + Array("u=1".utf8)))
        #expect(update.contains(#""element_id":4,"priority_field_value":"u=1""#))
        #expect(HTTP3QLog.streamTypeSet(streamID: 6, owner: "local", type: 0x02) == #"{"stream_id":6,"owner":"local","stream_type":"qpack_encode"}"#)
    }

    @Test func theScannerFindsFramesAcrossArbitrarySplits() throws {
        // A control stream: type 0x00, SETTINGS (len 2), GOAWAY (len 1), then a 70-byte DATA-like
        // frame with a two-byte length, fed one byte at a time.
        var stream: [UInt8] = [0x00, 0x04, 0x02, 0x01, 0x00, 0x07, 0x01, 0x04, 0x21, 0x40, 0x46]
        stream += [UInt8](repeating: 0xaa, count: 70)
        var scanner = HTTP3FrameScanner(unidirectional: true)
        var outputs: [HTTP3FrameScanner.Output] = []
        for byte in stream { outputs += [byte].withUnsafeBytes { scanner.scan($0) } }
        guard case .streamType(0x00) = outputs.first else { Issue.record("no stream type"); return }
        let frames = outputs.compactMap { if case .frame(let frame) = $0 { frame } else { nil } }
        #expect(frames.map(\.type) == [0x04, 0x07, 0x21])
        #expect(frames.map(\.length) == [2, 1, 70])
        #expect(frames[1].payload == [0x04])
    }
}
