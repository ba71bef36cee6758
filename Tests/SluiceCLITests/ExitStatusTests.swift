import Testing

@testable import Sluice
@testable import SluiceCLI

@Suite struct ExitStatusTests {
    @Test func libraryErrorsMapToSysexits() {
        func status(_ code: SluiceError.Code, _ phase: FailurePhase) -> SluiceCLI.ExitStatus {
            CLIError.status(for: SluiceError(code, operation: "x"), during: phase)
        }
        #expect(status(.corruptData, .copying(.stage(index: 0, name: "inflate"))) == .dataError)
        #expect(status(.truncatedData, .copying(.stage(index: 0, name: "inflate"))) == .dataError)
        #expect(status(.limitExceeded, .copying(.sink)) == .dataError)
        #expect(status(.system(.noSuchFile), .openingSource) == .noInput)
        #expect(status(.system(.noSuchFile), .copying(.source)) == .ioError)
        #expect(status(.system(.connectionRefused), .openingSource) == .unavailable)
        #expect(status(.system(.connectionRefused), .creatingDestination) == .unavailable)
        #expect(status(.unknownHost("no"), .creatingDestination) == .unavailable)
        #expect(status(.system(.permissionDenied), .creatingDestination) == .cannotCreate)
        #expect(status(.system(.fileExists), .creatingDestination) == .cannotCreate)
        #expect(status(.system(.noSpace), .copying(.sink)) == .ioError)
        #expect(status(.system(.connectionReset), .copying(.source)) == .ioError)
        #expect(status(.cancelled, .copying(.sink)) == .interrupted)
    }
}
