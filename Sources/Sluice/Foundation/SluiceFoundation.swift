// The module SluiceFoundation: sluice's bridges to Foundation's streams. Importing it imports
// Sluice as well, so that code speaking Foundation needs one import.
@_exported import Sluice
