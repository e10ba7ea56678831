import H3
import QuicTransport
import Testing

@Suite("HTTP3ErrorCode")
struct HTTP3ErrorCodeTests {
    @Test func knownCodesHaveTheirRFC9114Names() {
        #expect(HTTP3ErrorCode.noError.rawValue == 0x100)
        #expect(HTTP3ErrorCode.requestCancelled.description == "H3_REQUEST_CANCELLED")
        #expect(HTTP3ErrorCode(rawValue: 0x10b) == .requestRejected)
        #expect(HTTP3ErrorCode.qpackDecompressionFailed.description == "QPACK_DECOMPRESSION_FAILED")
    }

    @Test func unknownCodesSurviveAndGreaseIsRecognised() {
        let unknown = HTTP3ErrorCode(rawValue: 0x1234)
        #expect(unknown.rawValue == 0x1234)
        #expect(unknown.description == "unknown (0x1234)")
        #expect(HTTP3ErrorCode(rawValue: 0x21).isGrease)
        #expect(HTTP3ErrorCode(rawValue: 0x21 + 0x1f * 7).isGrease)
        #expect(!HTTP3ErrorCode.noError.isGrease)
    }

    @Test func parametersOfferH3() {
        #expect(HTTP3.parameters().quicOptions.alpn == ["h3"])
    }
}
