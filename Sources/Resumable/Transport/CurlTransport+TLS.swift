import CResumable
import Foundation

extension CurlTransport {
    /// Sets the HTTP version and every TLS option of `tls` on an easy handle.
    ///
    /// - HTTP/2 over TLS when the server offers it in ALPN, HTTP/1.1 otherwise and always for plain http
    ///   (`CURL_HTTP_VERSION_2TLS`); HTTP/1.1 alone when this libcurl was built without HTTP/2.
    /// - Verification of the chain and the host name is always on (`SSL_VERIFYPEER` 1, `SSL_VERIFYHOST` 2).
    /// - ``DownloadTask/TLS/Trust/system`` leaves libcurl's built-in CA bundle and directory; any other trust sets
    ///   `CAINFO` and `CAPATH` to exactly the locations named and clears the other one, so the system store is not
    ///   consulted.
    /// - A client certificate sets `SSLCERT`, `SSLKEY` and `KEYPASSWD` (PEM); a pin sets `PINNEDPUBLICKEY`.
    ///
    /// - Throws: ``ResumableError/Code/invalidRequest`` when libcurl refuses an option (a TLS backend without
    ///   pinning or CA directories, say).
    static func configureTLS(
        _ tls: DownloadTask.TLS, on easy: UnsafeMutableRawPointer, library: CurlLibrary
    ) throws(ResumableError) {
        let table = library.table
        func fail(_ name: String, _ code: Int32) -> ResumableError {
            ResumableError(.invalidRequest, "curl option \(name): \(library.describe(code))")
        }
        func set(_ option: Int32, _ name: String, _ value: Int) throws(ResumableError) {
            let code = cresumable_curl_easy_setopt_long(table, easy, option, value)
            if code != CRESUMABLE_CURLE_OK { throw fail(name, code) }
        }
        /// Sets a string option (curl copies it), or clears it with `nil`.
        func set(_ option: Int32, _ name: String, _ value: String?) throws(ResumableError) {
            let code: Int32
            if let value {
                code = cresumable_curl_easy_setopt_pointer(table, easy, option, value)
            } else {
                code = cresumable_curl_easy_setopt_pointer(table, easy, option, nil)
            }
            if code != CRESUMABLE_CURLE_OK { throw fail(name, code) }
        }

        if cresumable_curl_easy_setopt_long(
            table, easy, CRESUMABLE_CURLOPT_HTTP_VERSION, Int(CRESUMABLE_CURL_HTTP_VERSION_2TLS)) != CRESUMABLE_CURLE_OK
        {
            try set(CRESUMABLE_CURLOPT_HTTP_VERSION, "HTTP_VERSION", Int(CRESUMABLE_CURL_HTTP_VERSION_1_1))
        }
        try set(CRESUMABLE_CURLOPT_SSL_VERIFYPEER, "SSL_VERIFYPEER", 1)
        try set(CRESUMABLE_CURLOPT_SSL_VERIFYHOST, "SSL_VERIFYHOST", 2)

        let trust = tls.trust.locations
        if !trust.system {
            try set(CRESUMABLE_CURLOPT_CAINFO, "CAINFO", trust.file)
            try set(CRESUMABLE_CURLOPT_CAPATH, "CAPATH", trust.directory)
        }
        if let client = tls.clientCertificate {
            try set(CRESUMABLE_CURLOPT_SSLCERT, "SSLCERT", client.certificate.path)
            if let key = client.key {
                try set(CRESUMABLE_CURLOPT_SSLKEY, "SSLKEY", key.path)
            }
            if let passphrase = client.passphrase {
                try set(CRESUMABLE_CURLOPT_KEYPASSWD, "KEYPASSWD", passphrase)
            }
        }
        if let pin = tls.pinnedPublicKey {
            try set(CRESUMABLE_CURLOPT_PINNEDPUBLICKEY, "PINNEDPUBLICKEY", pin.curlValue)
        }
    }
}
