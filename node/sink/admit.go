package sink

import (
	"fmt"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-crawler/micra/overlay"
)

// AdmitMembers is a Server.Admit that takes carriers only from the live
// members of the network as members sees them (the sink's light member,
// overlay.JoinMembership): a peer whose signed heartbeats it hears and that
// has neither left nor gone silent past the failure timeout. Anyone else
// is answered NOT_MEMBER with the reason: the sender keeps the carrier and
// sends it again, so a crawler the sink has not heard yet (it just joined,
// or the sink just started) loses nothing.
func AdmitMembers(members *overlay.Members) func(peer.ID) error {
	return func(id peer.ID) error {
		mi, ok := members.Member(id)
		switch {
		case !ok:
			return fmt.Errorf("%s is not a member of the network: the sink has heard no heartbeat of it", id)
		case mi.Dead && mi.Reason == overlay.ReasonLeft:
			return fmt.Errorf("%s is not a live member of the network: it left at %s", id, mi.LastSeen.UTC().Format(time.RFC3339))
		case mi.Dead:
			return fmt.Errorf("%s is not a live member of the network: silent since %s", id, mi.LastSeen.UTC().Format(time.RFC3339))
		}
		return nil
	}
}
