/// A configured transport performs requests through the implementation it names.
extension DownloadTask.Transport: HTTPTransport {
    func execute(_ request: TransportRequest, consumer: some ResponseConsumer) async throws(ResumableError) {
        let transport = try resolved()
        switch transport.kind {
        case .libcurl:
            let library = try CurlLibrary.load(transport.libraryName).get()
            try await CurlTransport(library: library).execute(request, consumer: consumer)
        case .custom(let custom):
            try await custom.transport.execute(request, consumer: consumer)
        case .urlSession, .automatic:
            try await URLSessionTransport().execute(request, consumer: consumer)
        }
    }
}
