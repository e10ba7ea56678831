import HTTPTypes

extension HTTPField.Name {
    /// `Alt-Svc` (RFC 7838 §3).
    public static var altSvc: HTTPField.Name { HTTPField.Name("alt-svc")! }
}
