import CQuicShims
import QuicTransport
import Testing

/// QUIC-LB connection IDs (draft-ietf-quic-load-balancers-21): the draft's test vectors (Appendix B),
/// the layouts `QUICConnectionIDFactory` builds on them, and what a host does with another
/// host's IDs.
@Suite("QUIC-LB")
struct QUICLoadBalancerTests {
    private static let vectorKey = hex("8f95f09245765f80256934e50c66207f")

    // MARK: The draft's test vectors

    @Test func plaintextTestVector() throws {
        // Appendix B.1, first row: cr_bits 0, sid c4605e, nonce 4504cc4f.
        let configuration = try QUICLoadBalancerConfiguration(configRotation: 0, serverID: hex("c4605e"), nonceLength: 4)
        let id = configuration.encode(nonce: hex("4504cc4f"), connectionIDLength: 8)
        #expect(id == hex("07c4605e4504cc4f"))
        #expect(configuration.serverID(of: id) == hex("c4605e"))
    }

    @Test func singlePassEncryptedTestVector() throws {
        // Appendix B.2, third row, the single-pass case: cr_bits 2, an 8-byte server ID and an 8-byte nonce.
        let configuration = try QUICLoadBalancerConfiguration(
            configRotation: 2,
            serverID: hex("ed793a51d49b8f5f"),
            nonceLength: 8,
            key: Self.vectorKey
        )
        let id = configuration.encode(nonce: hex("ee080dbf48c0d1e5"), connectionIDLength: 17)
        #expect(id == hex("504dd2d05a7b0de9b2b9907afb5ecf8cc3"))
        #expect(configuration.serverID(of: id) == hex("ed793a51d49b8f5f"))
        #expect(configuration.plaintextBlock(of: id) == hex("ed793a51d49b8f5fee080dbf48c0d1e5"))
    }

    @Test func theBalancerIgnoresOtherCodepointsAndShortIDs() throws {
        let configuration = try QUICLoadBalancerConfiguration(configRotation: 0, serverID: hex("c4605e"), nonceLength: 4)
        #expect(configuration.serverID(of: hex("27c4605e4504cc4f")) == nil, "config rotation 1 is another configuration")
        #expect(configuration.serverID(of: hex("e7c4605e4504cc4f")) == nil, "0b111 is unroutable")
        #expect(configuration.serverID(of: hex("06c4605e4504cc")) == nil, "too short for server ID and nonce")
    }

    // MARK: Configuration

    @Test func defaultNonceLengthsKeepIDsAt18BytesWherePossible() throws {
        for length in 1...8 {
            let plaintext = try QUICLoadBalancerConfiguration(serverID: [UInt8](repeating: 1, count: length))
            #expect(plaintext.nonceLength == 12 - length)
            #expect(plaintext.connectionIDLength == 18)
        }
        let long = try QUICLoadBalancerConfiguration(serverID: [UInt8](repeating: 1, count: 10))
        #expect(long.nonceLength == 4)
        #expect(long.connectionIDLength == 20)
        for length in 1...12 {
            let encrypted = try QUICLoadBalancerConfiguration(serverID: [UInt8](repeating: 1, count: length), key: Self.vectorKey)
            #expect(encrypted.nonceLength == 16 - length)
            #expect(encrypted.connectionIDLength == 18)
        }
    }

    @Test func invalidConfigurationsAreRefusedWithAReason() {
        func error(_ make: () throws -> QUICLoadBalancerConfiguration) -> QUICLoadBalancerConfigurationError? {
            do {
                _ = try make()
                return nil
            } catch let error as QUICLoadBalancerConfigurationError {
                return error
            } catch {
                return nil
            }
        }
        let sid: [UInt8] = [0x0a, 0x01]
        #expect(error { try .init(configRotation: 7, serverID: sid) } == .invalidConfigRotation(7))
        #expect(error { try .init(configRotation: 8, serverID: sid) } == .invalidConfigRotation(8))
        #expect(error { try .init(serverID: []) } == .emptyServerID)
        #expect(error { try .init(serverID: sid, nonceLength: 3) } == .nonceTooShort(3))
        #expect(error { try .init(serverID: sid, key: [1, 2, 3]) } == .invalidKeyLength(3))
        #expect(error { try .init(serverID: sid, nonceLength: 4, key: Self.vectorKey) } == .fourPassNotSupported(serverIDLength: 2, nonceLength: 4))
        #expect(error { try .init(serverID: [UInt8](repeating: 0, count: 13), key: Self.vectorKey) } == .serverIDTooLong(13, maximum: 12))
        #expect(error { try .init(serverID: [UInt8](repeating: 0, count: 11)) } == .serverIDTooLong(11, maximum: 10))
        #expect(error { try .init(serverID: sid, nonceLength: 13) } == .connectionIDTooLong(serverIDLength: 2, nonceLength: 13))

        #expect("\(QUICLoadBalancerConfigurationError.invalidConfigRotation(7))".contains("reserved for unroutable"))
        #expect("\(QUICLoadBalancerConfigurationError.fourPassNotSupported(serverIDLength: 2, nonceLength: 4))".contains("four-pass"))
        #expect("\(QUICLoadBalancerConfigurationError.connectionIDTooLong(serverIDLength: 2, nonceLength: 13))".contains("20"))
    }

