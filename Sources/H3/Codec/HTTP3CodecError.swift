import CQuicShims
@_spi(StreamTable) import QuicTransport

/// An nghttp3 call that failed outside the read and write loops.
package struct HTTP3CodecError: Error, CustomStringConvertible {
    package let function: String
    package let code: Int32
    package var description: String { "\(function) failed: \(String(cString: nghttp3_strerror(code)))" }
}
