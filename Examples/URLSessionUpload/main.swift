// Uploads a file with URLSession, its body read from a sluice stream bridged to Foundation's
// InputStream: `URLRequest.httpBodyStream = ReadStream.file(atPath:).asInputStream()`. The body
// is read in chunks as URLSession sends it, never held whole in memory.
//
//     swift run URLSessionUpload FILE http://HOST:PORT/PATH
//
// Prints the response status and body; exits 0 on a 2xx status.

import Foundation
import SluiceFoundation

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

let arguments = CommandLine.arguments
guard arguments.count == 3, let url = URL(string: arguments[2]) else {
    FileHandle.standardError.write(Data("usage: URLSessionUpload FILE URL\n".utf8))
    exit(64)
}
let path = arguments[1]
guard let attributes = try? FileManager.default.attributesOfItem(atPath: path),
    let size = attributes[.size] as? NSNumber
else {
    FileHandle.standardError.write(Data("URLSessionUpload: \(path): no such file\n".utf8))
    exit(66)
}

var request = URLRequest(url: url)
request.httpMethod = "PUT"
request.httpBodyStream = ReadStream.file(atPath: path).asInputStream()
request.setValue("\(size.int64Value)", forHTTPHeaderField: "Content-Length")
request.setValue("application/octet-stream", forHTTPHeaderField: "Content-Type")

let done = DispatchSemaphore(value: 0)
nonisolated(unsafe) var status = 0
let task = URLSession.shared.dataTask(with: request) { data, response, error in
    if let error {
        FileHandle.standardError.write(Data("URLSessionUpload: \(url): \(error.localizedDescription)\n".utf8))
    } else if let response = response as? HTTPURLResponse {
        status = response.statusCode
        print("status \(response.statusCode)")
        print(String(decoding: data ?? Data(), as: UTF8.self))
    }
    done.signal()
}
task.resume()
done.wait()
exit((200..<300).contains(status) ? 0 : 69)
