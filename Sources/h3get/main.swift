import H3
import ArgumentParser
import Foundation

/// `h3get`: fetches URLs over HTTP/3. Requests and responses arrive with the HTTP/3 issue;
/// until then it checks the URL and says so, and exits with status 2.
struct H3Get: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "h3get",
        abstract: "Fetch URLs over HTTP/3 (not yet: the HTTP/3 layer is the next issue)."
    )

    @Argument(help: "https:// URLs.")
    var urls: [String]

    func validate() throws {
        for url in urls {
            guard let components = URLComponents(string: url), components.scheme == "https",
                components.host?.isEmpty == false
            else { throw ValidationError("'\(url)' is not an https:// URL with a host") }
        }
    }

    func run() throws {
        FileHandle.standardError.write(Data("h3get: HTTP/3 requests are not implemented yet (ALPN \(HTTP3.alpn)); see the HTTP/3 issue\n".utf8))
        throw ExitCode(2)
    }
}

H3Get.main()
