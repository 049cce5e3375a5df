import Foundation
import Resumable

/// The tls options `get` and `resume` share. Skeleton: filled in by the tls work.
struct TLSOptions: Sendable {
    /// The arguments, in help order.
    static let arguments: [ArgumentSpec] = []

    /// Reads the options from a parse.
    init(_ parsed: ParsedArguments) throws(UsageError) {}

    /// Sets what these options say on `configuration`.
    func apply(to configuration: inout DownloadTask.Configuration) {}
}