    // MARK: The factory's layouts

    @Test(arguments: [false, true])
    func serverIDAndWorkerComeBackFromEveryWorkersIDs(encrypted: Bool) throws {
        let configuration = try QUICLoadBalancerConfiguration(
            configRotation: 3,
            serverID: hex("0a0102"),
            key: encrypted ? Self.vectorKey : nil
        )
        let factory = QUICConnectionIDFactory(loadBalancer: configuration)
        #expect(factory.idLength == 18)
        #expect(factory.workerByteOffset == 17)
        for worker in [0, 1, 5, 255] as [UInt8] {
            let workerFactory = factory.forWorker(worker)
            var ids = Set<QUICConnectionID>()
            for _ in 0..<50 {
                let id = workerFactory.makeConnectionID()
                ids.insert(id)
                #expect(id.count == 18)
                #expect(id.bytes[0] == 3 << 5 | 17, "config rotation 3, length self-description 17 (§3)")
                #expect(configuration.serverID(of: id.bytes) == hex("0a0102"))
                #expect(id.withUnsafeBytes { factory.worker(of: $0) } == worker)
                #expect(id.withUnsafeBytes { factory.isIssuedHere($0) })
                if encrypted {
                    #expect(configuration.plaintextBlock(of: id.bytes)?.last == worker, "the worker is inside the block")
                } else {
                    #expect(Array(id.bytes[1...3]) == hex("0a0102"), "plaintext: the server ID in clear")
                }
            }
            #expect(ids.count == 50)
        }
    }

    @Test func encryptedIDsOfTwoWorkersNeverShareACiphertext() throws {
        // Same nonce bytes but the last: the worker byte inside the block changes the whole block.
        let configuration = try QUICLoadBalancerConfiguration(serverID: hex("0a0102"), key: Self.vectorKey)
        let nonce = [UInt8](0..<12)
        let first = configuration.encode(nonce: nonce + [0], connectionIDLength: 18)
        let second = configuration.encode(nonce: nonce + [1], connectionIDLength: 18)
        #expect(first[0] == second[0])
        #expect(zip(first.dropFirst(), second.dropFirst()).filter { $0 != $1 }.count > 8)
    }

    @Test(arguments: [false, true])
    func anotherHostsIDsAreNotIssuedHere(encrypted: Bool) throws {
        let secret = [UInt8](repeating: 7, count: 32)
        let key = encrypted ? Self.vectorKey : nil
        let here = QUICConnectionIDFactory(
            secret: secret,
            loadBalancer: try QUICLoadBalancerConfiguration(serverID: hex("0a01"), key: key)
        )
        let sameSecretOtherHost = QUICConnectionIDFactory(
            secret: secret,
            loadBalancer: try QUICLoadBalancerConfiguration(serverID: hex("0a02"), key: key)
        )
        let otherSecretSameServerID = QUICConnectionIDFactory(
            secret: [UInt8](repeating: 8, count: 32),
            loadBalancer: try QUICLoadBalancerConfiguration(serverID: hex("0a01"), key: key)
        )
        let otherRotation = QUICConnectionIDFactory(
            secret: secret,
            loadBalancer: try QUICLoadBalancerConfiguration(configRotation: 1, serverID: hex("0a01"), key: key)
        )
        let unconfigured = QUICConnectionIDFactory(secret: secret)
        for _ in 0..<20 {
            #expect(!sameSecretOtherHost.makeConnectionID().withUnsafeBytes { here.isIssuedHere($0) })
            #expect(!otherRotation.makeConnectionID().withUnsafeBytes { here.isIssuedHere($0) })
            #expect(!unconfigured.makeConnectionID().withUnsafeBytes { here.isIssuedHere($0) })
            #expect(!here.makeConnectionID().withUnsafeBytes { unconfigured.isIssuedHere($0) })
        }
        // Encrypted IDs check the secret through the worker byte's mask only (one byte), so a
        // stranger's ID passes now and then: count rather than demand every one.
        let accepted = (0..<200).filter { _ in otherSecretSameServerID.makeConnectionID().withUnsafeBytes { here.isIssuedHere($0) } }
        #expect(accepted.count <= (encrypted ? 10 : 0), "\(accepted.count) of 200 IDs from another secret passed")
    }

