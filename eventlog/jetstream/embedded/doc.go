// Package embedded runs nats-server with JetStream inside the calling process.
//
// It serves two callers. The engine binary, when no NATS URL is configured,
// runs one [Server] on a data directory (./.noeta/nats unless set) so that a
// user needs nothing installed but Go. Tests run a [Server] on t.TempDir(), or a
// [Cluster] of three nodes on loopback to exercise R3 streams, leader changes
// and failover against the real server rather than a mock.
//
// Both listen on loopback only (unless [Config.Host] says otherwise), on ports
// the kernel picks, so parallel test binaries never collide. Both fsync every
// write by default ("sync: always"): an acknowledged append must survive a host
// crash, which nats-server's own 2-minute default does not promise.
//
// [Start] and [StartCluster] return only when JetStream answers API requests
// from a real client, not merely when the server accepts connections
// (ReadyForConnections says nothing about JetStream). There is no auth yet:
// accounts and permissions come from deploy/nats/.
package embedded
