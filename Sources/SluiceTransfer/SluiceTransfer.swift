// The module SluiceTransfer: the transfer layer (the protocol, the sender's and the receiver's
// sessions, the store that keeps the receiver's promises, the walk of a source tree), built on
// the Sluice stream library. The core never names one of its types; the compiler keeps the
// layers. Importing it imports Sluice as well, so that a program sending files needs one import.
@_exported import Sluice
