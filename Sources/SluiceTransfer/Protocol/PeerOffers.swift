/// The capabilities of a peer that a sender's machine asks about for every entry (what an
/// entry's announcement may say, whether its link or attributes may go), looked up once when
/// HELLO sets them: a look-up in the set of names hashes the name, several times a file.
struct PeerOffers: Equatable, Sendable {
    let links: Bool
    let xattrs: Bool
    let owners: Bool
    let delta: Bool
    let resume: Bool
    let batch: Bool
    let eager: Bool
    let eagerResume: Bool
    let deltaResume: Bool
    let deflate: Bool
    let holes: Bool
    let specials: Bool
    let heldSHA256: Bool
    let resumeToken: Bool
    let watch: Bool
    let delete: Bool

    /// The capabilities among `capabilities` (the peer's HELLO).
    init(_ capabilities: Set<String>) {
        links = capabilities.contains(Wire.Capability.links)
        xattrs = capabilities.contains(Wire.Capability.xattrs)
        owners = capabilities.contains(Wire.Capability.owners)
        delta = capabilities.contains(Wire.Capability.delta)
        resume = capabilities.contains(Wire.Capability.resume)
        batch = capabilities.contains(Wire.Capability.batch)
        eager = capabilities.contains(Wire.Capability.eager)
        eagerResume = capabilities.contains(Wire.Capability.eagerResume)
        deltaResume = capabilities.contains(Wire.Capability.deltaResume)
        deflate = capabilities.contains(Wire.Capability.deflate)
        holes = capabilities.contains(Wire.Capability.holes)
        specials = capabilities.contains(Wire.Capability.specials)
        heldSHA256 = capabilities.contains(Wire.Capability.heldSHA256)
        resumeToken = capabilities.contains(Wire.Capability.resumeToken)
        watch = capabilities.contains(Wire.Capability.watch)
        delete = capabilities.contains(Wire.Capability.delete)
    }
}
