import Logging
extension NWConnectionGroup {
    /// Connects to a `.service` endpoint: resolves it through DNS-SD, then connects to its host
    /// and port, trying each address found. The host's name is the TLS server name. Loop-confined.
    func resolveService(name: String, type: String, domain: String, interface: NWInterface?) {
        let resolution = DNSServiceResolution { result in
            self.eventLoop.execute {
                // Cancelled meanwhile: `cancel` dropped the resolution and ended the group.
                guard self.serviceResolution != nil else { return }
                self.serviceResolution = nil
                switch result {
                case .success(let target):
                    self.logger.debug(
                        "resolved service", metadata: ["service": "\(name).\(type).\(domain)", "host": "\(target.host)", "port": "\(target.port)"]
                    )
                    self.connect(host: target.host, port: target.port, addresses: target.addresses)
                case .failure(let error):
                    self.logger.notice("cannot resolve service \(name).\(type).\(domain): \(error)")
                    self.setState(.failed(error))
                    self.failAllStreams(error)
                }
            }
        }
        serviceResolution = resolution
        resolution.start(name: name, type: type, domain: domain, interface: interface)
    }
}
