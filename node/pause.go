package node

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/micra-crawler/micra/overlay"
)

// Pausing the crawl from the control API (POST /v1/pause, /v1/resume;
// `micra pause`, `micra resume`; the console's button): the engine starts
// no new fetch (those in flight finish) and keeps everything queued, while
// the node stays a member, takes hand-offs and seeds (queued), answers
// probes and delivers its outbox. crawl.Engine.Pause has the details.

// PauseFile in the data directory marks a paused crawler, so a node
// restarted while paused stays paused until resumed.
const PauseFile = "paused"

// PauseInfo is POST /v1/pause's and /v1/resume's answer.
type PauseInfo struct {
	Paused bool       `json:"paused"`
	Since  *time.Time `json:"since,omitempty"` // when it was paused
	// Changed: this request paused (or resumed) the crawl; false when it
	// already was.
	Changed bool `json:"changed"`
	// HeldWorkers wait at the pause gate; the others are finishing the
	// fetch they had in flight.
	HeldWorkers int   `json:"held_workers"`
	Queued      int64 `json:"queued"` // URLs kept queued
	// Warning: the pause took effect but will not survive a restart.
	Warning string `json:"warning,omitempty"`
}

// errNoCrawler answers a pause or resume of a node without the crawler
// role.
var errNoCrawler = errors.New("this node has no crawler role: nothing to pause or resume")

// Pause stops the crawl's new fetches and remembers it in DataDir/paused.
func (n *Node) Pause() (PauseInfo, error) {
	if n.eng == nil {
		return PauseInfo{}, errNoCrawler
	}
	changed := n.eng.Pause()
	var warn error
	if changed {
		warn = overlay.WriteFileAtomic(filepath.Join(n.cfg.DataDir, PauseFile), []byte(time.Now().UTC().Format(time.RFC3339)+"\n"), 0o600)
	}
	return n.pauseInfo(changed, warn), nil
}

// Resume lets a paused crawl go on and forgets DataDir/paused.
func (n *Node) Resume() (PauseInfo, error) {
	if n.eng == nil {
		return PauseInfo{}, errNoCrawler
	}
	changed := n.eng.Resume()
	var warn error
	if err := os.Remove(filepath.Join(n.cfg.DataDir, PauseFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		warn = err
	}
	return n.pauseInfo(changed, warn), nil
}

func (n *Node) pauseInfo(changed bool, warn error) PauseInfo {
	st := n.eng.Paused()
	v := PauseInfo{Paused: st.Paused, Changed: changed, HeldWorkers: st.Held, Queued: n.eng.Stats().Queued}
	if st.Paused {
		t := st.Since
		v.Since = &t
	}
	if warn != nil {
		v.Warning = fmt.Sprintf("the pause file could not be updated, so a restart may not keep this state: %v", warn)
	}
	return v
}

// restorePause pauses the engine of a node that was paused when it
// stopped.
func (n *Node) restorePause() {
	if n.eng == nil {
		return
	}
	if _, err := os.Stat(filepath.Join(n.cfg.DataDir, PauseFile)); err == nil {
		n.eng.Pause()
		n.log.Info("crawl paused, as it was when the node stopped (micra resume, or the console, resumes it)")
	}
}

func (n *Node) servePause(w http.ResponseWriter, r *http.Request) {
	n.servePauseWith(w, n.Pause)
}

func (n *Node) serveResume(w http.ResponseWriter, r *http.Request) {
	n.servePauseWith(w, n.Resume)
}

func (n *Node) servePauseWith(w http.ResponseWriter, f func() (PauseInfo, error)) {
	v, err := f()
	if err != nil {
		writeError(w, http.StatusConflict, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}
