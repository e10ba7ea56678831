#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif
import CQuicShims
import HTTPTypes
import NIOConcurrencyHelpers
import NIOCore
import QuicTransport

/// An opened file with the response fields that describe it, made once per lookup and shared,
/// with one reference count, by every response that serves it.
final class HTTP3ServedFile: Sendable {
    /// What describes the file beyond its type and length: its change time, the handler's
    /// caching policy, and its content coding when it is a precompressed sibling.
    struct Description: Sendable {
        /// Seconds since 1970 of the file's last change.
        var modified = 0
        var cacheControl: String?
        /// `br` or `gzip` for a precompressed sibling (RFC 9110 §8.4.1); nil for the file itself.
        var encoding: String?
        /// Whether responses carry `vary: accept-encoding` (RFC 9110 §12.5.5).
        var variesByEncoding = false
    }

    let reader: HTTP3FileReader
    /// `content-type`, from the name the file was opened under.
    let contentType: HTTPField
    /// The fields every response carries (`alt-svc`, for one).
    let additionalFields: HTTPFields
    /// `ETag` and `Last-Modified`, made when the file was opened (RFC 9110 §8.8).
    let validators: HTTP3FileValidators
    /// The content coding of a precompressed sibling; nil for the file itself.
    let encoding: String?
    /// The precompressed siblings, in the order preferred (`br`, then `gzip`).
    let encodedVariants: [HTTP3ServedFile]
    /// `content-encoding`, `etag`, `last-modified`, `cache-control` and `vary`, as every
    /// response for the file carries them.
    private let describingFields: HTTPFields
    /// The head of a 304 (and 412): the validators and caching fields a 200 would carry
    /// (RFC 9110 §15.4.5), then the handler's additional fields.
    let notModifiedFields: HTTPFields
    /// The whole file's response head, made once and shared: 200 with `content-type`,
    /// `accept-ranges` and `content-length` (RFC 9110 §8.3, §14.3, §8.6), the describing
    /// fields, then the handler's additional fields.
    let wholeFile: HTTP3PreparedHead
    /// The answers to a GET and to a HEAD of the whole file, made once: a request for it is
    /// answered by counting one reference.
    let wholeFileResponse: HTTP3ServerResponse
    let wholeFileHeadResponse: HTTP3ServerResponse

    init(
        reader: HTTP3FileReader, contentType: String, additionalFields: HTTPFields = [:], description: Description = Description(),
        encodedVariants: [HTTP3ServedFile] = []
    ) {
        self.reader = reader
        self.contentType = HTTPField(name: .contentType, value: contentType)
        self.additionalFields = additionalFields
        self.encoding = description.encoding
        self.encodedVariants = encodedVariants
        validators = HTTP3FileValidators(modified: description.modified, size: reader.size, encoding: description.encoding)
        var describing = HTTPFields()
        if let encoding = description.encoding { describing.append(HTTPField(name: .contentEncoding, value: encoding)) }
        describing.append(HTTPField(name: .eTag, value: validators.entityTag))
        describing.append(HTTPField(name: .lastModified, value: validators.lastModified))
        if let cacheControl = description.cacheControl { describing.append(HTTPField(name: .cacheControl, value: cacheControl)) }
        if description.variesByEncoding { describing.append(Self.varyByEncoding) }
        describingFields = describing
        var notModified = describing
        // A 304 describes the selected representation, not its encoding (RFC 9110 §15.4.5).
        notModified[.contentEncoding] = nil
        notModified.append(contentsOf: additionalFields)
        notModifiedFields = notModified
        var fields = HTTPFields()
        fields.reserveCapacity(3 + describing.count + additionalFields.count)
        fields.append(self.contentType)
        fields.append(Self.acceptRanges)
        fields.append(HTTPField(name: .contentLength, value: String(reader.size)))
        fields.append(contentsOf: describing)
        fields.append(contentsOf: additionalFields)
        wholeFile = HTTP3PreparedHead(HTTPResponse(status: .ok, headerFields: fields))
        reader.keepWholeFileFields(wholeFile.encoded)
        wholeFileResponse = HTTP3ServerResponse(prepared: wholeFile, file: HTTP3FileRegion(reader: reader, range: 0..<reader.size))
        wholeFileHeadResponse = HTTP3ServerResponse(prepared: wholeFile, file: nil)
    }

    private static let acceptRanges = HTTPField(name: .acceptRanges, value: "bytes")
    private static let varyByEncoding = HTTPField(name: .vary, value: "accept-encoding")

    /// The fields of a byte-range answer (206 or 416, RFC 9110 §14.4): `content-length` only
    /// when a range is sent.
    func fields(contentRange: String, length: Int?) -> HTTPFields {
        var fields = HTTPFields()
        fields.reserveCapacity(4 + describingFields.count + additionalFields.count)
        fields.append(contentType)
        fields.append(Self.acceptRanges)
        fields.append(HTTPField(name: .contentRange, value: contentRange))
        if let length { fields.append(HTTPField(name: .contentLength, value: String(length))) }
        fields.append(contentsOf: describingFields)
        fields.append(contentsOf: additionalFields)
        return fields
    }

    /// The representation to send a client whose `accept-encoding` is `accepted`: the first
    /// sibling whose coding it accepts with the highest weight (RFC 9110 §12.5.3), else this file.
    func variant(accepting accepted: String) -> HTTP3ServedFile {
        var best: (file: HTTP3ServedFile, weight: Double)?
        for variant in encodedVariants {
            guard let coding = variant.encoding else { continue }
            let weight = HTTP3FileHandler.acceptedWeight(of: coding, in: accepted)
            if weight > 0, weight > best?.weight ?? 0 { best = (variant, weight) }
        }
        return best?.file ?? self
    }
}
