import FoundationEssentials

/// Typed faces of `property(forKey:)`: what Foundation code reads as
/// `stream.property(forKey: .dataWrittenToMemoryStreamKey) as? Data`, without the cast.
extension ByteStream {
    /// The file offset: for a file, where the next read or write happens (`lseek`); for a memory
    /// stream, the bytes consumed or written. Nil where the stream has no offset. As
    /// `property(forKey: .fileCurrentOffset)`.
    public var fileCurrentOffset: UInt64? { property(forKey: .fileCurrentOffset) as? UInt64 }

    /// The descriptor under a file, pipe, tty or socket stream; nil for in-process streams and
    /// once the descriptor is closed. As `property(forKey: .fileDescriptor)`.
    public var fileDescriptor: Int32? { property(forKey: .fileDescriptor) as? Int32 }

    /// The address of the remote end of a socket stream; nil for other kinds.
    public var socketPeerAddress: SocketAddress? { property(forKey: .socketPeerAddress) as? SocketAddress }

    /// The local address of a connected socket stream; nil for other kinds.
    public var socketLocalAddress: SocketAddress? { property(forKey: .socketLocalAddress) as? SocketAddress }

    /// `TCP_NODELAY` on a TCP stream (settable before or after connecting); nil for other kinds.
    public var socketNoDelay: Bool? {
        get { property(forKey: .socketNoDelay) as? Bool }
        set { _ = setProperty(newValue, forKey: .socketNoDelay) }
    }

    /// `SO_KEEPALIVE` on a socket stream; nil for other kinds.
    public var socketKeepAlive: Bool? {
        get { property(forKey: .socketKeepAlive) as? Bool }
        set { _ = setProperty(newValue, forKey: .socketKeepAlive) }
    }

    /// `SO_SNDBUF` in bytes (the kernel reports about twice what was asked); nil for other kinds.
    public var socketSendBufferSize: Int? {
        get { property(forKey: .socketSendBufferSize) as? Int }
        set { _ = setProperty(newValue, forKey: .socketSendBufferSize) }
    }

    /// `SO_RCVBUF` in bytes (the kernel reports about twice what was asked); nil for other kinds.
    public var socketReceiveBufferSize: Int? {
        get { property(forKey: .socketReceiveBufferSize) as? Int }
        set { _ = setProperty(newValue, forKey: .socketReceiveBufferSize) }
    }
}

extension WriteStream {
    /// What a memory stream (`toMemory()`, `toBuffer(capacity:)`) holds, as `Data`; nil for
    /// other kinds. As Foundation's `dataWrittenToMemoryStreamKey`.
    public var dataWrittenToMemory: Data? { property(forKey: .dataWrittenToMemory) as? Data }
}