    @Test func hostsThatShareASecretMakeDifferentResetTokens() throws {
        let secret = [UInt8](repeating: 7, count: 32)
        let first = QUICConnectionIDFactory(secret: secret, loadBalancer: try QUICLoadBalancerConfiguration(serverID: hex("0a01")))
        let second = QUICConnectionIDFactory(secret: secret, loadBalancer: try QUICLoadBalancerConfiguration(serverID: hex("0a02")))
        let id = first.makeConnectionID()
        #expect(first.statelessResetToken(for: id) != second.statelessResetToken(for: id))
        #expect(first.statelessResetToken(for: id) == first.forWorker(1).statelessResetToken(for: id), "every worker of a host agrees")
        let restarted = QUICConnectionIDFactory(secret: secret, loadBalancer: try QUICLoadBalancerConfiguration(serverID: hex("0a01")))
        #expect(first.statelessResetToken(for: id) == restarted.statelessResetToken(for: id), "tokens outlive connection state")
    }

    /// Tokens are 16 bytes (RFC 9000 §10.3) and differ per ID, including IDs that differ only
    /// in length, which the CBC-MAC's length byte keeps apart.
    @Test func resetTokensDifferPerConnectionID() {
        let factory = QUICConnectionIDFactory(secret: [UInt8](repeating: 9, count: 32))
        let tokens = (0..<200).map { _ in factory.statelessResetToken(for: factory.makeConnectionID()) }
        #expect(tokens.allSatisfy { $0.count == 16 })
        #expect(Set(tokens).count == tokens.count)
        let short = QUICConnectionID([1, 2, 3])
        let padded = QUICConnectionID([1, 2, 3, 0])
        #expect(factory.statelessResetToken(for: short) != factory.statelessResetToken(for: padded))
        let longest = QUICConnectionID([UInt8](repeating: 0xff, count: QUICConnectionID.maximumLength))
        #expect(factory.statelessResetToken(for: longest).count == 16)
    }

    @Test func unconfiguredIDsKeepTheirLayout() {
        let factory = QUICConnectionIDFactory()
        let id = factory.makeConnectionID()
        #expect(factory.loadBalancer == nil)
        #expect(id.count == 18)
        #expect(id.bytes[0] == 0b111 << 5 | 17)
        #expect(id.withUnsafeBytes { factory.isIssuedHere($0) })
    }

    /// The tags and reset tokens rest on AES128Block. Its CBC-MAC must be the last block of
    /// AES-128-CBC under a zero IV, here as GnuTLS computes it, and its single-block encryption
    /// the first block of the same.
    @Test func theBlockCipherAgreesWithGnuTLSCBC() throws {
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<50 {
            let key = (0..<16).map { _ in UInt8.random(in: 0...255, using: &generator) }
            let message = (0..<32).map { _ in UInt8.random(in: 0...255, using: &generator) }
            let cipher = try #require(AES128Block(key: key))
            var mac = [UInt8](repeating: 0, count: 16)
            message.withUnsafeBytes { message in mac.withUnsafeMutableBytes { cipher.cbcMAC(message, into: $0) } }
            let cbc = try Self.gnutlsCBC(key: key, message)
            #expect(mac == Array(cbc.suffix(16)))
            #expect(cipher.encrypt(Array(message.prefix(16))) == Array(cbc.prefix(16)))
            #expect(cipher.decrypt(cipher.encrypt(Array(message.prefix(16)))) == Array(message.prefix(16)))
        }
    }

    private static func gnutlsCBC(key: [UInt8], _ message: [UInt8]) throws -> [UInt8] {
        var key = key
        var iv = [UInt8](repeating: 0, count: 16)
        var out = [UInt8](repeating: 0, count: message.count)
        var handle: gnutls_cipher_hd_t?
        let rv = key.withUnsafeMutableBufferPointer { key in
            iv.withUnsafeMutableBufferPointer { iv in
                var keyDatum = gnutls_datum_t(data: key.baseAddress, size: 16)
                var ivDatum = gnutls_datum_t(data: iv.baseAddress, size: 16)
                return gnutls_cipher_init(&handle, GNUTLS_CIPHER_AES_128_CBC, &keyDatum, &ivDatum)
            }
        }
        try #require(rv == 0)
        defer { gnutls_cipher_deinit(handle) }
        try #require(gnutls_cipher_encrypt2(handle, message, message.count, &out, out.count) == 0)
        return out
    }
}

private func hex(_ text: String) -> [UInt8] { Hex.decode(text)! }
