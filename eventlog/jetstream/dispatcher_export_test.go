package jetstream

import "github.com/nats-io/nats.go/jetstream"

// ApplyIngressForTest applies one wake-ingress message as the ingress
// consumer would, so a test can hand a Dispatcher a real message a second
// time (a redelivery) without waiting for the server's ack timeout.
func ApplyIngressForTest(d *Dispatcher, m jetstream.Msg) { d.applyIngress(m) }
