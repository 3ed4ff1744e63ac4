// Package hostile owns micra's hostile peer and the flood experiment behind
// `micra bench flood`: one real victim (a `micra node` process on loopback,
// in a network with admission or an open one) and, from the bench's
// process, one machine's attack on it — many peer identities announced
// over one connection as validly signed gossip heartbeats, maximal
// hand-offs as fast as the victim answers them, and many concurrent
// streams of every micra protocol and of the DHT, held open or reset. The
// victim's resident memory is sampled idle (the reference) and under the
// flood, and what it counted is read from its control API's /metrics.
//
// Everything here talks to loopback addresses only.
package hostile
