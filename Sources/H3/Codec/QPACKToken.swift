import CQuicShims
import Glibc
import HTTPTypes

/// The field names nghttp3 gives a token to (`nghttp3_qpack_token`, public in its header),
/// indexed by token. `host` (token 1000) is left out: HTTP/3 requests carry `:authority`.
enum QPACKToken {
    private static let names: [String?] = {
        let known: [(nghttp3_qpack_token, String)] = [
            (NGHTTP3_QPACK_TOKEN__AUTHORITY, ":authority"),
            (NGHTTP3_QPACK_TOKEN__METHOD, ":method"),
            (NGHTTP3_QPACK_TOKEN__PATH, ":path"),
            (NGHTTP3_QPACK_TOKEN__SCHEME, ":scheme"),
            (NGHTTP3_QPACK_TOKEN__STATUS, ":status"),
            (NGHTTP3_QPACK_TOKEN_ACCEPT, "accept"),
            (NGHTTP3_QPACK_TOKEN_ACCEPT_ENCODING, "accept-encoding"),
            (NGHTTP3_QPACK_TOKEN_ACCEPT_LANGUAGE, "accept-language"),
            (NGHTTP3_QPACK_TOKEN_ACCEPT_RANGES, "accept-ranges"),
            (NGHTTP3_QPACK_TOKEN_ACCESS_CONTROL_ALLOW_CREDENTIALS, "access-control-allow-credentials"),
            (NGHTTP3_QPACK_TOKEN_ACCESS_CONTROL_ALLOW_HEADERS, "access-control-allow-headers"),
            (NGHTTP3_QPACK_TOKEN_ACCESS_CONTROL_ALLOW_METHODS, "access-control-allow-methods"),
            (NGHTTP3_QPACK_TOKEN_ACCESS_CONTROL_ALLOW_ORIGIN, "access-control-allow-origin"),
            (NGHTTP3_QPACK_TOKEN_ACCESS_CONTROL_EXPOSE_HEADERS, "access-control-expose-headers"),
            (NGHTTP3_QPACK_TOKEN_ACCESS_CONTROL_REQUEST_HEADERS, "access-control-request-headers"),
            (NGHTTP3_QPACK_TOKEN_ACCESS_CONTROL_REQUEST_METHOD, "access-control-request-method"),
            (NGHTTP3_QPACK_TOKEN_AGE, "age"),
            (NGHTTP3_QPACK_TOKEN_ALT_SVC, "alt-svc"),
            (NGHTTP3_QPACK_TOKEN_AUTHORIZATION, "authorization"),
            (NGHTTP3_QPACK_TOKEN_CACHE_CONTROL, "cache-control"),
            (NGHTTP3_QPACK_TOKEN_CONTENT_DISPOSITION, "content-disposition"),
            (NGHTTP3_QPACK_TOKEN_CONTENT_ENCODING, "content-encoding"),
            (NGHTTP3_QPACK_TOKEN_CONTENT_LENGTH, "content-length"),
            (NGHTTP3_QPACK_TOKEN_CONTENT_SECURITY_POLICY, "content-security-policy"),
            (NGHTTP3_QPACK_TOKEN_CONTENT_TYPE, "content-type"),
            (NGHTTP3_QPACK_TOKEN_COOKIE, "cookie"),
            (NGHTTP3_QPACK_TOKEN_DATE, "date"),
            (NGHTTP3_QPACK_TOKEN_EARLY_DATA, "early-data"),
            (NGHTTP3_QPACK_TOKEN_ETAG, "etag"),
            (NGHTTP3_QPACK_TOKEN_EXPECT_CT, "expect-ct"),
            (NGHTTP3_QPACK_TOKEN_FORWARDED, "forwarded"),
            (NGHTTP3_QPACK_TOKEN_IF_MODIFIED_SINCE, "if-modified-since"),
            (NGHTTP3_QPACK_TOKEN_IF_NONE_MATCH, "if-none-match"),
            (NGHTTP3_QPACK_TOKEN_IF_RANGE, "if-range"),
            (NGHTTP3_QPACK_TOKEN_LAST_MODIFIED, "last-modified"),
            (NGHTTP3_QPACK_TOKEN_LINK, "link"),
            (NGHTTP3_QPACK_TOKEN_LOCATION, "location"),
            (NGHTTP3_QPACK_TOKEN_ORIGIN, "origin"),
            (NGHTTP3_QPACK_TOKEN_PURPOSE, "purpose"),
            (NGHTTP3_QPACK_TOKEN_RANGE, "range"),
            (NGHTTP3_QPACK_TOKEN_REFERER, "referer"),
            (NGHTTP3_QPACK_TOKEN_SERVER, "server"),
            (NGHTTP3_QPACK_TOKEN_SET_COOKIE, "set-cookie"),
            (NGHTTP3_QPACK_TOKEN_STRICT_TRANSPORT_SECURITY, "strict-transport-security"),
            (NGHTTP3_QPACK_TOKEN_TIMING_ALLOW_ORIGIN, "timing-allow-origin"),
            (NGHTTP3_QPACK_TOKEN_UPGRADE_INSECURE_REQUESTS, "upgrade-insecure-requests"),
            (NGHTTP3_QPACK_TOKEN_USER_AGENT, "user-agent"),
            (NGHTTP3_QPACK_TOKEN_VARY, "vary"),
            (NGHTTP3_QPACK_TOKEN_X_CONTENT_TYPE_OPTIONS, "x-content-type-options"),
            (NGHTTP3_QPACK_TOKEN_X_FORWARDED_FOR, "x-forwarded-for"),
            (NGHTTP3_QPACK_TOKEN_X_FRAME_OPTIONS, "x-frame-options"),
            (NGHTTP3_QPACK_TOKEN_X_XSS_PROTECTION, "x-xss-protection"),
        ]
        var names = [String?](repeating: nil, count: Int(known.map { $0.0.rawValue }.max()!) + 1)
        for (token, name) in known { names[Int(token.rawValue)] = name }
        return names
    }()

    /// The constant for `token`'s name, nil for -1 and tokens left out.
    static func name(of token: Int32) -> String? {
        token >= 0 && token < names.count ? names[Int(token)] : nil
    }

    /// The token of a name in the table, -1 for the others (sections made from strings).
    static func token(of name: String) -> Int32 {
        names.firstIndex(of: name).map { Int32($0) } ?? -1
    }

    /// The names as `HTTPField.Name`s, checked once; nil for the pseudo-header fields, which
    /// are not field names.
    private static let fieldNames: [HTTPField.Name?] = names.map { name in name.flatMap { HTTPField.Name($0) } }

    /// The field name for `token`, made once: a received field with a token skips the name's
    /// validation.
    static func fieldName(of token: Int32) -> HTTPField.Name? {
        token >= 0 && token < fieldNames.count ? fieldNames[Int(token)] : nil
    }

}
